"""What a request can be billed: budgets and their windows, the reservation estimate, image tokens (pure).
"""

from gateway.billing.budgets import (
    Bucket,
    BudgetConfig,
    BudgetLimit,
    BudgetStatus,
    MAX_TOKENS,
    Reservation,
    Scope,
    Settlement,
    Window,
    bucket_for,
    budget_exceeded,
    check_tokens,
    new_reservation_id,
    reservation_org,
    utc_iso,
)
from gateway.billing.reservation_estimate import (
    CLAUDE_TEXT_MARGIN,
    OUTPUT_CAPS,
    ReservationEstimate,
    estimate_reservation,
)

__all__ = [
    "Bucket",
    "BudgetConfig",
    "BudgetLimit",
    "BudgetStatus",
    "CLAUDE_TEXT_MARGIN",
    "MAX_TOKENS",
    "OUTPUT_CAPS",
    "Reservation",
    "ReservationEstimate",
    "Scope",
    "Settlement",
    "Window",
    "bucket_for",
    "budget_exceeded",
    "check_tokens",
    "estimate_reservation",
    "new_reservation_id",
    "reservation_org",
    "utc_iso",
]
