#!/usr/bin/env python3
"""Build the coding-agent dev fixtures: dev-sessions-coding.jsonl.gz and dev-coding.jsonl.gz.

Usage (from the repository root, with the pinned dependencies installed):
  python bench/data/build_coding.py [--out bench/data] [--sessions 40] [--case-sessions 40] [--cases 400]

Each session copies one installed source tree to /tmp/sieve-coding-src/<dist>-<version>,
writes test files for it, injects one-token bugs that make some of those tests
fail, and lets a scripted agent fix them with real tool runs (see README.md in
this folder). Deterministic: the same inputs give the same bytes.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.metadata
import importlib.util
import json
import multiprocessing
import os
import random
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from coding_agent import TOOLS, Conversation  # noqa: E402
from coding_bugs import Bug, find_bug  # noqa: E402
from coding_specs import TREES, Tree  # noqa: E402
from coding_tasks import add_regression_test, explain, fix_bug  # noqa: E402
from coding_tree import ROOT, Workspace  # noqa: E402

SEED = 20251201
MODEL = "gpt-4o-mini"
CL100K_KEY = hashlib.sha1(b"https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken").hexdigest()


def token_counter():
    """cl100k_base from the BPE file litellm ships, as the evaluators count (no download)."""
    spec = importlib.util.find_spec("litellm")
    for base in spec.submodule_search_locations if spec else []:
        d = os.path.join(base, "litellm_core_utils", "tokenizers")
        if os.path.isfile(os.path.join(d, CL100K_KEY)):
            os.environ["TIKTOKEN_CACHE_DIR"] = d
            import tiktoken
            enc = tiktoken.get_encoding("cl100k_base")
            return lambda s: len(enc.encode(s, disallowed_special=()))
    raise SystemExit("cl100k_base BPE file not found (install the pinned litellm)")


def message_tokens(count, m: dict) -> int:
    text = m.get("content") or ""
    for tc in m.get("tool_calls") or []:
        text += tc["function"]["name"] + tc["function"]["arguments"]
    return count(text) + 4


def grounding(call: dict, contents: list[str], computed: tuple[str, ...] = ()) -> list:
    """Literal argument values of the call (strings >= 3 chars, numbers >= 3 digits) found in the
    contents, less the ``computed`` arguments: those the agent worked out (a read's end, a start
    some lines above a hit), which no reading of the context predicts; one found in the contents
    is there by chance (a number of the same digits in a listing)."""
    text = "\n".join(contents)
    out = []
    for name, v in json.loads(call["function"]["arguments"]).items():
        if isinstance(v, bool) or name in computed:
            continue
        if isinstance(v, str) and len(v) >= 3 and v in text:
            out.append(v)
        elif isinstance(v, int) and len(str(v)) >= 3 and str(v) in text:
            out.append(v)
    return out


def check_versions() -> None:
    for tree in TREES:
        have = importlib.metadata.version(tree.dist)
        if have != tree.version:
            raise SystemExit(f"{tree.dist} {have} installed, the fixtures need {tree.version} (.ci/constraints.txt)")


def plant_bugs(ws: Workspace, rng: random.Random, n: int) -> tuple[list[Bug], dict, dict, str | None]:
    files = list(ws.tree.files)
    rng.shuffle(files)
    bugs: list[Bug] = []
    for tf in files:
        if len(bugs) < n:
            try:
                bugs.append(find_bug(ws, tf, rng, bugs))
            except RuntimeError:  # no mutation of this module fits: take the next file
                continue
    if len(bugs) < 2:
        raise RuntimeError(f"fewer than two bugs planted in {ws.tree.dist}")
    got = {tf.name: ws.evaluate(tf) for tf in ws.tree.files}
    left_out = None
    for bug in bugs:
        name = bug.test_file.name
        bug.failing = [t for t, _ in bug.test_file.tests if got[name][t] != ws.expected[name][t]]
        if not bug.failing:
            raise RuntimeError(f"bug in {bug.path} fails no test of its file")
    reg = next((b for b in bugs[:2] if len(b.failing) >= 2), None)
    if reg is not None:
        left_out = reg.failing.pop()
        ws.write_tests(reg.test_file, leave_out=left_out)
    ws.commit()
    return bugs, got, {"bug": reg}, left_out


def build_session(tree: Tree, sid: str, rng: random.Random) -> tuple[list[dict], list[Bug], dict[str, tuple]]:
    ws = Workspace(tree)
    ws.prepare()
    n = rng.choice([2, 3]) if len(tree.files) >= 3 else 2
    bugs, got, reg, left_out = plant_bugs(ws, rng, n)
    conv = Conversation(sid, ws, rng)
    for i, bug in enumerate(bugs):
        first = bug.failing[0]
        name = bug.test_file.name
        fix_bug(conv, bug, got[name][first], ws.expected[name][first], first=i == 0)
        if reg["bug"] is bug:
            add_regression_test(conv, bug, left_out)
        if i == 0 and rng.random() < 0.6:
            explain(conv, bug)
    if rng.random() < 0.3:
        explain(conv, bugs[-1])
    while sum(m["role"] == "assistant" for m in conv.messages) < 30:  # sessions of 30 steps or more
        explain(conv, rng.choice(bugs))
    shutil.rmtree(ws.root)
    return conv.messages, bugs, conv.computed


def steps_of(messages: list[dict], computed: dict[str, tuple[str, ...]]) -> list[dict]:
    steps = []
    for k, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        contents = [x.get("content") or "" for x in messages[:k]]
        if m.get("tool_calls"):
            call = m["tool_calls"][0]
            nc = {"name": call["function"]["name"], "arguments": json.loads(call["function"]["arguments"])}
            labels = grounding(call, contents, computed.get(call["id"], ()))
            steps.append({"k": k, "next_call": nc, "grounding": labels})
        else:
            steps.append({"k": k, "next_call": None, "grounding": []})
    return steps


def sessions(kind: str, n: int, workers: int) -> list[dict]:
    """Session i uses tree i mod 8; each worker builds whole trees (one copy per tree path at a time)."""
    by_tree = [[i for i in range(n) if i % len(TREES) == t] for t in range(len(TREES))]
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        built = pool.starmap(_tree_sessions, [(kind, idx) for idx in by_tree])
    return sorted((s for group in built for s in group), key=lambda s: s["meta"]["index"])


def _tree_sessions(kind: str, indices: list[int]) -> list[dict]:
    count = token_counter()
    out = []
    for i in indices:
        tree = TREES[i % len(TREES)]
        sid = f"coding:{tree.dist.lower()}:{kind}{i:02d}"
        rng = random.Random(f"{SEED}:{kind}:{i}")
        messages, bugs, computed = build_session(tree, sid, rng)
        toks = [message_tokens(count, m) for m in messages]
        out.append({
            "id": sid, "source": "coding", "model": MODEL, "tools": TOOLS, "messages": messages,
            "steps": steps_of(messages, computed),
            "meta": {"index": i, "tree": tree.dist, "version": tree.version, "licence": tree.licence,
                     "bugs": [{"path": b.path, "line": b.line, "function": b.function,
                               "before": b.before, "after": b.after, "failing": b.failing} for b in bugs],
                     "n_messages": len(messages), "tokens": sum(toks), "system_tokens": toks[0]},
        })
        print(f"  {sid}: {len(out[-1]['steps'])} steps, {sum(toks)} tokens", file=sys.stderr)
    return out


def cases_from(sess_list: list[dict], n: int, count) -> list[dict]:
    rng = random.Random(f"{SEED}:cases")
    pool = [(s, st) for s in sess_list for st in s["steps"]
            if st["next_call"] and st["grounding"] and st["k"] >= 8]
    chosen = []
    weights = [st["k"] for _, st in pool]
    idx = list(range(len(pool)))
    while idx and len(chosen) < n:  # weighted sampling without replacement: longer histories preferred
        j = rng.choices(range(len(idx)), weights=[weights[i] for i in idx])[0]
        chosen.append(idx.pop(j))
    out = []
    for i in sorted(chosen, key=lambda i: (pool[i][0]["id"], pool[i][1]["k"])):
        s, st = pool[i]
        msgs = s["messages"][:st["k"]]
        ev_idx = []
        for g in st["grounding"]:
            form = str(g)
            e = next(j for j, m in enumerate(msgs) if form in (m.get("content") or ""))
            ev_idx.append(e)
        out.append({
            "id": f"{s['id']}:k{st['k']:03d}", "source": "coding",
            "request": {"model": MODEL, "messages": msgs, "tools": TOOLS},
            "labels": {"evidence_idx": ev_idx, "evidence_text": [msgs[e]["content"] for e in ev_idx],
                       "next_call": st["next_call"], "grounding": st["grounding"]},
            "meta": {"orig_tokens": sum(message_tokens(count, m) for m in msgs),
                     "category": st["next_call"]["name"], "tree": s["meta"]["tree"],
                     "version": s["meta"]["version"], "session": s["id"], "k": st["k"], "n_messages": len(msgs),
                     "evidence_roles": [msgs[e]["role"] for e in ev_idx]},
        })
    return out


def write_gz(path: Path, records: list[dict]) -> None:
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        for r in records:
            gz.write((json.dumps(r, ensure_ascii=False) + "\n").encode("utf-8"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(HERE))
    ap.add_argument("--sessions", type=int, default=40)
    ap.add_argument("--cases", type=int, default=400)
    ap.add_argument("--workers", type=int, default=2, help="trees built in parallel")
    args = ap.parse_args()
    check_versions()
    count = token_counter()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    replay = sessions("sess", args.sessions, args.workers)
    write_gz(Path(args.out) / "dev-sessions-coding.jsonl.gz", replay)
    write_gz(Path(args.out) / "dev-coding.jsonl.gz", cases_from(replay, args.cases, count))
    shutil.rmtree(ROOT, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
