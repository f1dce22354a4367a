"""Summaries of omitted spans, written by the cheap scorer model (policy ``summaries``).

When an epoch omits a span, its omission marker is replaced by one structured
summary of what was omitted. The summary becomes part of the frozen plan, so
later requests replay it byte for byte and the provider's cache keeps hitting;
a later epoch that omits another span gets a summary of its own, further down.

Any failure keeps the plain marker: a summary is a bonus, never a risk.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from gateway.pruning import (Action, Policy, PruneResult, TokenCounter, content_text, is_omission_marker,
    marker_calls, marker_ids, message_token_text, summary_message)
from gateway.scorers.clients import ScorerCallError
from gateway.scorers.llm import LLMScorer
from gateway.telemetry import Metrics, PriceBook, Usage

log = logging.getLogger("sieve.summaries")

SUMMARY_SYSTEM = """You maintain the memory of an AI agent. Part of its conversation is being removed from its context window. Write ONE compact, structured summary of the removed part so the agent can continue its task without it.

Use exactly these headings, each followed by short bullet points (write "none" if empty):
Goal:
Confirmed decisions:
Constraints:
Key tool results:
Open questions:

Rules: copy ids, order numbers, names, amounts, dates, file names and other exact values verbatim; never invent anything; no greetings or small talk; plain text only."""

MAX_SPAN_CHARS = 24_000  # the part of a long span the model reads (head and tail)


@dataclass(slots=True)
class SummaryRun:
    written: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    usd: float = 0.0
    seconds: float = 0.0


class Summarizer:
    def __init__(self, llm: LLMScorer, prices: PriceBook | None, metrics: Metrics) -> None:
        self._llm = llm
        self._prices = prices
        self._metrics = metrics

    async def summarize(self, result: PruneResult, messages: list[dict[str, Any]], goal: str,
                        policy: Policy, counter: TokenCounter, target_tokens: int) -> SummaryRun:
        """Replace the fresh omission markers of ``result`` by summaries, in place (the
        forwarded request and the plan alike), as far as ``target_tokens`` leaves room."""
        run = SummaryRun()
        started = time.perf_counter()
        plan = result.state
        positions = [pos for pos, m in plan.inserts]
        client, model = self._llm.client_for(policy)
        for k, (pos, marker) in enumerate(list(plan.inserts)):
            if not is_omission_marker(marker):
                continue
            end = positions[k + 1] if k + 1 < len(positions) else plan.decided
            span = [j for j in range(pos, end) if plan.actions.get(j) == Action.DROPPED]
            if not span:
                continue
            try:
                answer = await client.complete(model, _prompt(messages, span, goal),
                                               max_tokens=policy.summary_max_tokens, json_mode=False,
                                               timeout_s=policy.scorer_deadline_s)
            except ScorerCallError as exc:
                self._metrics.scorer_failures.labels(reason=exc.reason).inc()
                log.info("summary not written (%s): the plain marker stays", exc.reason)
                continue
            run.prompt_tokens += answer.prompt_tokens or 0
            run.completion_tokens += answer.completion_tokens or 0
            # The marker's calls and exact ids lead the summary (a model may drop or garble
            # one); a summary cut to fit loses its last lines first.
            calls = [c for c in marker_calls(marker) if c not in answer.text]
            missing = [v for v in marker_ids(marker) if v not in answer.text]
            text = ("Calls:\n" + "\n".join(calls) + "\n" if calls else "") \
                + (f"Ids: {' '.join(missing)}\n" if missing else "") + answer.text
            summary = _fit(text, counter, target_tokens - result.target_rule_tokens + counter.count_message(marker))
            if summary is None:
                continue
            _replace(result, k, marker, summary, counter)
            run.written += 1
        run.seconds = time.perf_counter() - started
        cost = self._prices.cost(policy.scorer_model, Usage(run.prompt_tokens, run.completion_tokens)) \
            if self._prices is not None and run.prompt_tokens else None
        run.usd = cost.total_usd if cost is not None else 0.0
        return run


def _prompt(messages: list[dict[str, Any]], span: list[int], goal: str) -> list[dict[str, Any]]:
    lines = []
    for j in span:
        m = messages[j]
        text = " ".join(message_token_text(m).split())
        lines.append(f"[{j}] ({m.get('role')}) {text}")
    body = "\n".join(lines)
    if len(body) > MAX_SPAN_CHARS:
        half = MAX_SPAN_CHARS // 2
        body = body[:half] + "\n[...]\n" + body[-half:]
    task = " ".join(content_text(goal).split())[:2000]
    return [{"role": "system", "content": SUMMARY_SYSTEM},
            {"role": "user", "content": f"TASK GOAL:\n{task}\n\nREMOVED MESSAGES:\n{body}"}]


def _fit(text: str, counter: TokenCounter, room: int) -> dict[str, Any] | None:
    """The summary message, cut at a line boundary to ``room`` tokens; None if nothing fits."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    while lines:
        message = summary_message("\n".join(lines))
        if counter.count_message(message) <= room:
            return message
        lines.pop()
    return None


def _replace(result: PruneResult, k: int, marker: dict[str, Any], summary: dict[str, Any],
             counter: TokenCounter) -> None:
    plan = result.state
    pos, _ = plan.inserts[k]
    plan.inserts[k] = (pos, summary)
    forwarded = result.request["messages"]
    for i, m in enumerate(forwarded):
        if m is marker:
            forwarded[i] = summary
            break
    result.target_rule_tokens += counter.count_message(summary) - counter.count_message(marker)
    result.forwarded_tokens += counter.model_tokens(summary) - counter.model_tokens(marker)
