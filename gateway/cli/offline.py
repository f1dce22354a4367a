"""Offline use of the pipeline: ``sieve prune FILE|- [--format F]`` and ``sieve replay LOGS.jsonl``.

``replay`` runs recorded chat requests (one request body per line, or audit-log
lines that carry the request under ``"request"``) through the same pure
pipeline and conversation logic as the gateway, and prints projected savings
per model — prompt tokens and dollars, with the prompt cache modelled: a
request's leading messages that equal those of the previous request of the
same conversation are priced as cached, for the unpruned and for the pruned
stream alike. Nothing is sent anywhere.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Iterator, TextIO

import orjson

from gateway.wire import AmbiguousFormat, WireFormat, adapter_for, check_chat_body, detect_format, more_steps_follow
from gateway.errors import ConfigError, InvalidRequest, SieveError
from gateway.config import Settings, load_policies
from gateway.exchange import conversation_key
from gateway.pruning import (FrozenPlan, LocalScorer, Policy, Steering, TokenCounters, fingerprint, prune,
    shown_with_refs, target_in_force)
from gateway.cli.shadow_report import is_shadow_log, shadow_report
from gateway.telemetry import PriceBook, Usage


STDIN = "-"


def prune_file(path: Path | str, settings: Settings, policy_name: str | None, target: int | None,
               strategy: str | None, out: TextIO | None = None, fmt: WireFormat | None = None,
               stdin: BinaryIO | None = None) -> int:
    """Print the pruned body (in ``fmt``, the body's own format: read from the body when None,
    ``gateway.wire.formats.detect``) and the report of the request body in ``path`` (``-``:
    standard input); a body Sieve cannot read is one line on stderr and status 1."""
    out = out or sys.stdout
    name = "stdin" if str(path) == STDIN else str(path)
    try:
        raw = (stdin or sys.stdin.buffer).read() if str(path) == STDIN else Path(path).read_bytes()
        body = orjson.loads(raw)
        if not isinstance(body, dict):
            raise InvalidRequest(f"the request body must be a JSON object, not {_json_kind(body)}")
        if fmt is None:
            fmt = detect_format(body)
        adapter = adapter_for(fmt)
        view = adapter.read(body)
    except AmbiguousFormat as exc:
        print(f"sieve prune: {name}: {exc.message}: pass --format chat, messages or responses", file=sys.stderr)
        return 1
    except (OSError, orjson.JSONDecodeError, SieveError) as exc:
        print(f"sieve prune: {name}: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 1
    policy = _policy(settings, policy_name)
    result = prune(view.body, policy, scorer=LocalScorer(), counter=TokenCounters().for_model(body["model"]),
                   steering=Steering(target_tokens=target, strategy=strategy))
    if policy.expand_tool:  # markers naming their refs, as /v1/prune shows them
        shown_with_refs(result)
    report = result.report()
    report["format"] = fmt
    out.write(orjson.dumps({"request": adapter.write(body, view, result), "report": report},
                           option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


def _json_kind(value: Any) -> str:
    """What a parsed JSON value is, in JSON's own words."""
    kinds = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return kinds.get(type(value), "null")


@dataclass
class ModelTotals:
    requests: int = 0
    original_tokens: int = 0
    forwarded_tokens: int = 0
    original_cached: int = 0
    forwarded_cached: int = 0
    original_usd: float = 0.0
    forwarded_usd: float = 0.0
    priced: bool = True
    modes: dict[str, int] = field(default_factory=lambda: defaultdict(int))


def replay_file(path: Path, settings: Settings, policy_name: str | None, target: int | None,
                progress: bool, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    policy = _policy(settings, policy_name)
    try:
        lines = [line for line in path.read_bytes().splitlines() if line.strip()]
    except OSError as exc:
        print(f"sieve replay: cannot read {path}: {exc}", file=sys.stderr)
        return 1
    if is_shadow_log(lines):  # a shadow policy's audit log: its measured decisions, no content needed
        return shadow_report(path, lines, out)
    prices = PriceBook.from_litellm(settings.prices)
    counters, scorer = TokenCounters(), LocalScorer()
    states: dict[str, FrozenPlan] = {}
    previous: dict[str, tuple[list[str], list[str]]] = {}  # key -> (original fps, forwarded fps)
    totals: dict[str, ModelTotals] = defaultdict(ModelTotals)
    skipped = 0
    for n, (body, conversation_id) in enumerate(_requests(lines), 1):
        if progress and (n % 25 == 0 or n == len(lines)):
            _progress(n, len(lines))
        if body is None:
            skipped += 1
            continue
        key = conversation_key("replay", body, conversation_id)
        result = prune(body, policy, scorer=scorer, counter=counters.for_model(body["model"]),
                       state=states.get(key), steering=Steering(target_tokens=target),
                       continued=more_steps_follow(body, WireFormat.CHAT, conversation_id))
        states[key] = result.state
        forwarded_fps = [fingerprint(m) for m in result.request["messages"]]
        before = previous.get(key, ([], []))
        counter = counters.for_model(body["model"])
        fwd_tokens = [counter.model_tokens(m) for m in result.request["messages"]]
        original_cached = _cached(result.state.fingerprints, before[0], result.message_tokens)
        forwarded_cached = _cached(forwarded_fps, before[1], fwd_tokens)
        previous[key] = (list(result.state.fingerprints), forwarded_fps)
        t = totals[body["model"]]
        t.requests += 1
        t.modes[result.mode] += 1
        t.original_tokens += result.original_tokens
        t.forwarded_tokens += result.forwarded_tokens
        t.original_cached += original_cached
        t.forwarded_cached += forwarded_cached
        original_cost = prices.cost(body["model"], Usage(result.original_tokens, 0, original_cached, 0))
        forwarded_cost = prices.cost(body["model"], Usage(result.forwarded_tokens, 0, forwarded_cached, 0))
        if original_cost is None or forwarded_cost is None:
            t.priced = False
        else:
            t.original_usd += original_cost.total_usd
            t.forwarded_usd += forwarded_cost.total_usd
    if progress:
        print(file=sys.stderr)
    _print_totals(totals, skipped, policy, target, out)
    return 0


def _requests(lines: list[bytes]) -> Iterator[tuple[dict[str, Any] | None, str | None]]:
    for raw in lines:
        if not raw.strip():
            continue
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError:
            yield None, None
            continue
        body = record.get("request") if isinstance(record, dict) and "request" in record else record
        conversation = record.get("conversation_id") if isinstance(record, dict) else None
        try:
            check_chat_body(body)
        except SieveError:
            yield None, None
            continue
        yield body, conversation if isinstance(conversation, str) else None


def _cached(fps: list[str], previous: list[str], tokens: list[int]) -> int:
    n = 0
    for mine, theirs in zip(fps, previous):
        if mine != theirs:
            break
        n += 1
    return sum(tokens[:n])


def _progress(done: int, total: int) -> None:
    width = 30
    filled = int(width * done / max(total, 1))
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    sys.stderr.flush()


def _print_totals(totals: dict[str, ModelTotals], skipped: int, policy: Policy, target: int | None,
                  out: TextIO) -> None:
    out.write(f"policy {policy.name}, target {target_in_force(target, policy)} tokens "
              f"(cache modelled: a repeated leading prefix of a conversation is priced as cached)\n")
    out.write(f"{'model':<28} {'requests':>8} {'prompt tokens':>14} {'forwarded':>12} {'saved %':>8} "
              f"{'cost unpruned $':>16} {'cost pruned $':>14} {'saved $':>10}\n")
    for model, t in sorted(totals.items()):
        saved_pct = 100 * (1 - t.forwarded_tokens / t.original_tokens) if t.original_tokens else 0.0
        if t.priced:
            dollars = (f"{t.original_usd:>16.4f} {t.forwarded_usd:>14.4f} "
                       f"{t.original_usd - t.forwarded_usd:>10.4f}")
        else:
            dollars = f"{'unpriced':>16} {'-':>14} {'-':>10}"
        out.write(f"{model:<28} {t.requests:>8} {t.original_tokens:>14} {t.forwarded_tokens:>12} "
                  f"{saved_pct:>8.1f} {dollars}\n")
    if skipped:
        out.write(f"skipped {skipped} line(s) that are not chat requests\n")


def _policy(settings: Settings, name: str | None) -> Policy:
    policies = load_policies(settings.policies_dir)
    chosen = name or settings.default_policy
    if chosen not in policies:
        raise ConfigError(f"policy {chosen!r} not found in {settings.policies_dir} "
                          f"(have: {', '.join(sorted(policies))})")
    return policies[chosen]


__all__ = ["prune_file", "replay_file"]
