"""Long agent sessions with reasoning on, through Sieve, against a provider that binds reasoning to its prefix.

An agent works as Claude Code and Codex CLI do (``tests.support.reasoning_sessions``): three tasks of
ten shell commands each, every output bulky, its history append-only with every assistant turn
sent back as the API returned it, its cache breakpoint moved to the newest turn, one
conversation id, and a target Sieve must prune to. The provider (``tests.support.scripted_provider``
with ``tests.support.prefix_checks``) binds every thinking block and reasoning item to its prefix and
checks each request as the providers' documentation says (Anthropic: a 400 unless drop_block
and its beta header; OpenAI: dropped without an error); every few steps it calls Sieve's
``sieve_expand`` tool first, so Sieve answers it in rounds of its own and pins the exchange.

Over each session, on ``/v1/messages`` and ``/v1/responses``, streamed and not, at targets 4000
and 16000:

* no request fails a prefix check (and the agent gets every answer);
* Sieve's ``x-sieve-reasoning-invalidated`` on each response is the number of the agent's
  blocks or items the provider found invalid (or never got) for the first time in that request,
  and ``sieve_reasoning_invalidated_total`` their sum;
* a request the provider got as the previous one grown at its end (Sieve did not re-decide)
  loses nothing;
* ``sieve_provider_input_transformations_total`` counts every entry the provider reported.
"""

from __future__ import annotations

from typing import Iterator

import httpx
import pytest

from gateway.config.settings import Settings
from gateway.wire.headers import REASONING_HEADER
from tests.support.gateway_server import GatewayServer
from tests.integration.test_agent_clis import counter_total
from tests.support.prefix_checks import PrefixChecks, newly_lost
from tests.support.reasoning_sessions import MessagesAgent, ResponsesAgent
from tests.support.scripted_provider import Script, ScriptedProvider, Task

pytestmark = pytest.mark.timeout(600)

TASKS = tuple(Task(key, tuple(f"cat {key.lower()}_{i}.log" for i in range(10)), answer=f"DONE-{key}")
              for key in ("ALPHA", "BRAVO", "CHARLIE"))


@pytest.fixture
def provider() -> Iterator[ScriptedProvider]:
    with ScriptedProvider(Script(*TASKS), checks=PrefixChecks(), expand_every=4) as server:
        yield server


@pytest.fixture
def sieve(provider: ScriptedProvider) -> Iterator[GatewayServer]:
    settings = Settings(upstream_base_url=provider.base_url, anthropic_base_url=provider.root)
    with GatewayServer(settings) as gateway:
        yield gateway


@pytest.mark.parametrize("target", [4000, 16000])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("fmt", ["messages", "responses"])
def test_a_long_session_loses_no_request_and_counts_what_it_cost(provider, sieve, fmt, stream, target):
    make = MessagesAgent if fmt == "messages" else ResponsesAgent
    agent = _session(make(sieve.base_url, headers=_headers(target, f"session-{fmt}-{stream}-{target}"), stream=stream))
    checks = provider.checks
    assert checks is not None
    assert len(agent.exchanges) >= 30
    assert [c.refused for c in checks.log if c.refused] == []  # no request failed a prefix check
    loop = [c for c in checks.log if c.main_loop]
    bodies = provider.main_loop(fmt)
    assert len(loop) == len(bodies)  # every request the provider got, Sieve's rounds included
    rounds = len(bodies) - len(agent.exchanges)
    assert rounds > 0, "the provider never called sieve_expand: no round, no pin"
    lost = newly_lost(loop)
    said = [int(e.headers.get(REASONING_HEADER, "0")) for e in agent.exchanges]
    assert said == lost
    sieve.wait_idle()
    assert counter_total(sieve.metrics, "sieve_reasoning_invalidated_total") == sum(lost)
    assert counter_total(sieve.metrics, "sieve_provider_input_transformations_total") == \
        sum(len(c.transformations) for c in checks.log)
    tools = {repr(body.get("tools")) for body in bodies}
    assert len(tools) == 1 and "sieve_expand" in tools.pop()  # from the first request, for good
    grown = [_grown(before, after, fmt) for before, after in zip(bodies, bodies[1:])]
    firsts = [i for i, c in enumerate(loop) if not c.round]
    assert all(n == 0 for n, i in zip(lost[1:], firsts[1:]) if grown[i - 1]), (lost, grown)


def _headers(target: int, conversation: str) -> dict[str, str]:
    return {"x-sieve-target-tokens": str(target), "x-sieve-conversation-id": conversation,
            "anthropic-version": "2023-06-01"}


def _session(agent):
    """The three tasks, one after the other in the same conversation, each ending with its answer."""
    try:
        for task in TASKS:
            assert agent.task(f"{task.key}: read the ten logs and report.") == task.answer
    finally:
        agent.close()
    return agent


@pytest.mark.parametrize("target", [4000, 16000])
def test_rounds_spliced_into_a_streamed_answer_keep_its_reasoning_valid(sieve_spliced, target):
    """The model says a sentence, then calls sieve_expand (Claude's habit): Sieve answers the call at
    that point of the stream and relays the next round in the same message. The client holds one
    message made of two answers; Sieve forwards them as the provider made them (the pinned round,
    then the rest), so no request fails and nothing the client holds is counted lost for it."""
    sieve, provider = sieve_spliced
    agent = _session(MessagesAgent(sieve.base_url, headers=_headers(target, f"spliced-{target}"), stream=True))
    checks = provider.checks
    assert checks is not None and [c.refused for c in checks.log if c.refused] == []
    merged = [e for e in agent.exchanges if sum(b.get("type") == "thinking" for b in e.answer["content"]) > 1]
    assert merged, "no answer was spliced"
    lost = newly_lost([c for c in checks.log if c.main_loop])
    assert [int(e.headers.get(REASONING_HEADER, "0")) for e in agent.exchanges] == lost
    sieve.wait_idle()
    assert counter_total(sieve.metrics, "sieve_reasoning_invalidated_total") == sum(lost)


@pytest.fixture
def sieve_spliced() -> Iterator[tuple[GatewayServer, ScriptedProvider]]:
    with ScriptedProvider(Script(*TASKS), checks=PrefixChecks(), expand_every=4, expand_after_text=True) as server:
        settings = Settings(upstream_base_url=server.base_url, anthropic_base_url=server.root)
        with GatewayServer(settings) as gateway:
            yield gateway, server


def test_a_conversation_first_seen_with_history_never_gains_the_tool(provider, sieve):
    """Sieve's sieve_expand tool is in the prefix a provider binds reasoning to: a conversation
    that comes with reasoning in it (here, its first answer came from the provider directly) and
    is not pruned at once goes without the tool for good, even once Sieve prunes it (adding it
    then would invalidate every block before)."""
    first = MessagesAgent(provider.root, headers={"anthropic-version": "2023-06-01"})
    first.messages = [{"role": "user", "content": [{"type": "text", "text": "Hello."}]}]
    first.messages.append(first._ask())
    first.close()
    assert first.messages[-1]["content"][0]["type"] == "thinking"
    agent = MessagesAgent(sieve.base_url, headers=_headers(4000, "joined-late"))
    agent.messages = first.messages
    try:
        assert agent.task(f"{TASKS[0].key}: read the ten logs and report.") == TASKS[0].answer
    finally:
        agent.close()
    bodies = [b for b in provider.main_loop("messages") if len(b["messages"]) > 1]  # through Sieve
    assert len(bodies) >= 10 and all("sieve_expand" not in repr(b.get("tools")) for b in bodies)
    assert any("[sieve:" in repr(b["messages"]) for b in bodies)  # it was pruned all the same
    assert provider.checks is not None and [c.refused for c in provider.checks.log if c.refused] == []
    # A dry run of its last step reads the record: markers without refs, as the forward sent them.
    body = {"model": agent.model, "max_tokens": 4096, "thinking": {"type": "adaptive"},
            "messages": agent.messages[:-1]}
    shown = httpx.post(sieve.base_url + "/v1/prune", json=body,
                       headers={**_headers(4000, "joined-late"), "x-sieve-format": "messages"}).json()
    assert "omitted" in repr(shown["request"]) and "sieve_expand restores" not in repr(shown["request"])


def _grown(before: dict, after: dict, fmt: str) -> bool:
    """``after`` is ``before`` with more at its end (breakpoints aside): nothing was re-decided."""
    key, head = ("messages", "system") if fmt == "messages" else ("input", "instructions")
    a, b = _plain(before), _plain(after)
    return a.get(head) == b.get(head) and a.get("tools") == b.get("tools") and b[key][:len(a[key])] == a[key]


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value

