"""Which grounding literals a running gateway loses, and what happened to the messages holding them.

    python bench/lost_literals.py bench/data/dev-sessions-airline.jsonl.gz --gateway http://127.0.0.1:8300 --target 4000
    python bench/lost_literals.py bench/data/dev-airline.jsonl.gz --gateway http://127.0.0.1:8300 --ratio 0.3

Sessions (files of the shared session format) are replayed step by step through
POST /v1/prune with one conversation id per session, as ``replay.py`` does; cases
(the shared case format) are pruned one by one at ``int(ratio * orig_tokens)``,
as ``quality.py`` does. A literal is lost when no form of it (``quality.py``'s
``literal_forms``) is in the forwarded messages' text. Each lost literal is
tallied by: the next call's name, the argument path it fills, the value's shape
(by characters, in any domain), the actions /v1/prune's report gives the
messages whose content held it, and the kinds of those messages; with the
first example of each kind. The numbers that stand in the request only as a
numbered listing's line prefixes are counted apart (``gutter_only``), with the
recall of the rest.

A second table (``--where``) reads each lost literal's newest holder, the message
that last said it before the step (calls' arguments included: a command names the
paths and names it acts on): which part of the conversation it is (the task, a
call's arguments, the assistant's words, a tool output, another user message),
how many steps (assistant turns) back, what the prune did to it, and its size in
tokens (what keeping it would have cost; a re-read costs about as much again).
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
import uuid
from collections import Counter
from typing import Any, Iterator

import httpx

# Shapes by characters only: what decides whether a value looks like an id.
SHAPES = [
    ("iso-date", r"\d{4}-\d{2}-\d{2}([T ][\d:]+)?"),
    ("path", r"[\w.~-]*(/[\w.-]+)+/?"),
    ("file-name", r"[\w-]+(\.[\w-]+)*\.(py|pyi|js|ts|tsx|go|rs|java|c|h|cc|cpp|rb|php|json|ya?ml|toml|ini|cfg"
                  r"|md|rst|txt|csv|html?|css|xml|sql|sh|log)"),
    ("dotted-name", r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+"),
    ("digits", r"\d+(\.\d+)?"),
    ("upper-code+digit", r"(?=.*\d)[A-Z0-9]{3,12}"),
    ("upper-code", r"[A-Z]{3,12}"),
    ("snake-id+digit", r"(?=.*\d)[a-z]+(_[a-z0-9]+)+"),
    ("snake-word", r"[a-z]+(_[a-z]+)+"),
    ("lower-word", r"[a-z]+"),
    ("capitalised-word", r"[A-Z][a-z]+"),
    ("camel-name", r"[A-Za-z][a-z0-9]*([A-Z][a-z0-9]*)+"),
]

AGE_BUCKETS = ((2, "1-2"), (5, "3-5"), (10, "6-10"), (20, "11-20"))


def shape(value: Any) -> str:
    text = str(value)
    for name, pattern in SHAPES:
        if re.fullmatch(pattern, text):
            return name
    return "text" if " " in text else "other"


def forms(value: Any) -> list[str]:
    if isinstance(value, float):
        return [repr(value)] + ([str(int(value))] if value.is_integer() else [])
    return [str(value)]


def paths(args: Any, value: Any, prefix: str = "") -> Iterator[str]:
    """Where in the arguments the value sits (``flights[].date``)."""
    if isinstance(args, dict):
        for key, sub in args.items():
            yield from paths(sub, value, f"{prefix}.{key}" if prefix else key)
    elif isinstance(args, list):
        for sub in args:
            yield from paths(sub, value, prefix + "[]")
    elif args == value and not isinstance(args, bool):
        yield prefix


def gutter_only(value: Any, texts: list[str]) -> bool:
    """Whether a number stands in ``texts`` only as a numbered listing's line prefix
    (``cat -n``: spaces, the number, a tab; Claude Code's Read: an arrow), never where a search hit or a traceback
    names it. In the coding fixtures (``bench/data/coding_agent.py``) the scripted agent
    starts a read at a line a search named (or one it works out) and works its end out
    (a span after the line it looks for), so there such a number is one it computed,
    which no reading of the context predicts; a real agent may also copy one from a
    listing's gutter."""
    if isinstance(value, bool) or not isinstance(value, int):
        return False
    anywhere = re.compile(rf"(?<![\w.]){value}(?![\w.])")
    gutter = re.compile(rf"(?m)^[ ]*{value}(?:\t|→)")  # cat -n; Claude Code's Read
    seen = False
    for text in texts:
        for match in anywhere.finditer(text):
            seen = True
            if not gutter.match(text, text.rfind("\n", 0, match.start()) + 1):
                return False
    return seen


def message_text(m: dict) -> str:
    text = m.get("content") if isinstance(m.get("content"), str) else json.dumps(m.get("content") or "")
    for tc in m.get("tool_calls") or []:
        text += tc["function"]["name"] + tc["function"]["arguments"]
    return text


def part_of(messages: list[dict], i: int, value: Any) -> str:
    """Which part of the conversation message ``i`` is, as a holder of ``value``: the task
    (the first user message), a call's arguments, the assistant's words, a tool output,
    or another user message."""
    m = messages[i]
    if m["role"] == "user":
        first = next(k for k, n in enumerate(messages) if n["role"] == "user")
        return "task" if i == first else "user"
    if m["role"] == "assistant":
        said = m.get("content") if isinstance(m.get("content"), str) else ""
        return "said" if any(f in said for f in forms(value)) else "call"
    return "output" if m["role"] in ("tool", "function") else m["role"]


def steps_back(messages: list[dict], i: int) -> str:
    """How many assistant turns came after message ``i``, bucketed."""
    n = sum(1 for m in messages[i + 1:] if m["role"] == "assistant") + (messages[i]["role"] != "assistant")
    return next((label for most, label in AGE_BUCKETS if n <= most), f">{AGE_BUCKETS[-1][0]}")


def kind_of(messages: list[dict], i: int) -> str:
    """A message's role; a tool result named by the call it answers."""
    m = messages[i]
    if m["role"] == "tool" and i and messages[i - 1].get("tool_calls"):
        return "tool:" + messages[i - 1]["tool_calls"][0]["function"]["name"]
    return m["role"]


class Tally:
    def __init__(self) -> None:
        self.kinds: Counter = Counter()
        self.examples: dict[tuple, tuple] = {}
        self.total = self.lost = 0
        self.gutter_total = self.gutter_lost = 0
        self.where: Counter = Counter()
        self.where_tokens: Counter = Counter()

    def score(self, where: str, request: dict, body: dict, next_call: dict, grounding: list) -> None:
        forwarded = "\n".join(message_text(m) for m in body["request"]["messages"])
        actions = {m["index"]: m["action"] for m in body["report"]["messages"]}
        msgs = request["messages"]
        for value in grounding:
            self.total += 1
            holders = [i for i, m in enumerate(msgs) if any(f in message_text(m) for f in forms(value))]
            gutter = gutter_only(value, [msgs[i].get("content") or "" for i in holders])
            self.gutter_total += gutter
            if any(f in forwarded for f in forms(value)):
                continue
            self.lost += 1
            self.gutter_lost += gutter
            key = (next_call["name"], next(paths(next_call["arguments"], value), "?"), shape(value),
                   "+".join(sorted({actions.get(i, "?") for i in holders})),
                   "+".join(sorted({kind_of(msgs, i) for i in holders})))
            self.kinds[key] += 1
            self.examples.setdefault(key, (where, value, holders[-4:]))
            if holders:
                newest = holders[-1]
                spot = (part_of(msgs, newest, value), steps_back(msgs, newest), actions.get(newest, "?"))
                self.where[spot] += 1
                self.where_tokens[spot] += len(message_text(msgs[newest])) // 4
            else:
                self.where[("nowhere", "-", "-")] += 1

    def print_where(self, top: int) -> None:
        print("\ncount | newest holder | steps back | its action | its size (chars/4, mean)")
        for spot, n in self.where.most_common(top):
            print(f"{n:5d} | " + " | ".join(spot) + f" | {self.where_tokens[spot] // max(1, n)}")

    def print(self, top: int) -> None:
        print(f"{self.lost} of {self.total} grounding literals lost")
        rest_total, rest_lost = self.total - self.gutter_total, self.lost - self.gutter_lost
        print(f"{self.gutter_lost} of them ({self.gutter_total} labelled) stand only as a listing's line numbers; "
              f"the rest: {rest_lost} of {rest_total} lost, recall {100 * (1 - rest_lost / max(1, rest_total)):.1f} %")
        print("count | next call | argument | shape | action on holders | holders")
        for key, n in self.kinds.most_common(top):
            print(f"{n:5d} | " + " | ".join(key) + f"\n        e.g. {self.examples[key]}")


def load(path: str) -> list[dict]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def replay_sessions(client: httpx.Client, url: str, sessions: list[dict], target: int, tally: Tally) -> None:
    nonce = uuid.uuid4().hex[:8]
    for s in sessions:
        headers = {"x-sieve-conversation-id": f"{s['id']}#{nonce}-T{target}", "x-sieve-target-tokens": str(target)}
        for st in s["steps"]:
            req = {"model": s["model"], "tools": s["tools"], "messages": s["messages"][:st["k"]]}
            body = client.post(url, json=req, headers=headers).json()
            if st["next_call"]:
                tally.score(f"{s['id']} k={st['k']}", req, body, st["next_call"], st["grounding"])


def prune_cases(client: httpx.Client, url: str, cases: list[dict], ratio: float, tally: Tally) -> None:
    for c in cases:
        if not c["labels"].get("next_call"):
            continue
        target = int(ratio * c["meta"]["orig_tokens"])
        body = client.post(url, json=c["request"], headers={"x-sieve-target-tokens": str(target)}).json()
        tally.score(c["id"], c["request"], body, c["labels"]["next_call"], c["labels"]["grounding"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("fixture", help="a session file (has 'steps') or a case file")
    ap.add_argument("--gateway", required=True)
    ap.add_argument("--target", type=int, default=4000, help="sessions: target tokens")
    ap.add_argument("--ratio", type=float, default=0.3, help="cases: target ratio of orig_tokens")
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--where", action="store_true",
                    help="also tally each lost literal's newest holder: its part, steps back, action, size")
    args = ap.parse_args()
    records, tally = load(args.fixture), Tally()
    url = args.gateway.rstrip("/") + "/v1/prune"
    with httpx.Client(timeout=120) as client:
        if records and "steps" in records[0]:
            replay_sessions(client, url, records, args.target, tally)
        else:
            prune_cases(client, url, records, args.ratio, tally)
    tally.print(args.top)
    if args.where:
        tally.print_where(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
