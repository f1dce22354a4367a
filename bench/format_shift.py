"""The same cases in other formats: does pruning key on one data set's formats?

    python bench/format_shift.py ../shared/data/dev-tau-retail.jsonl.gz --out /tmp/retail-shifted.jsonl.gz
    python bench/offline_quality.py ../shared/data/dev-tau-retail.jsonl.gz /tmp/retail-shifted.jsonl.gz --ratio 0.5,0.3,0.2
    python bench/format_shift.py ../shared/data/dev-sessions-retail.jsonl.gz --out /tmp/sessions-shifted.jsonl.gz
    python ../shared/bench/replay.py /tmp/sessions-shifted.jsonl.gz --gateway http://127.0.0.1:8190 --target 4000,8000

Rewrites every case of a tool-calling fixture (the shared case format) so that
nothing keeps its surface form but the content: JSON field names and tool names
go from snake_case to camelCase (in the schemas, the calls, the outputs and the
system prompt alike), and each shape of id takes another (``#W5061109`` ->
``W-5061109``, ``credit_card_7901829`` -> ``CREDIT-CARD-7901829``, ``6254646215``
-> ``N6254-646215``, ``HAT170`` -> ``hat170``); a numbered listing's ``cat -n`` tab
becomes Claude Code's arrow (``   717→``); in a conversation without tools, a transcript
line's ``[stamp] Name: `` becomes IRC's ``(stamp) <Name> ``.
The labels follow: grounding literals and the next call through the same
rewrite, evidence texts taken again from the rewritten messages, token counts
counted again. A session file (the shared session format) is rewritten alike:
its messages, tools and each step's next call and grounding. A pruner whose rules are general scores about the same on both;
one that reads the source's id shapes or field names loses on the shifted copy.
The source of the shifted cases reads ``<source>-shifted``.
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.shared import require, shared_bench  # noqa: E402

sys.path.insert(0, str(require(shared_bench() / "quality.py", "the shared evaluator quality.py").parent))

import quality  # noqa: E402  (the evaluator's token count)

# Each shape of id and the shape it takes, in one pass (a rewritten id is not read
# again). Shapes, not one data set's words: the ids of any tau-like domain fall under them.
_ID = re.compile(
    r"(?P<tag>#[A-Z]{1,3}\d{4,}\b)"                          # '#W5061109' -> 'W-5061109'
    r"|(?P<snake>\b[a-z]+(?:_[a-z]+)*_\d{3,}\b)"               # 'credit_card_7901829' -> 'CREDIT-CARD-7901829'
    r"|(?P<number>(?<![\w-])(?<!\d\.)\d{7,}(?![\w-])(?!\.\d))"  # '6254646215' -> 'N6254-646215'
    r"|(?P<code>\b(?=[A-Z0-9]*\d)(?=[A-Z0-9]*[A-Z])[A-Z0-9]{3,8}\b)")  # 'HAT170' -> 'hat170'


# A numbered listing's gutter: `cat -n`'s tab after the line number becomes the arrow
# Claude Code's Read tool prints ('   717\tdef f():' -> '   717→def f():').
_GUTTER = re.compile(r"(?m)^( *\d+)\t")


# A transcript line's speaker and time stamp, in a conversation without tools:
# '[1:56 pm on 8 May, 2023] Caroline: Hey' -> '(1:56 pm on 8 May, 2023) <Caroline> Hey' (IRC-style logs).
_TRANSCRIPT = re.compile(r"^(?:\[([^\]\n]{1,60})\]\s*)?([A-Z][\w'.-]{1,30}(?: [A-Z][\w'.-]{1,30})?): ")


def _irc_style(text: str) -> str:
    m = _TRANSCRIPT.match(text)
    if m is None:
        return text
    stamp = f"({m.group(1)}) " if m.group(1) else ""
    return f"{stamp}<{m.group(2)}> {text[m.end():]}"


def _shifted_id(m: re.Match) -> str:
    text, kind = m.group(), m.lastgroup
    if kind == "tag":
        letters = text[1:].rstrip("0123456789")
        return f"{letters}-{text[1 + len(letters):]}"
    if kind == "snake":
        return text.upper().replace("_", "-")
    if kind == "number":
        return f"N{text[:4]}-{text[4:]}"
    return text.lower()


_SNAKE = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def yaml_like(value: Any, indent: str = "") -> str:
    """A JSON value as indented ``key: value`` lines (YAML-like, unquoted), the way many
    tools print records for a model to read."""
    if isinstance(value, dict):
        lines = []
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                lines.append(f"{indent}{k}:\n{yaml_like(v, indent + '  ')}")
            else:
                lines.append(f"{indent}{k}: {_scalar(v)}")
        return "\n".join(lines)
    if isinstance(value, list):
        return "\n".join(f"{indent}- " + yaml_like(v, indent + "  ").lstrip() for v in value)
    return indent + _scalar(value)


def _scalar(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    return "[]" if v == [] else "{}" if v == {} else str(v)


class Shift:
    """The rewrite: ids by shape, then the field and tool names it was told about; with
    ``yaml``, JSON tool outputs printed as YAML-like lines, with ``repr_`` as Python's repr."""

    def __init__(self, names: set[str], yaml: bool = False, repr_: bool = False) -> None:
        self.names, self.yaml, self.repr = names, yaml, repr_

    def text(self, text: str) -> str:
        text = _ID.sub(_shifted_id, _GUTTER.sub("\\1→", text))
        return _SNAKE.sub(lambda m: camel(m.group()) if m.group() in self.names else m.group(), text)

    def value(self, v: Any) -> Any:
        if isinstance(v, str):
            return self.text(v)
        if isinstance(v, bool) or v is None or isinstance(v, float):
            return v
        if isinstance(v, int):
            shifted = self.text(str(v))
            return v if shifted == str(v) else shifted
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if isinstance(v, dict):
            return {(camel(k) if k in self.names else k): self.value(x) for k, x in v.items()}
        return v

    def message(self, m: dict) -> dict:
        out = dict(m)
        if isinstance(m.get("content"), str):
            out["content"] = self.text(m["content"])
            if (self.yaml or self.repr) and m.get("role") == "tool" and out["content"][:1] in "{[":
                try:
                    value = json.loads(out["content"])
                except ValueError:
                    value = None
                if value is not None:  # Python's repr: what str(dict) gives a LangChain tool's output
                    out["content"] = yaml_like(value) if self.yaml else repr(value)
        if m.get("tool_calls"):
            out["tool_calls"] = [self.call(tc) for tc in m["tool_calls"]]
        return out

    def call(self, tc: dict) -> dict:
        fn = dict(tc["function"])
        fn["name"] = camel(fn["name"])
        try:
            fn["arguments"] = json.dumps(self.value(json.loads(fn["arguments"])))
        except (TypeError, ValueError):
            fn["arguments"] = self.text(fn["arguments"])
        return {**tc, "function": fn}


def names_of(cases: list[dict]) -> set[str]:
    """Tool names, their parameters, and the keys of JSON tool outputs and call arguments."""
    names: set[str] = set()

    def keys(v: Any) -> None:
        if isinstance(v, dict):
            names.update(k for k in v if _SNAKE.fullmatch(k))
            for x in v.values():
                keys(x)
        elif isinstance(v, list):
            for x in v:
                keys(x)

    for c in cases:
        request = c.get("request") or c
        for tool in request.get("tools") or []:
            names.add(tool["function"]["name"])
            keys(tool["function"].get("parameters", {}).get("properties", {}))
        for m in request["messages"]:
            for tc in m.get("tool_calls") or []:
                names.add(tc["function"]["name"])
                try:
                    keys(json.loads(tc["function"]["arguments"]))
                except (TypeError, ValueError):
                    pass
            if m.get("role") == "tool" and isinstance(m.get("content"), str):
                try:
                    keys(json.loads(m["content"]))
                except ValueError:
                    pass
    return {n for n in names if "_" in n and not _ID.fullmatch(n)}  # a key that is an id is rewritten as one


def shifted_tool(shift: Shift, tool: dict) -> dict:
    fn = dict(tool["function"])
    fn["name"] = camel(fn["name"])
    if isinstance(fn.get("description"), str):
        fn["description"] = shift.text(fn["description"])
    params = dict(fn.get("parameters") or {})
    if "properties" in params:
        params["properties"] = {camel(k) if k in shift.names else k: v for k, v in params["properties"].items()}
        params["required"] = [camel(k) if k in shift.names else k for k in params.get("required", [])]
    fn["parameters"] = params
    return {**tool, "function": fn}


def shifted_case(shift: Shift, c: dict) -> dict:
    req = dict(c["request"])
    req["messages"] = [shift.message(m) for m in c["request"]["messages"]]
    if not req.get("tools"):  # a conversation: its transcript lines in another style
        req["messages"] = [dict(m, content=_irc_style(m["content"])) if m.get("role") in ("user", "assistant")
                           and isinstance(m.get("content"), str) else m for m in req["messages"]]
    if req.get("tools"):
        req["tools"] = [shifted_tool(shift, t) for t in req["tools"]]
    labels = dict(c["labels"])
    labels["evidence_text"] = [req["messages"][i]["content"] for i in labels.get("evidence_idx", [])]
    if labels.get("next_call"):
        nc = labels["next_call"]
        labels["next_call"] = {"name": camel(nc["name"]), "arguments": shift.value(nc["arguments"])}
    if labels.get("grounding") is not None:
        labels["grounding"] = [shift.value(g) for g in labels["grounding"]]
    meta = dict(c["meta"], orig_tokens=quality.count_request(req))
    return {**c, "id": c["id"] + ":shifted", "source": c["source"] + "-shifted", "request": req,
            "labels": labels, "meta": meta}


def shifted_session(shift: Shift, s: dict) -> dict:
    messages = [shift.message(m) for m in s["messages"]]
    steps = [{**st, "next_call": None if not st.get("next_call") else
              {"name": camel(st["next_call"]["name"]), "arguments": shift.value(st["next_call"]["arguments"])},
              "grounding": [shift.value(g) for g in st.get("grounding") or []]} for st in s["steps"]]
    return {**s, "id": s["id"] + ":shifted", "source": (s.get("source") or "") + "-shifted", "messages": messages,
            "tools": [shifted_tool(shift, t) for t in s.get("tools") or []], "steps": steps}


def check(c: dict) -> None:
    """Every grounding literal still stands in the rewritten request (the labels held)."""
    if "steps" in c:
        for st in c["steps"]:
            _check(c["id"], c["messages"][:st["k"]], st.get("grounding") or [])
    else:
        _check(c["id"], c["request"]["messages"], c["labels"].get("grounding") or [])


def _check(where: str, messages: list[dict], grounding: list) -> None:
    text = "\n".join(quality.message_token_text(m) for m in messages)  # calls' arguments too, as the evaluators read
    for g in grounding:
        if not any(f in text for f in quality.literal_forms(g)):
            raise SystemExit(f"{where}: grounding {g!r} is not in the shifted request")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("fixture")
    ap.add_argument("--out", required=True)
    ap.add_argument("--yaml-outputs", action="store_true", help="also print JSON tool outputs as YAML-like lines")
    ap.add_argument("--repr-outputs", action="store_true",
                    help="also print JSON tool outputs as Python's repr (str(dict), single quotes)")
    args = ap.parse_args()
    quality.setup_tokenizer()
    with gzip.open(args.fixture, "rt", encoding="utf-8") as f:
        cases = [json.loads(line) for line in f if line.strip()]
    shift = Shift(names_of(cases), yaml=args.yaml_outputs, repr_=args.repr_outputs)
    out = [shifted_session(shift, c) if "steps" in c else shifted_case(shift, c) for c in cases]
    for c in out:
        check(c)
    with gzip.open(args.out, "wt", encoding="utf-8") as f:
        for c in out:
            f.write(json.dumps(c, ensure_ascii=False) + "\n")
    print(f"{len(out)} cases, {len(shift.names)} names rewritten -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
