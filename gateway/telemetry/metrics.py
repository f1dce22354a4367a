"""Every Prometheus metric Sieve exports, defined in one place.

The names are a contract (docs/contracts.md): the Grafana dashboard, the
alert rules and the tests read them. Labels stay bounded: org names come from
configuration, models from the routed model list (anything else is reported
as ``other``), never a request id, user text or a raw key.

Sieve runs one uvicorn worker per process and scales out with replicas (pods),
so each process serves its own registry; Prometheus sums across pods.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gateway.pruning import Action, Cohort
from gateway.telemetry.tally import Tally

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)



class Outcome(StrEnum):
    """The ``outcome`` label of ``sieve_requests_total``: how one request ended."""

    OK = "ok"
    PRUNED = "pruned"
    PASSTHROUGH = "passthrough"
    CLIENT_ERROR = "client_error"
    UPSTREAM_ERROR = "upstream_error"
    BUDGET_REJECTED = "budget_rejected"
    FAIL_OPEN = "fail_open"          # served although a dependency failed
    FAIL_CLOSED = "fail_closed"      # refused because one did (a store outage under a fail-closed policy)
    UNAUTHORIZED = "unauthorized"
    INTERNAL_ERROR = "internal_error"  # a bug answered with a 500


OUTCOMES = tuple(Outcome)


class FailOpen(StrEnum):
    """The ``reason`` label of ``sieve_fail_open_total``: which dependency failed while the
    request was served anyway (and the prune report's ``fail_open``)."""

    STATE_STORE = "state_store"      # pruned without the conversation's plan, or the plan not saved
    PRUNING_ERROR = "pruning_error"  # a pruning bug: forwarded unpruned
    BUDGET_STORE = "budget_store"    # served unmetered, charged once the store is back


class UsageAnomaly(StrEnum):
    """The ``reason`` label of ``sieve_usage_anomalies_total``: a provider's usage figure the
    budget did not charge as reported (``gateway.telemetry.usage_bounds``)."""

    JUNK = "junk"        # negative, not a number: the reservation's estimate is charged
    CEILING = "ceiling"  # above the per-request sanity ceiling (SIEVE_MAX_BILLED_TOKENS): the ceiling is charged


class ExpandOutcome(StrEnum):
    """The ``outcome`` label of ``sieve_expand_total``: one ``sieve_expand`` call the model made
    (``gateway.expand``)."""

    EXPANDED = "expanded"            # every ref it asked for was restored, and the provider asked again
    NOT_AVAILABLE = "not_available"  # some ref was unknown or expired: answered "not available"
    LIMIT = "limit"                  # the rounds were used up: the call was removed from the answer
    BUDGET = "budget"                # no budget left for another round: the call was removed
    UNHANDLED = "unhandled"          # seen after the answer was already relayed (a stream's text first)


class InputTransformation(StrEnum):
    """The ``reason`` label of ``sieve_provider_input_transformations_total``: why the provider
    says it changed a request's input (its response's ``input_transformations``)."""

    PREFIX_BINDING_MISMATCH = "prefix_binding_mismatch"  # Anthropic: the history before a thinking block changed
    MODEL_BINDING_MISMATCH = "model_binding_mismatch"    # Anthropic: a block another model wrote
    PREFIX_MISMATCH = "prefix_mismatch"                  # OpenAI: the history before a reasoning item changed
    OTHER = "other"                                      # any reason not named above


class EmbeddingOutcome(StrEnum):
    """The ``outcome`` label of ``sieve_embedding_messages_total``: one message the background
    worker was handed (``gateway.embedding.worker``)."""

    EMBEDDED = "embedded"  # the model embedded it
    SHARED = "shared"      # another replica had: read from the shared store
    DROPPED = "dropped"    # the queue was full: left for a later request to hand in again
    FAILED = "failed"      # the model raised on its batch


# sieve_embedding_decisions_total{outcome}: gateway.pruning.semantic's outcomes, and "unavailable"
# (the policy asks for the embedding scorer, the model did not load).
EMBEDDING_DECISIONS = ("mixed", "cold", "no_request", "unavailable")
# sieve_units_total{action}: pruning's actions, and "summarised", which the dashboard shows beside them.
UNIT_ACTIONS = (*(a.value for a in Action), "summarised")
COST_KINDS = ("counterfactual", "actual", "scorer")
# sieve_cohort_prompt_tokens_total{kind}: message tokens as received and as forwarded (Sieve's
# count), prompt tokens the provider billed and, of those, read from its cache (its usage).
COHORT_TOKEN_KINDS = ("original", "forwarded", "billed", "cached")
COHORTS = tuple(Cohort)
# Steps of a conversation (assistant turns in its history): 0 is a conversation's first request.
STEP_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256)


class Metrics:
    """The metric objects of one process, registered on ``registry`` (a new one: the tally is
    its first collector).

    The families a request moves (``gateway.telemetry.recording``) and the latency histograms
    are moved through ``tally`` (``gateway.telemetry.tally``), and only through it."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.tally = Tally()
        r.register(self.tally)  # first: a collect writes the tally's values before the families are read
        self.requests = Counter("sieve_requests_total", "Chat requests by outcome.",
                                ["org", "model", "outcome"], registry=r)
        self._route_metrics(r)
        self.prompt_tokens_original = Counter(
            "sieve_prompt_tokens_original_total", "Prompt tokens of messages as received.",
            ["org", "model"], registry=r)
        self.prompt_tokens_forwarded = Counter(
            "sieve_prompt_tokens_forwarded_total", "Prompt tokens of messages as forwarded.",
            ["org", "model"], registry=r)
        self.completion_tokens = Counter(
            "sieve_completion_tokens_total", "Completion tokens reported by the provider.",
            ["org", "model"], registry=r)
        self.cost_usd = Counter(
            "sieve_cost_usd_total",
            "Dollars: counterfactual (unpruned), actual (forwarded), scorer (pruning's own cost).",
            ["org", "model", "kind"], registry=r)
        self.units = Counter("sieve_units_total", "History units by pruning action.",
                             ["org", "action"], registry=r)
        self.budget_rejections = Counter("sieve_budget_rejections_total",
                                         "Requests rejected by a token budget.", ["org"], registry=r)
        self.scorer_failures = Counter("sieve_scorer_failures_total",
                                       "Scorer fallbacks, by reason.", ["reason"], registry=r)
        self.unpriced = Counter("sieve_unpriced_requests_total",
                                "Requests whose model has no known price.", ["model"], registry=r)
        self.expand = Counter("sieve_expand_total",
                              "sieve_expand calls the model made, by how Sieve answered them.",
                              ["outcome"], registry=r)
        self.fail_open = Counter("sieve_fail_open_total",
                                 "Requests served unpruned or unmetered because a dependency failed.",
                                 ["reason"], registry=r)
        self.auth_failures = Counter("sieve_auth_failures_total",
                                     "Failed key checks (missing, wrong or revoked key), by route template.",
                                     ["route"], registry=r)
        self.auth_throttled = Counter("sieve_auth_throttled_total",
                                      "Requests refused unchecked: their address failed too many key checks.",
                                      ["route"], registry=r)
        self.prune_seconds = Histogram("sieve_prune_seconds", "Time spent pruning one request.",
                                       buckets=LATENCY_BUCKETS, registry=r)
        self.scorer_seconds = Histogram("sieve_scorer_seconds", "Time spent in the scorer.",
                                        buckets=LATENCY_BUCKETS, registry=r)
        self.upstream_seconds = Histogram("sieve_upstream_seconds",
                                          "Upstream time: until the response ends (streams included).",
                                          buckets=LATENCY_BUCKETS, registry=r)
        self.overhead_seconds = Histogram("sieve_overhead_seconds",
                                          "Gateway time per request, upstream time excluded.",
                                          buckets=LATENCY_BUCKETS, registry=r)
        self.usage_anomalies = Counter("sieve_usage_anomalies_total",
                                       "Provider usage figures not charged as reported: junk (the "
                                       "reservation's estimate charged) or above the ceiling (the ceiling "
                                       "charged).", ["reason"], registry=r)
        self._family_metrics(r)
        self.budget_remaining = Gauge("sieve_budget_remaining_tokens",
                                      "Tokens left in a budget window, as last seen.",
                                      ["org", "window"], registry=r)

    def _family_metrics(self, r: CollectorRegistry) -> None:
        """The families of one concern each, defined below."""
        self._reasoning_metrics(r)
        self._cohort_metrics(r)
        self._embedding_metrics(r)

    def _reasoning_metrics(self, r: CollectorRegistry) -> None:
        """Preserved reasoning (gateway.exchange.reasoning_guard): what Sieve's rewrite cost, and what the provider says
        it dropped. Labels: org, route (a path template), scope or reason (closed vocabularies)."""
        self.reasoning_invalidated = Counter(
            "sieve_reasoning_invalidated_total",
            "Thinking blocks or reasoning items Sieve's rewrite left invalid at the provider, counted on the "
            "request whose rewrite did it (scope: current_loop or earlier).", ["org", "route", "scope"], registry=r)
        self.input_transformations = Counter(
            "sieve_provider_input_transformations_total",
            "Entries of the provider's input_transformations (reasoning it dropped), whatever caused them.",
            ["org", "route", "reason"], registry=r)

    def _route_metrics(self, r: CollectorRegistry) -> None:
        """Requests by route template. The forwarding routes have a family of their own: which
        protocol a request came in on (a route label on sieve_requests_total would change the
        label set the dashboard and the alerts read)."""
        self.route_requests = Counter(
            "sieve_route_requests_total",
            "Requests on the forwarding routes by route template (its wire format) and outcome.",
            ["org", "route", "outcome"], registry=r)
        self.passthrough_requests = Counter(
            "sieve_passthrough_requests_total",
            "Requests on the routes relayed as they came (count_tokens, compact, stored responses), "
            "by route template and outcome.", ["org", "route", "outcome"], registry=r)

    def observe(self, histogram: Any, amount: float) -> None:
        """One observation of an unlabelled histogram moved through the tally (a timing)."""
        with self.tally.lock:
            self.tally.observe(histogram, (), amount)

    def _cohort_metrics(self, r: CollectorRegistry) -> None:
        """Does pruning work? The same figures per cohort (pruned / control / shadow), and what
        a shadow policy's decisions would have saved. Labels: org and cohort only (3 values)."""
        self.cohort_requests = Counter("sieve_cohort_requests_total",
                                       "Forwarded requests by cohort and outcome.",
                                       ["org", "cohort", "outcome"], registry=r)
        self.cohort_prompt_tokens = Counter(
            "sieve_cohort_prompt_tokens_total",
            "Prompt tokens by cohort: original, forwarded (message tokens), billed, cached (provider usage).",
            ["org", "cohort", "kind"], registry=r)
        self.cohort_cost_usd = Counter("sieve_cohort_cost_usd_total",
                                       "Dollars billed by the provider (priced requests), by cohort.",
                                       ["org", "cohort"], registry=r)
        self.conversation_steps = Histogram(
            "sieve_conversation_steps", "Assistant turns in each request's history (0: a conversation's first).",
            ["org", "cohort"], buckets=STEP_BUCKETS, registry=r)
        self.tool_calls = Counter("sieve_tool_calls_total",
                                  "Tool calls of the model's newest turn in each request's history.",
                                  ["org", "cohort"], registry=r)
        self.repeat_tool_calls = Counter(
            "sieve_repeat_tool_calls_total",
            "Of those, calls with the same name and arguments as an earlier call of the conversation.",
            ["org", "cohort"], registry=r)
        self.shadow_prompt_tokens = Counter(
            "sieve_shadow_prompt_tokens_total",
            "Message tokens a shadow policy's decisions would have forwarded.", ["org", "model"], registry=r)
        self.shadow_cost_usd = Counter(
            "sieve_shadow_cost_usd_total",
            "Dollars the shadow decisions' requests would have been billed (priced requests, cache pricing).",
            ["org", "model"], registry=r)
        self.shadow_prefix_changes = Counter(
            "sieve_shadow_prefix_changes_total",
            "Shadow decisions that would have changed the conversation's cached prefix.",
            ["org"], registry=r)

    def _embedding_metrics(self, r: CollectorRegistry) -> None:
        """The embedding scorer: its background work (bounded: a queue, a CPU share) and
        how often a decision had the model's relevance."""
        self.embedding_messages = Counter("sieve_embedding_messages_total",
                                          "Messages handed to the embedding worker, by what became of them.",
                                          ["outcome"], registry=r)
        self.embedding_cpu_seconds = Counter("sieve_embedding_cpu_seconds_total",
                                             "CPU seconds the embedding model spent (worker and request path).",
                                             registry=r)
        self.embedding_queue = Gauge("sieve_embedding_queue_messages",
                                     "Messages waiting for the embedding worker.", registry=r)
        self.embedding_decisions = Counter(
            "sieve_embedding_decisions_total",
            "Scored decisions under the embedding scorer: mixed, or the local scores alone and why.",
            ["outcome"], registry=r)
