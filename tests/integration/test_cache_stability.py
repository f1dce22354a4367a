"""Replay an agent conversation step by step: between epochs the provider sees byte-identical prefixes."""

from __future__ import annotations

import orjson

from gateway.pruning.compression import is_omission_marker
from tests.support.conversations import agent_history
from tests.support.formats import chat_to_messages, chat_to_responses
from tests.support import openai_client


def _forwarded_prefix(raw: bytes) -> bytes:
    """The raw request bytes up to the end of the last forwarded message."""
    messages = orjson.loads(raw)["messages"]
    array = orjson.dumps(messages)
    return raw[: raw.index(array) + len(array) - 1]


def test_agent_loop_keeps_a_byte_identical_prefix_between_epochs(gateway, upstream):
    history = agent_history(40, output_lines=25)
    client = openai_client(gateway, "sk-x")
    # Each step of the agent resends everything so far; the request ends where the model answers.
    cuts = [i for i in range(2, len(history) + 1) if history[i - 1]["role"] in ("user", "tool")
            and (i == len(history) or history[i]["role"] == "assistant")]
    saved = []
    for cut in cuts:
        resp = client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=history[:cut],
            extra_headers={"x-sieve-conversation-id": "loop-1", "x-sieve-target-tokens": "5000"})
        saved.append(int(resp.headers["x-sieve-saved-tokens"]))
    bodies = [r.body for r in upstream.requests]
    assert len(bodies) == len(cuts)
    breaks = [n for n in range(1, len(bodies)) if not bodies[n].startswith(_forwarded_prefix(bodies[n - 1]))]
    pruned_steps = sum(1 for s in saved if s > 0)
    assert pruned_steps > len(cuts) // 2, "the history outgrows the target: most steps must be pruned"
    # Hysteresis: an epoch prunes to the low-water mark, so several steps share a prefix. Here each
    # turn's loop takes most of what the low-water mark leaves, so the epoch a loop would need is
    # taken at the turn boundary before it (gateway.pruning.turns): about one turn in two.
    assert 1 <= len(breaks) <= len(cuts) // 3, f"prefix changed at steps {breaks}"
    for n in range(1, len(bodies)):
        sent = orjson.loads(bodies[n])["messages"]
        assert sum(1 for m in sent if m["role"] == "tool") >= 1
    # Between breaks, every forwarded request extends the previous one exactly.
    for a, b in zip(breaks, breaks[1:] + [len(bodies)]):
        for n in range(a + 1, b):
            assert bodies[n].startswith(_forwarded_prefix(bodies[n - 1]))
    # The default policy's sieve_expand tool is there from the conversation's first request (it
    # names its conversation) and stays, the same bytes on every step: providers render tools
    # before the messages, so a change there would rewrite the whole cached prefix and invalidate
    # every piece of reasoning the model left (ARCHITECTURE.md 2a).
    tools = [orjson.dumps(orjson.loads(body).get("tools")) for body in bodies]
    assert b"sieve_expand" in tools[0] and set(tools) == {tools[0]}
    # What was dropped left its ids with the provider, and a marker once sent keeps its bytes.
    markers = [[m["content"] for m in orjson.loads(body)["messages"] if is_omission_marker(m)] for body in bodies]
    with_ids = [c for found in markers for c in found if "; ids: #W" in c]
    assert with_ids, "dropped order lookups leave their order ids in a marker"
    # Between epochs a marker keeps its bytes; an epoch keeps the first one too, unless it decides
    # anew from before it (one that re-scores the old units for the turn that opens).
    moved = 0
    for n, (earlier, later) in enumerate(zip(markers, markers[1:]), start=1):
        if n not in breaks:
            assert later == earlier
        elif not (later[: len(earlier)] == earlier or later[:1] == earlier[:1]):
            moved += 1
    assert moved <= len(breaks) // 4


def test_history_edit_gets_a_fresh_prune(gateway, upstream):
    history = agent_history(30)
    client = openai_client(gateway, "sk-x")
    headers = {"x-sieve-conversation-id": "edit-1", "x-sieve-target-tokens": "4000"}
    client.chat.completions.create(model="gpt-4o-mini", messages=history, extra_headers=headers)
    edited = [dict(m) for m in history]
    edited[1] = {"role": "user", "content": "A different task entirely: list my orders."}
    r = gateway.post("/v1/prune", json={"model": "gpt-4o-mini", "messages": edited}, headers=headers)
    report = r.json()["report"]
    assert report["mode"] == "stateless"
    assert r.json()["request"]["messages"][1] == edited[1]


def test_a_named_conversation_seen_first_over_the_target_keeps_its_prefix_on_the_next_step(gateway, upstream):
    """The first decision of a named conversation goes to the low-water mark: the next
    step replays it (frozen) instead of opening an epoch that rewrites the cached prefix."""
    history = agent_history(30)
    turn = [{"role": "assistant", "content": "Done."}, {"role": "user", "content": "And the next one?"}]
    headers = {"x-sieve-conversation-id": "late-join-1", "x-sieve-target-tokens": "4000"}
    first = gateway.post("/v1/prune", json={"model": "gpt-4o-mini", "messages": history}, headers=headers).json()
    # Forwarded, it keeps its plan (a dry run writes none); the next step is dry-run against it.
    gateway.post("/v1/chat/completions", json={"model": "gpt-4o-mini", "messages": history}, headers=headers)
    assert upstream.requests[-1].json["messages"] == first["request"]["messages"]
    second = gateway.post("/v1/prune", json={"model": "gpt-4o-mini", "messages": history + turn},
                          headers=headers).json()
    assert first["report"]["mode"] == "stateless" and first["report"]["target_rule_tokens"] <= 2200
    assert second["report"]["mode"] == "frozen"
    sent = first["request"]["messages"]
    assert second["request"]["messages"][: len(sent)] == sent
    # A request that names no conversation keeps all its target allows.
    alone = gateway.post("/v1/prune", json={"model": "gpt-4o-mini", "messages": history},
                         headers={"x-sieve-target-tokens": "4000"}).json()
    assert alone["report"]["target_rule_tokens"] > 3200


ROUTES = {"chat": "/v1/chat/completions", "messages": "/v1/messages", "responses": "/v1/responses"}


def _first_then_next(gateway, body: dict, fmt: str, turn: dict) -> tuple[dict, dict]:
    """``body`` pruned as a conversation's first request over the target (dry-run, then forwarded:
    the forward keeps the plan, a dry run writes none), then its next step, dry-run."""
    headers = {"x-sieve-format": fmt, "x-sieve-target-tokens": "4000"}
    first = gateway.post("/v1/prune", json=body, headers=headers).json()
    sent = {**body, "max_tokens": 64} if fmt == "messages" else body
    assert gateway.post(ROUTES[fmt], json=sent, headers={"x-sieve-target-tokens": "4000"}).status_code == 200
    second = gateway.post("/v1/prune", json={**body, **turn}, headers=headers).json()
    return first, second


def test_a_request_that_asks_for_its_prefix_cached_is_a_conversation_that_goes_on(start_gateway, providers):
    """No conversation id, but a ``prompt_cache_key`` (OpenAI) or a ``cache_control``
    breakpoint (Anthropic): the client will send this prefix again, so the first decision
    goes to the low-water mark and the next step replays it instead of opening an epoch.
    The same body without the signal keeps all its target allows."""
    gateway = start_gateway(upstream_base_url=providers.base_url, anthropic_base_url=providers.anthropic_base_url)
    history = agent_history(30)
    answer, question = {"role": "assistant", "content": "Done."}, {"role": "user", "content": "And the next one?"}
    chat = {"model": "gpt-4o-mini", "messages": history}
    responses = chat_to_responses({"model": "gpt-5", "messages": history})
    messages = chat_to_messages({"model": "claude-sonnet-4-5", "messages": history})
    asked = [
        ("chat", {**chat, "prompt_cache_key": "task-1"}, {"messages": history + [answer, question]}),
        ("responses", {**responses, "prompt_cache_key": "task-2"},
         {"input": responses["input"] + chat_to_responses({"model": "gpt-5", "messages": [answer, question]})["input"]}),
        ("messages", {**messages, "system": [{"type": "text", "text": messages["system"],
                                              "cache_control": {"type": "ephemeral"}}]},
         {"messages": messages["messages"] + [{"role": "assistant", "content": "Done."},
                                              {"role": "user", "content": "And the next one?"}]}),
    ]
    for fmt, body, turn in asked:
        first, second = _first_then_next(gateway, body, fmt, turn)
        assert first["report"]["mode"] == "stateless" and first["report"]["target_rule_tokens"] <= 2200, fmt
        assert second["report"]["mode"] == "frozen", fmt
        sent, then = first["request"], second["request"]
        field = "input" if fmt == "responses" else "messages"
        assert then[field][: len(sent[field])] == sent[field], fmt
    # Another task (the first user message names it): a conversation of its own.
    other = [dict(m) for m in history]
    first_user = next(i for i, m in enumerate(other) if m["role"] == "user")
    other[first_user]["content"] += " This is another task."
    plain = [("chat", {"model": "gpt-4o-mini", "messages": other}),
             ("responses", chat_to_responses({"model": "gpt-5", "messages": other})),
             ("messages", chat_to_messages({"model": "claude-sonnet-4-5", "messages": other}))]
    for fmt, body in plain:
        alone = gateway.post("/v1/prune", json=body, headers={"x-sieve-format": fmt,
                                                               "x-sieve-target-tokens": "4000"}).json()
        assert alone["report"]["target_rule_tokens"] > 3200, fmt
