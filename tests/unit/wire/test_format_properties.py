"""Property tests of the format adapters over random Anthropic and Responses conversations:
whatever the pipeline decides, the written body is valid in its own format (no orphan call or
result, roles alternating, at most 4 breakpoints), thinking and reasoning items are forwarded
byte for byte and only with their turn or call, every other forwarded item is the client's own,
and a conversation's forwarded prefix is byte-stable from one request to the next."""

from __future__ import annotations

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.pruning.compression import MASKED_PREFIX
from gateway.pruning.frozen import FrozenPlan
from gateway.pruning.pipeline import prune
from gateway.pruning.policy import Policy, Steering
from gateway.pruning.result import PruneResult
from gateway.pruning.scoring import LocalScorer
from gateway.pruning.tokens import TokenCounters
from gateway.pruning.vocabulary import Mode
from gateway.wire.formats import WireFormat, adapter_for
from tests.support.formats import messages_problems, responses_problems

COUNTER = TokenCounters().for_model("claude-sonnet-4-5")
WORDS = ["order", "#W100200", "refund", "lamp", "blue", "never", "user_42", "ok", "error", "report.csv",
         "shipping", "address", "the", "zip", "98187", "please", "exchange", "item", "不要", "退款"]
text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=40).map(" ".join)
PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MESSAGES, RESPONSES = adapter_for(WireFormat.MESSAGES), adapter_for(WireFormat.RESPONSES)


def dumps(value) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


# -- Anthropic Messages ---------------------------------------------------------------------------

@st.composite
def anthropic_steps(draw, start: int = 0) -> list[dict]:
    """Alternating turns after a user turn: tool chains (parallel uses, thinking, results mixed
    with the user's words, images in results) and plain exchanges; each step ends on a user turn."""
    turns: list[dict] = []
    for step in range(start, start + draw(st.integers(1, 8))):
        if draw(st.booleans()):
            ids = [f"toolu_{step}_{k}" for k in range(draw(st.integers(1, 3)))]
            blocks = []
            if draw(st.booleans()):
                blocks.append({"type": "thinking", "thinking": draw(text), "signature": f"sig{step}=="})
            if draw(st.booleans()):
                blocks.append({"type": "text", "text": draw(text)})
            blocks += [{"type": "tool_use", "id": i, "name": "lookup", "input": {"q": draw(text)}} for i in ids]
            turns.append({"role": "assistant", "content": blocks})
            results = []
            for i in ids:
                output = draw(text) * draw(st.integers(1, 10))
                content = [{"type": "text", "text": output}, {"type": "image", "source": {
                    "type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}] \
                    if draw(st.booleans()) else output
                results.append({"type": "tool_result", "tool_use_id": i, "content": content})
            if draw(st.booleans()):
                results.append({"type": "text", "text": draw(text)})
            turns.append({"role": "user", "content": results})
        else:
            turns.append({"role": "assistant", "content": draw(text)})
            turns.append({"role": "user", "content": [{"type": "text", "text": draw(text)}]})
    return turns


@st.composite
def anthropic_bodies(draw) -> dict:
    turns = [{"role": "user", "content": draw(text)}] + draw(anthropic_steps())
    marked = [(k, j) for k, t in enumerate(turns) if isinstance(t["content"], list) for j in range(len(t["content"]))
              if t["content"][j]["type"] != "thinking"]
    for k, j in draw(st.lists(st.sampled_from(marked), max_size=3, unique=True)) if marked else ():
        turns[k]["content"][j]["cache_control"] = {"type": "ephemeral"}
    system = draw(st.sampled_from(["string", "blocks"]))
    return {"model": "claude-sonnet-4-5", "max_tokens": 512, "x_unknown": {"kept": True}, "messages": turns,
            "system": draw(text) if system == "string" else
            [{"type": "text", "text": draw(text), "cache_control": {"type": "ephemeral"}}]}


def run(adapter, body: dict, target: int, state: FrozenPlan | None = None) -> tuple[dict, PruneResult]:
    view = adapter.read(body)
    result = prune(view.body, Policy(), scorer=LocalScorer(), counter=COUNTER, state=state,
                   steering=Steering(target_tokens=target))
    return adapter.write(body, view, result), result


def _thinking_by_turn(body: dict) -> dict[str, list[bytes]]:
    """Per tool_use id, the thinking blocks of its turn (bytes)."""
    out = {}
    for turn in body["messages"]:
        blocks = turn["content"] if isinstance(turn["content"], list) else []
        thinking = [dumps(b) for b in blocks if b["type"] in ("thinking", "redacted_thinking")]
        out.update({b["id"]: thinking for b in blocks if b["type"] == "tool_use"})
    return out


@PROPERTY
@given(anthropic_bodies(), st.integers(30, 4000))
def test_messages_written_bodies_are_valid_and_the_clients_own(body, target):
    out, _ = run(MESSAGES, body, target)
    assert messages_problems(out) == []                         # alternating, no orphan, <= 4 breakpoints
    assert out["system"] is body["system"] and out["x_unknown"] == body["x_unknown"]
    # The current step last (an omission marker may follow its results: it goes into the user turn
    # after the kept assistant turn that follows the span, so the turns before keep their bytes;
    # it then takes the client's breakpoint, so the client's cache entry holds it).
    told = [b for b in _blocks(out["messages"][-1]) if not str(b.get("text", "")).startswith("[sieve:")]
    last = _blocks(body["messages"][-1])[-1]
    assert _bare(told[-1]) == _bare(last)
    if "cache_control" in last:
        assert _blocks(out["messages"][-1])[-1].get("cache_control") == last["cache_control"]
    sent_ids = _thinking_by_turn(out)
    for use_id, thinking in _thinking_by_turn(body).items():   # thinking byte for byte, with its turn
        if use_id in sent_ids:
            assert [t for t in sent_ids[use_id] if t in thinking] == thinking
    originals = {dumps({k: v for k, v in b.items() if k != "cache_control"})
                 for t in body["messages"] for b in _blocks(t)}
    for turn in out["messages"]:
        for block in turn["content"] if isinstance(turn["content"], list) else ():
            bare = {k: v for k, v in block.items() if k != "cache_control"}
            if block["type"] == "tool_result" and str(block["content"]).startswith(MASKED_PREFIX):
                continue                                        # masked: the result's id, the mask text
            if block["type"] == "text" and block["text"].startswith("[sieve:"):
                continue                                        # an inserted marker
            assert dumps(bare) in originals


def _bare(block: dict) -> dict:
    return {k: v for k, v in block.items() if k != "cache_control"}


def _blocks(turn: dict) -> list[dict]:
    content = turn["content"]
    return content if isinstance(content, list) else [{"type": "text", "text": content}]


def _strip_breakpoints(turns: list[dict]) -> bytes:
    """The turns breakpoints aside: without ``cache_control``, and a string content as the one
    text block it stands for (the provider reads them alike; a turn given a moved breakpoint
    must take the block form to carry it)."""
    return dumps([{**t, "content": [{k: v for k, v in b.items() if k != "cache_control"} for b in _blocks(t)]}
                  for t in turns])


@PROPERTY
@given(anthropic_bodies(), st.data(), st.integers(60, 1500))
def test_messages_forwarded_prefix_is_stable_across_requests(body, data, target):
    """A conversation grows by one step per request, the client moving its last breakpoint
    along (as Claude Code does); while decisions stand (frozen replay) the turns already
    forwarded come again byte for byte (breakpoints aside), and across an epoch those built
    from the view's unchanged prefix do."""
    first, result = run(MESSAGES, body, target)
    later = dict(body, messages=body["messages"] + data.draw(anthropic_steps(start=100)))
    second, again = run(MESSAGES, later, target, state=FrozenPlan.from_bytes(result.state.to_bytes()))
    if again.mode == Mode.FROZEN:
        assert _strip_breakpoints(second["messages"][:len(first["messages"])]) == \
            _strip_breakpoints(first["messages"])
    _assert_view_prefix_carries_over(MESSAGES, body, later, result, again, "messages")


def _assert_view_prefix_carries_over(adapter, body, later, result, again, field):
    """The native items written from the view messages both requests forwarded alike are alike."""
    a, b = result.request["messages"], again.request["messages"]
    sources_a = result.sources or list(range(len(a)))
    sources_b = again.sources or list(range(len(b)))
    p = 0
    while p < min(len(a), len(b)) and dumps(a[p]) == dumps(b[p]) and sources_a[p] == sources_b[p]:
        p += 1
    if p < 2:
        return
    view = adapter.read(body)
    shared = PruneResult(request={"messages": a[:p - 1]}, mode=Mode.EPOCH, strategy=result.strategy,
                         original_tokens=0, forwarded_tokens=0, target_tokens=0, message_actions=[],
                         message_scores=[], state=result.state, sources=sources_a[:p - 1])
    shared.message_actions = ["dropped"]  # marks it changed, so the adapter writes it
    prefix = adapter.write(body, view, shared)[field]
    first_out = adapter.write(body, view, result)[field]
    second_out = adapter.write(later, adapter.read(later), again)[field]
    n = max(0, len(prefix) - 1)  # the last one may still merge with what follows
    strip = _strip_breakpoints if field == "messages" else dumps
    assert strip(first_out[:n]) == strip(second_out[:n]) == strip(prefix[:n])


# -- OpenAI Responses -----------------------------------------------------------------------------

@st.composite
def response_steps(draw, start: int = 0) -> list[dict]:
    items: list[dict] = []
    for step in range(start, start + draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["chain", "chain", "chat", "unknown_pair"]))
        if kind == "chain":
            ids = [f"call_{step}_{k}" for k in range(draw(st.integers(1, 3)))]
            if draw(st.booleans()):
                items.append({"type": "reasoning", "id": f"rs_{step}", "summary": [],
                              "encrypted_content": f"gAAAA{step}=="})
            if draw(st.booleans()):
                items.append({"type": "message", "role": "assistant", "content": [
                    {"type": "output_text", "text": draw(text)}]})
            custom = draw(st.booleans())
            for i in ids:
                items.append({"type": "custom_tool_call", "call_id": i, "name": "apply_patch", "input": draw(text)}
                             if custom else
                             {"type": "function_call", "call_id": i, "name": "lookup",
                              "arguments": orjson.dumps({"q": draw(text)}).decode()})
            if draw(st.booleans()):
                items.append({"type": "web_search_call", "id": f"ws_{step}", "status": "completed"})
            for i in ids:
                items.append({"type": "custom_tool_call_output" if custom else "function_call_output",
                              "call_id": i, "output": draw(text) * draw(st.integers(1, 10))})
        elif kind == "chat":
            items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text",
                                                                               "text": draw(text)}]})
            items.append({"role": "user", "content": draw(text)})
        else:
            items.append({"type": "local_shell_call", "call_id": f"ls_{step}", "action": {"command": ["ls"]}})
            if draw(st.booleans()):
                items.append({"type": "reasoning", "id": f"rs_x{step}", "summary": []})
            items.append({"type": "local_shell_call_output", "call_id": f"ls_{step}", "output": draw(text) * 3})
    items.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": draw(text)}]})
    return items


@st.composite
def response_bodies(draw) -> dict:
    items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": draw(text)}]}]
    return {"model": "gpt-5", "instructions": draw(text), "store": False, "prompt_cache_key": "k",
            "input": items + draw(response_steps())}


def _call_groups(items: list[dict]) -> dict[bytes, set[str]]:
    """Per reasoning item, the call_ids of the calls between it and the next output or message."""
    groups, current = {}, []
    for item in items:
        if item.get("type") == "reasoning":
            current.append(dumps(item))
            groups[dumps(item)] = set()
        elif item.get("type") in ("function_call", "custom_tool_call"):
            for r in current:
                groups[r].add(item["call_id"])
        else:
            current = []
    return groups


@PROPERTY
@given(response_bodies(), st.integers(30, 4000))
def test_responses_written_bodies_are_valid_and_the_clients_own(body, target):
    out, _ = run(RESPONSES, body, target)
    assert responses_problems(out) == []                        # no orphan, unknown call types too
    assert {k: v for k, v in out.items() if k != "input"} == {k: v for k, v in body.items() if k != "input"}
    assert out["input"][-1] == body["input"][-1]
    originals = [dumps(i) for i in body["input"]]
    positions = []
    for item in out["input"]:
        if item.get("type", "").endswith("_output") and str(item["output"]).startswith(MASKED_PREFIX):
            item = next(i for i in body["input"] if i.get("call_id") == item["call_id"] and i["type"] == item["type"])
        elif item.get("role") == "user" and str(item["content"]).find("[sieve:") >= 0:
            continue                                            # an inserted marker
        # the client's own item, in the client's order
        positions.append(originals.index(dumps(item), positions[-1] + 1 if positions else 0))
    sent_calls = {i["call_id"] for i in out["input"] if "call_id" in i}
    sent = {dumps(i) for i in out["input"]}
    for reasoning, calls in _call_groups(body["input"]).items():  # reasoning goes with its calls
        if calls:
            assert (reasoning in sent) == bool(calls & sent_calls)


@PROPERTY
@given(response_bodies(), st.data(), st.integers(60, 1500))
def test_responses_forwarded_prefix_is_stable_across_requests(body, data, target):
    first, result = run(RESPONSES, body, target)
    later = dict(body, input=body["input"] + data.draw(response_steps(start=100)))
    second, again = run(RESPONSES, later, target, state=FrozenPlan.from_bytes(result.state.to_bytes()))
    if again.mode == Mode.FROZEN:
        assert dumps(second["input"][:len(first["input"])]) == dumps(first["input"])
    _assert_view_prefix_carries_over(RESPONSES, body, later, result, again, "input")
