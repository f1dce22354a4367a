"""What Sieve tells: metrics, the access and audit logs, savings and prices, the
provider's usage read and bounded.
"""

from gateway.telemetry.access_log import AccessLine, access_lines_to, log_access
from gateway.telemetry.audit import AuditEntry, AuditLog, MessageDecision, Timings
from gateway.telemetry.signals import conversation_signals
from gateway.telemetry.metrics import (
    EmbeddingOutcome,
    ExpandOutcome,
    FailOpen,
    Metrics,
    Outcome,
    UsageAnomaly,
)
from gateway.telemetry.pricing import PriceBook
from gateway.telemetry.recording import (
    CohortFigures,
    LabelBounds,
    RequestFigures,
    RequestRecorder,
    transformation_reasons,
)
from gateway.telemetry.redaction import protect_logs, redact_url, scrub, without_secrets
from gateway.telemetry.savings import (
    OriginalPrompt,
    SavingsRecord,
    ShadowSavings,
    expand_rounds_only,
    savings_for_request,
    shadow_savings,
    with_expand_rounds,
)
from gateway.telemetry.usage import Usage, usage_from_provider
from gateway.telemetry.usage_bounds import (
    Charge,
    DEFAULT_CEILING,
    bounded_figures,
    bounded_usage,
    usage_is_readable,
)

__all__ = [
    "AccessLine",
    "AuditEntry",
    "AuditLog",
    "Charge",
    "CohortFigures",
    "DEFAULT_CEILING",
    "EmbeddingOutcome",
    "ExpandOutcome",
    "FailOpen",
    "LabelBounds",
    "MessageDecision",
    "Metrics",
    "OriginalPrompt",
    "Outcome",
    "PriceBook",
    "RequestFigures",
    "RequestRecorder",
    "SavingsRecord",
    "ShadowSavings",
    "Timings",
    "Usage",
    "UsageAnomaly",
    "access_lines_to",
    "bounded_figures",
    "bounded_usage",
    "conversation_signals",
    "expand_rounds_only",
    "log_access",
    "protect_logs",
    "redact_url",
    "savings_for_request",
    "scrub",
    "shadow_savings",
    "transformation_reasons",
    "usage_from_provider",
    "usage_is_readable",
    "with_expand_rounds",
    "without_secrets",
]
