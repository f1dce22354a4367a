"""Latency of the pure pruning pipeline as histories grow, cold and warm.

    python bench/prune_speed.py [--sizes 1000,10000,50000,100000,200000] [--repeats 7] [--expand-tool on|off]

For each size it builds an agent history of that many tokens from the dev
sessions (tool chains, real tool outputs) and times ``prune()``:

* cold: a fresh process state (empty token and feature caches, no conversation
  state) pruning to 30 % of the history;
* epoch: the next turn of the same conversation, which goes over the target: a
  new epoch, decided anew down to the low-water mark (warm caches);
* warm: the turn after that, which fits: the frozen decisions are replayed and
  the new messages pass (the common case of an agent loop).

Prints medians (ms), and the per-1k-token cost so growth can be read off; beside
them the same cold prune counting with tiktoken instead of the default engine
(rs-bpe where installed), interleaved, and the ratio of the two; and "new conv":
the first prune of a conversation in a running gateway: the per-word memos hold
the words of other conversations of the same app (the last ten dev sessions,
which the histories do not reach), the per-text memos the app's system prompt,
and every other text of the conversation is new.

    python bench/prune_speed.py --breakdown [--breakdown-size 100000]

Where a cold prune's time goes, by subtraction: the same cold prune, the
variants interleaved, with one part left out at a time (counting only the
model's own encoding instead of the target rule's two; no masked forms; no ids in
omission markers; the scorer's text features replaced by empty ones). The
parts interact, so the savings are approximate and do not add up exactly.
"""

from __future__ import annotations

import argparse
import gzip
import importlib
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gateway.config.settings import prepare_offline_environment  # noqa: E402

prepare_offline_environment()

from gateway.pruning import ids, text_features  # noqa: E402
from gateway.pruning import messages as message_reading  # noqa: E402
from gateway.pruning.frozen import FrozenPlan  # noqa: E402
from gateway.pruning.messages import message_token_text  # noqa: E402
from gateway.pruning.pipeline import prune  # noqa: E402
from gateway.pruning.policy import Policy, Steering  # noqa: E402
from gateway.pruning.scoring import LocalScorer  # noqa: E402
from gateway.pruning.tokens import TokenCounter, TokenCounters, text_counter  # noqa: E402

from bench.shared import require, shared_data  # noqa: E402

SESSIONS = shared_data("dev-sessions-retail.jsonl.gz")


def history_of(tokens: int, counter) -> list[dict]:
    """System prompt + whole trajectories (renumbered call ids) until ``tokens`` is reached."""
    sessions = [json.loads(line) for line in gzip.open(require(SESSIONS, "the retail dev sessions", "--sessions FILE"))]
    messages = [sessions[0]["messages"][0]]
    total = counter.count_message(messages[0])
    n = 0
    while total < tokens:
        for session in sessions:
            for m in session["messages"][1:]:
                m = dict(m)
                if m.get("tool_calls"):
                    m["tool_calls"] = [dict(c, id=f"{c['id']}_{n}") for c in m["tool_calls"]]
                if m.get("tool_call_id"):
                    m["tool_call_id"] = f"{m['tool_call_id']}_{n}"
                messages.append(m)
                total += counter.count_message(m)
                if total >= tokens and m["role"] in ("user", "tool") and not _open_call(messages):
                    return messages
            n += 1
    return messages


def _open_call(messages: list[dict]) -> bool:
    for m in reversed(messages):
        if m["role"] == "assistant" and m.get("tool_calls"):
            answered = {x.get("tool_call_id") for x in messages[messages.index(m):]}
            return any(c["id"] not in answered for c in m["tool_calls"])
        if m["role"] != "tool":
            return False
    return False


def other_conversations(count: int = 10) -> list[dict]:
    """The messages of the last ``count`` dev sessions: conversations of the same app
    that the histories above (built from the first sessions) do not reach up to 200k."""
    sessions = [json.loads(line) for line in gzip.open(require(SESSIONS, "the retail dev sessions", "--sessions FILE"))]
    return [m for session in sessions[-count:] for m in session["messages"]]


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t0) * 1000, out


def cold_counter(model_encoding_only: bool = False, engine: str | None = None) -> TokenCounter:
    """A cold process: the per-word and per-text id caches emptied, and an empty counter
    for gpt-4o-mini; optionally counting o200k alone (no target rule)."""
    text_features.clear_word_cache()
    ids.clear_ids_memo()
    if hasattr(message_reading, "clear_fingerprint_memo"):  # trees before the memo
        message_reading.clear_fingerprint_memo()
    counter = TokenCounters(engine=engine).for_model("gpt-4o-mini")
    if model_encoding_only:
        count = text_counter("o200k_base", counter.engine)
        counter._counts = lambda text: (n := count(text), n)
    return counter


def breakdown(size: int, repeats: int) -> None:
    counter = TokenCounters().for_model("gpt-4o-mini")
    messages = history_of(size, counter)
    body = {"model": "gpt-4o-mini", "messages": messages}
    total = counter.count_messages(messages)
    steering = Steering(target_tokens=max(500, int(total * 0.3)))
    empty = text_features.TextInfo({}, 0, frozenset(), False, False)
    analyse = text_features.analyse
    variants = {
        "full cold prune": (Policy(), False, False),
        "  counting o200k only (no target rule)": (Policy(), True, False),
        "  no masked forms": (Policy(mask_tool_outputs=False), False, False),
        "  no ids in omission markers": (Policy(omitted_ids_tokens=0), False, False),
        "  empty text features": (Policy(), False, True),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, (policy, o200k_only, no_features) in variants.items():
            counter = cold_counter(o200k_only)
            text_features.analyse = (lambda text: empty) if no_features else analyse
            try:
                ms, _ = timed(lambda: prune(body, policy, scorer=LocalScorer(), counter=counter, steering=steering))
            finally:
                text_features.analyse = analyse
            times[name].append(ms)
    full = statistics.median(times["full cold prune"])
    print(f"cold prune of {total} tokens to {steering.target_tokens}, medians of {repeats} interleaved runs "
          f"(token loop in {'C' if getattr(text_features, 'NATIVE', False) else 'Python'}):")
    for name, values in times.items():
        ms = statistics.median(values)
        print(f"{name:<38} {ms:>8.1f} ms" + ("" if ms == full else f"   (saves {full - ms:5.1f} ms)"))


def _native(module: str) -> bool:
    """Does ``gateway.pruning.<module>`` (value_runs, bm25) run in C? Trees before it had none."""
    try:
        return importlib.import_module(f"gateway.pruning.{module}").NATIVE
    except ImportError:
        return False


def main() -> int:
    global SESSIONS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,50000,100000,200000")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--breakdown", action="store_true", help="where a cold prune's time goes (see above)")
    ap.add_argument("--breakdown-size", type=int, default=100_000)
    ap.add_argument("--expand-tool", choices=("on", "off"), default="on",
                    help="the policy's expand_tool (on, the default policy's: the markers' refs counted under the target)")
    ap.add_argument("--sessions", type=Path, default=SESSIONS,
                    help="the session file the histories are built from (default: the shared retail sessions; "
                         "bench/data/dev-sessions-coding.jsonl.gz is shipped)")
    args = ap.parse_args()
    SESSIONS = require(args.sessions, "the retail dev sessions", "--sessions FILE")
    if args.breakdown:
        breakdown(args.breakdown_size, args.repeats)
        return 0
    policy = Policy(expand_tool=args.expand_tool == "on")
    engine = TokenCounters().engine
    print(f"counting engine: {engine}; 'cold tiktoken' is the same cold prune counting with tiktoken, interleaved")
    print(f"token loop of the text features: {'C' if getattr(text_features, 'NATIVE', False) else 'Python'}; "
          f"value runs of ids: {'C' if _native('value_runs') else 'Python'}; "
          f"BM25 sums: {'C' if _native('bm25') else 'Python'}")
    print(f"{'tokens':>8} {'msgs':>6} {'cold ms':>9} {'warm ms':>9} {'epoch ms':>9} {'cold ms/1k':>11} {'warm ms/1k':>11}"
          f" {'cold tiktoken':>14} {'ratio':>6} {'new conv ms':>12}")
    others = other_conversations()
    for size in [int(s) for s in args.sizes.split(",")]:
        base_counter = TokenCounters().for_model("gpt-4o-mini")
        messages = history_of(size, base_counter)
        body = {"model": "gpt-4o-mini", "messages": messages}
        actual = base_counter.count_messages(messages)
        target = max(500, int(actual * 0.3))
        steering = Steering(target_tokens=target)
        # The next turn brings a bulky tool output (a tenth of the target): it goes over the
        # target whatever room the first decision left, so the second call is an epoch.
        rows = "\n".join(f"item {i}: sku {800000 + i}, status pending" for i in range(max(10, target // 100)))
        bulky = [{"role": "assistant", "content": None, "tool_calls": [
                     {"id": "bench_call", "type": "function",
                      "function": {"name": "get_order_details", "arguments": '{"order_id": "#W9999999"}'}}]},
                 {"role": "tool", "tool_call_id": "bench_call", "content": rows},
                 {"role": "user", "content": "And that order?"}]
        turn = [{"role": "assistant", "content": "Done. Anything else?"},
                {"role": "user", "content": "Yes, one more thing about that order."}]
        extended = {"model": "gpt-4o-mini", "messages": messages + bulky}
        extended_more = {"model": "gpt-4o-mini", "messages": messages + bulky + turn}
        cold, warm, epoch, cold_tiktoken, new_conversation = [], [], [], [], []
        for _ in range(args.repeats):
            counter = cold_counter(engine="tiktoken")
            ms, _ = timed(lambda: prune(body, policy, scorer=LocalScorer(), counter=counter, steering=steering))
            cold_tiktoken.append(ms)
            # A cold process: empty token-count, feature, per-word and per-text id caches.
            counter = cold_counter()
            scorer = LocalScorer()
            ms, first = timed(lambda: prune(body, policy, scorer=scorer, counter=counter, steering=steering))
            cold.append(ms)
            raw = first.state.to_bytes()
            # The next turn goes over the target: a new epoch, down to the low-water mark.
            ms, second = timed(lambda: prune(extended, policy, scorer=scorer, counter=counter,
                                             state=FrozenPlan.from_bytes(raw), steering=steering))
            assert second.mode == "epoch" or len(messages) == 1, second.mode
            epoch.append(ms)
            raw = second.state.to_bytes()
            # The turn after fits: the frozen decisions are replayed (the common case).
            ms, third = timed(lambda: prune(extended_more, policy, scorer=scorer, counter=counter,
                                            state=FrozenPlan.from_bytes(raw), steering=steering))
            assert third.mode == "frozen" or len(messages) == 1, third.mode
            warm.append(ms)
            # A new conversation in a running gateway: its per-word memos hold the words
            # of other conversations of the app, its per-text memos the app's system
            # prompt; every other text of this conversation is new to it. (The dev
            # sessions replay the same tasks, so other sessions share 41 % of this
            # history's characters: warming with their texts would flatter it.)
            counter, scorer = cold_counter(), LocalScorer()
            for message in others:
                text_features.analyse(message_token_text(message))
            counter.message_counts(messages[0])
            scorer.features(message_token_text(messages[0]))
            ms, _ = timed(lambda: prune(body, policy, scorer=scorer, counter=counter, steering=steering))
            new_conversation.append(ms)
        c, w, e = statistics.median(cold), statistics.median(warm), statistics.median(epoch)
        t, n = statistics.median(cold_tiktoken), statistics.median(new_conversation)
        print(f"{actual:>8} {len(messages):>6} {c:>9.2f} {w:>9.2f} {e:>9.2f} {c / actual * 1000:>11.3f} "
              f"{w / actual * 1000:>11.3f} {t:>14.2f} {c / t:>6.2f} {n:>12.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
