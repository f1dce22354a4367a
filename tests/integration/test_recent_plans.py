"""A warm step reads back the plan its replica saved last as a kept copy instead of decoding
it (``gateway.exchange.recent_plans``); what is forwarded must not tell the two apart.

One conversation goes step by step through one replica (each step finds its own last save:
the kept copy); the same conversation, under another id, alternates between two replicas
sharing one Redis (each step finds the other replica's bytes: decoded), and under a third
goes two steps on one replica, then one on the other (which decodes what the first wrote
after a step on its kept copy: a frozen replay of a kept plan writes only what it changed,
``FrozenPlan.to_bytes_replayed``). Real gateways, a real redis-server, the fake provider
recording every body: step for step the provider gets the same bytes, across frozen replays
and epochs; and the plan in Redis after every step is what ``to_bytes`` writes for it."""

from __future__ import annotations

from urllib.parse import quote

import orjson
import pytest
import redis as redis_client

from gateway.config.settings import Settings
from gateway.exchange import conversation_key
from gateway.pruning import FrozenPlan
from gateway.wire import ANONYMOUS
from tests.support.conversations import agent_history
from tests.support.gateway_server import GatewayServer

pytestmark = pytest.mark.redis


def _steps(history: list[dict]) -> list[int]:
    """Request lengths an agent sends: each ends with the last result of a tool step."""
    return [k for k in range(20, len(history) + 1)
            if history[k - 1]["role"] == "tool" and (k == len(history) or history[k]["role"] != "tool")]


def test_a_kept_plan_and_a_decoded_one_forward_the_same_bytes(redis, upstream, tmp_path) -> None:
    history = agent_history(48)
    lengths = _steps(history)
    # The local scorer: the embedding scorer (when its model is built) mixes in vectors a
    # background worker makes, so two runs of one conversation could decide differently.
    (tmp_path / "default.yaml").write_text("scorer: local\n")
    settings = Settings(upstream_base_url=upstream.base_url, redis_url=redis.url, policies_dir=tmp_path)
    store = redis_client.Redis.from_url(redis.url)
    with GatewayServer(settings) as one, GatewayServer(settings) as other:
        def run(conversation: str, gateways: list[GatewayServer]) -> list[bytes]:
            sent = []
            for step, n in enumerate(lengths):
                gw = gateways[step % len(gateways)]
                response = gw.post("/v1/chat/completions", content=orjson.dumps(
                    {"model": "gpt-4o-mini", "messages": history[:n]}), headers={
                    "content-type": "application/json", "x-sieve-conversation-id": conversation,
                    "x-sieve-target-tokens": "20000"})
                assert response.status_code == 200, response.text
                sent.append(upstream.requests[-1].body)
                raw = store.get(f"sieve:conv:{{{quote(conversation_key(ANONYMOUS.org, {}, conversation), safe='')}}}")
                assert raw is not None and raw == FrozenPlan.from_bytes(raw).to_bytes(), step
            return sent

        hits_before = one.services.forwarder.pruner.recent_plans.hits
        kept = run("kept", [one])
        kept_hits = one.services.forwarder.pruner.recent_plans.hits - hits_before
        hits_before = [gw.services.forwarder.pruner.recent_plans.hits for gw in (one, other)]
        decoded = run("decoded", [other, one])
        decoded_hits = [gw.services.forwarder.pruner.recent_plans.hits - h
                        for gw, h in zip((one, other), hits_before)]
        # Two steps on one replica, the third on the other: it decodes what the first wrote after
        # replaying its own kept plan (a frozen replay writes only what it changed).
        handed = run("handed", [one, one, other])

    assert kept_hits == len(lengths) - 1, kept_hits  # every step after the first read its own save
    assert decoded_hits == [0, 0], decoded_hits      # every step read the other replica's bytes
    forwarded = [orjson.loads(body)["messages"] for body in kept]
    frozen = sum(later[:len(earlier)] == earlier for earlier, later in zip(forwarded, forwarded[1:]))
    assert len(forwarded[-1]) < lengths[-1] and 3 <= frozen < len(forwarded) - 1, (frozen, len(forwarded))  # replays, epochs
    assert kept == decoded == handed
