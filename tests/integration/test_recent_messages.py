"""A warm step fingerprints only the messages its conversation did not send before
(``gateway.exchange.recent_messages``); a client that edits an earlier message must still be seen.

One conversation goes step by step, and on the way the client edits a tool result the stored
plan masks, then rewrites its first message with the keys in another order (the same message:
its fingerprint stays), then edits the task itself. It is sent three times over, to real
gateways on one real Redis with the fake provider recording every body: through one replica
(each step finds its previous request remembered), alternating between two replicas (each
remembers the conversation two steps back), and through a replica that remembers nothing. After
every step the plan in Redis holds the fingerprints of the messages as sent, computed here one
by one (a missed edit would leave the old message's there), and the three runs forward the same
bytes step for step."""

from __future__ import annotations

from urllib.parse import quote

import orjson
import pytest
import redis as redis_client

from gateway.config.settings import Settings
from gateway.exchange import conversation_key
from gateway.exchange.recent_messages import RecentMessages
from gateway.pruning import fingerprint
from gateway.wire import ANONYMOUS
from tests.support.conversations import agent_history
from tests.support.gateway_server import GatewayServer

pytestmark = pytest.mark.redis
TARGET = "20000"


def _steps(history: list[dict]) -> list[int]:
    """Request lengths an agent sends: each ends with the last result of a tool step."""
    return [k for k in range(20, len(history) + 1)
            if history[k - 1]["role"] == "tool" and (k == len(history) or history[k]["role"] != "tool")]


def _plan(store: redis_client.Redis, conversation: str, messages: list[dict]) -> dict:
    key = conversation_key(ANONYMOUS.org, {"messages": messages}, conversation)
    raw = store.get(f"sieve:conv:{{{quote(key, safe='')}}}")
    assert raw is not None
    return orjson.loads(raw)


def test_warm_steps_reuse_fingerprints_and_see_every_edit(redis, upstream, tmp_path) -> None:
    history = agent_history(48)
    lengths = _steps(history)
    (tmp_path / "default.yaml").write_text("scorer: local\n")  # no background worker's vectors in play
    settings = Settings(upstream_base_url=upstream.base_url, redis_url=redis.url, policies_dir=tmp_path)
    store = redis_client.Redis.from_url(redis.url)
    with GatewayServer(settings) as one, GatewayServer(settings) as other, GatewayServer(settings) as plain:
        plain.services.forwarder.pruner.recent_messages = RecentMessages(max_bytes=0)  # keeps nothing

        def run(conversation: str, gateways: list[GatewayServer]) -> tuple[list[bytes], list[int], list[int]]:
            """The bodies forwarded, the plan's epoch after each step, and the steps that edited."""
            sent, epochs, edits, messages = [], [], [], list(history)
            for step, n in enumerate(lengths):
                stored = _plan(store, conversation, messages) if step else None
                decided_twice = stored is not None and stored["epoch"] >= 2
                if not edits and decided_twice:  # a tool result the plan masks, edited
                    masked = [i for i, action in stored["actions"] if action == "mask"]
                    messages[masked[0]] = {**messages[masked[0]], "content": "order cancelled"}
                    edits.append(step)
                elif len(edits) == 1 and step == edits[0] + 2:  # the first message, its keys in another order
                    messages[0] = dict(reversed(list(messages[0].items())))
                elif len(edits) == 1 and step > edits[0] + 2 and decided_twice:  # the task itself, edited
                    messages[1] = {**messages[1], "content": messages[1]["content"] + " Only the open orders."}
                    edits.append(step)
                gw = gateways[step % len(gateways)]
                response = gw.post("/v1/chat/completions", content=orjson.dumps(
                    {"model": "gpt-4o-mini", "messages": messages[:n]}), headers={
                    "content-type": "application/json", "x-sieve-conversation-id": conversation,
                    "x-sieve-target-tokens": TARGET})
                assert response.status_code == 200, response.text
                sent.append(upstream.requests[-1].body)
                plan = _plan(store, conversation, messages)
                assert plan["fp"] == [fingerprint(m) for m in messages[:n]], step
                epochs.append(plan["epoch"])
            return sent, epochs, edits

        before = one.services.forwarder.pruner.recent_messages.reused
        alone = run("alone", [one])
        reused_alone = one.services.forwarder.pruner.recent_messages.reused - before
        replicas = run("replicas", [one, other])
        reference = run("reference", [plain])

    assert plain.services.forwarder.pruner.recent_messages.reused == 0
    assert reused_alone > 20 * (len(lengths) - 1)  # each step after the first took its predecessor's
    assert alone == reference and replicas == reference  # the same bytes forwarded, epochs and edits
    _, epochs, edits = reference
    assert len(edits) == 2, (edits, epochs)
    for step in edits:  # an edit leaves the stored decisions behind: decided afresh (a first epoch)
        assert epochs[step - 1] >= 2 and epochs[step] == 1, (step, epochs)
