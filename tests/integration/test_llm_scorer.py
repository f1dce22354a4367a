"""The LLM scorer on the request path: the real gateway, the fake main upstream, and a
second fake OpenAI server as the scripted scorer model (tests/support/fake_scorer.py).

For each scorer behaviour the forwarded request is compared with what the pure
pipeline yields for the scores the scorer should have ended with (the model's,
the local scorer's, or 5 = keep), and the fallback counters are checked.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from gateway.config.policies import load_policies
from gateway.expand import expandable
from gateway.pruning.pipeline import Precomputed, prune
from gateway.pruning.policy import Policy, Steering
from gateway.pruning.scoring import LocalScorer, UnitScore
from gateway.pruning.tokens import TokenCounters
from gateway.config import RouteKind
from gateway.scorers.clients import REASON_CONNECTION, ScorerCallError, ScorerClient
from gateway.scorers.llm import CapturingScorer
from gateway.config.settings import Settings
from gateway.telemetry.pricing import PriceBook
from gateway.upstream import Http1Client, LiteLLMUpstream, OpenAICompatibleUpstream
from tests.support.fake_scorer import ScorerModel, answer, batch_ids
from tests.support.fake_upstream import Reply, estimate_prompt_tokens
from tests.support.gateway_server import GatewayServer
from tests.support import metric_value, scorer_failures

MODEL = "gpt-4o-mini"
TARGET = 900
KEY_UNITS = (2, 3)  # the passport / allergy exchange: the scripted model rates these 5, the rest 1
COUNTERS = TokenCounters()
TOPICS = ["the weather in Porto last spring", "a recipe for custard tarts", "the football results of Sunday",
          "my neighbour's new bicycle", "a documentary about whales", "the price of coffee beans",
          "a crossword clue about rivers", "the history of tram line 28", "a podcast on gardening"]


def chat_history() -> list[dict]:
    msgs = [{"role": "system", "content": "You are a travel assistant. Answer briefly."},
            {"role": "user", "content": "Plan my trip to Lisbon in May: three nights, budget 1200 EUR in total."},
            {"role": "user", "content": "Important: my passport number is X4481-22 and I am allergic to "
                                        "penicillin; keep both in mind."},
            {"role": "assistant", "content": "Noted: passport X4481-22 and the penicillin allergy. "
                                             + "I will keep these details. " * 8}]
    for topic in TOPICS:
        msgs.append({"role": "user", "content": f"By the way, tell me about {topic}. "
                                                + f"I was reading about {topic} and wondered. " * 6})
        msgs.append({"role": "assistant", "content": f"About {topic}: "
                                                     + f"there is a lot to say about {topic}, mostly trivia. " * 8})
    msgs.append({"role": "user", "content": "Which hotels near Alfama fit the budget for three nights?"})
    return msgs


BODY = {"model": MODEL, "messages": chat_history()}


def key_scores(ids: list[int]) -> dict[int, int]:
    return {i: 5 if i in KEY_UNITS else 1 for i in ids}


# -- fixtures ------------------------------------------------------------------

@pytest.fixture(scope="module")
def scorer_server() -> Iterator[ScorerModel]:
    with ScorerModel() as server:
        yield server


@pytest.fixture
def model(scorer_server: ScorerModel) -> ScorerModel:
    scorer_server.clear()
    scorer_server.responder = lambda ids, attempt, req: Reply(content=answer(key_scores(ids)))
    return scorer_server


@pytest.fixture
def policy_gateway(tmp_path: Path, upstream, model):
    """``policy_gateway(**policy_fields)`` -> (gateway, Policy): a gateway whose default
    policy uses the scripted scorer model."""
    started: list[GatewayServer] = []

    def start(**fields) -> tuple[GatewayServer, Policy]:
        # Window and low water fixed here, so the expected batches do not move with the defaults.
        values = {"protect_last_units": 4, "low_water_ratio": 0.6,
                  "scorer": "llm", "scorer_api_base": model.base_url, "scorer_min_history_tokens": 0,
                  "scorer_cost_check": False, "scorer_batch_timeout_s": 2.0, "scorer_deadline_s": 3.0, **fields}
        folder = tmp_path / f"policies{len(started)}"
        folder.mkdir()
        (folder / "default.yaml").write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in values.items()))
        gw = GatewayServer(Settings(upstream_base_url=upstream.base_url, policies_dir=folder)).start()
        started.append(gw)
        return gw, load_policies(folder)["default"]

    yield start
    for gw in started:
        gw.stop()


# -- helpers ---------------------------------------------------------------------

def send(gw: GatewayServer, body: dict = BODY, target: int | None = TARGET, **headers) -> httpx.Response:
    h = {"authorization": "Bearer sk-test", **headers}
    if target is not None:
        h["x-sieve-target-tokens"] = str(target)
    resp = gw.post("/v1/chat/completions", json=body, headers=h)
    assert resp.status_code == 200, resp.text
    return resp


def local_request(policy: Policy, body: dict = BODY, target: int = TARGET):
    capture = CapturingScorer(LocalScorer())
    prune(body, policy, scorer=capture, counter=COUNTERS.for_model(MODEL), steering=Steering(target_tokens=target))
    assert capture.request is not None
    return capture.request


def expected_messages(policy: Policy, llm: dict[int, int] | None, body: dict = BODY, target: int = TARGET,
                      keep: bool = False) -> list[dict]:
    """The pure pipeline's forward for the scores the gateway should end with."""
    local = local_request(policy, body, target).local
    scores = None
    if keep:
        scores = {i: UnitScore(5, s.relevance, "kept", s.hard) for i, s in local.items()}
    elif llm is not None:
        scores = {i: UnitScore(llm[i], s.relevance, "llm", s.hard) if i in llm else s for i, s in local.items()}
    result = prune(body, policy, scorer=LocalScorer(), counter=COUNTERS.for_model(MODEL),
                   steering=Steering(target_tokens=target), known=Precomputed(scores=scores))
    # As forwarded: with the policy's sieve_expand tool (the default) the markers name their refs.
    return expandable(result, body["messages"]).messages if policy.expand_tool else result.request["messages"]


def forwarded(upstream) -> list[dict]:
    return upstream.requests[-1].json["messages"]


# -- the answer shapes the parser must take -------------------------------------

def _lines(ids):
    return "\n".join(json.dumps({"id": i, "score": s, "reason": "r"}) for i, s in key_scores(ids).items())


SHAPES = {
    "array": lambda ids: json.dumps([{"id": i, "score": s, "reason": "r"} for i, s in key_scores(ids).items()]),
    "fenced": lambda ids: "Here you go:\n```json\n" + answer(key_scores(ids)) + "\n```\n",
    "wrapped": lambda ids: answer(key_scores(ids)),
    "json_lines": _lines,
    "score_as_string": lambda ids: json.dumps({"scores": [{"id": str(i), "score": str(s), "reason": "r"}
                                                          for i, s in key_scores(ids).items()]}),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_answer_shapes_are_read_and_drive_the_forwarded_request(policy_gateway, upstream, model, shape):
    model.responder = lambda ids, attempt, req: Reply(content=SHAPES[shape](ids))
    gw, policy = policy_gateway()
    send(gw)
    cands = local_request(policy).candidates
    assert sorted(i for b in model.batches() for i in b) == cands       # every candidate asked once
    assert len(model.batches()) == -(-len(cands) // policy.scorer_batch_size)
    sent = forwarded(upstream)
    assert sent == expected_messages(policy, key_scores(cands))
    assert sent != expected_messages(policy, None)                       # the model changed the outcome
    contents = [m["content"] for m in sent]
    assert all(BODY["messages"][i]["content"] in contents for i in KEY_UNITS)
    assert scorer_failures(gw.metrics) == {}
    req = model.requests[0].json
    assert req["temperature"] == 0 and req["response_format"] == {"type": "json_object"}
    assert req["model"] == MODEL and req["messages"][0]["role"] == "system"


def _missing(ids):
    return answer(key_scores(ids[:-1]))


def _extra(ids):
    return answer(key_scores(ids + [999]))


def _duplicated(ids):
    return json.dumps({"scores": [{"id": i, "score": s} for i, s in key_scores(ids).items()]
                       + [{"id": ids[0], "score": 3}]})


@pytest.mark.parametrize("bad", [_missing, _extra, _duplicated, lambda ids: "I think they all matter a lot."])
def test_a_malformed_answer_is_retried_once(policy_gateway, upstream, model, bad):
    model.responder = lambda ids, attempt, req: Reply(content=bad(ids) if attempt == 0 else answer(key_scores(ids)))
    gw, policy = policy_gateway()
    send(gw)
    n_batches = -(-len(local_request(policy).candidates) // policy.scorer_batch_size)
    assert len(model.requests) == 2 * n_batches
    assert forwarded(upstream) == expected_messages(policy, key_scores(local_request(policy).candidates))
    assert scorer_failures(gw.metrics) == {}


@pytest.mark.parametrize("bad,reason", [(_missing, "id_mismatch"), (_extra, "id_mismatch"),
                                        (_duplicated, "id_mismatch"),
                                        (lambda ids: "Sorry, I cannot help with that.", "parse"),
                                        (lambda ids: '{"scores": [{"id": 1, "score": ', "parse")])
def test_a_batch_still_malformed_after_the_retry_falls_back_to_local(policy_gateway, upstream, model, bad, reason):
    model.responder = lambda ids, attempt, req: Reply(content=bad(ids))
    gw, policy = policy_gateway(scorer_batch_size=100)
    send(gw)
    assert len(model.requests) == 2                    # one batch, asked twice
    assert forwarded(upstream) == expected_messages(policy, None)
    assert scorer_failures(gw.metrics) == {reason: 1}


def test_slow_answer_times_out_and_falls_back(policy_gateway, upstream, model):
    model.responder = lambda ids, attempt, req: Reply(content=answer(key_scores(ids)), delay_s=1.5)
    gw, policy = policy_gateway(scorer_batch_size=100, scorer_batch_timeout_s=0.3, scorer_deadline_s=3.0)
    t0 = time.perf_counter()
    send(gw)
    assert time.perf_counter() - t0 < 1.2
    assert forwarded(upstream) == expected_messages(policy, None)
    assert scorer_failures(gw.metrics) == {"timeout": 1}
    assert len(model.requests) == 1                    # a timeout is not retried


def test_deadline_bounds_the_whole_round(policy_gateway, upstream, model):
    model.responder = lambda ids, attempt, req: Reply(content=answer(key_scores(ids)), delay_s=2.0)
    gw, policy = policy_gateway(scorer_batch_size=6, scorer_batch_timeout_s=5.0, scorer_deadline_s=0.4)
    t0 = time.perf_counter()
    send(gw)
    assert time.perf_counter() - t0 < 1.2
    n_batches = -(-len(local_request(policy).candidates) // 6)
    assert forwarded(upstream) == expected_messages(policy, None)
    assert scorer_failures(gw.metrics) == {"deadline": n_batches}


@pytest.mark.parametrize("fallback", ["local", "keep"])
def test_server_errors_fall_back_by_policy(policy_gateway, upstream, model, fallback):
    model.responder = lambda ids, attempt, req: Reply(status=500)
    gw, policy = policy_gateway(scorer_batch_size=100, scorer_fallback=fallback)
    resp = send(gw)
    assert forwarded(upstream) == expected_messages(policy, None, keep=fallback == "keep")
    assert scorer_failures(gw.metrics) == {"http_error": 1}
    assert len(model.requests) == 1
    assert int(resp.headers["x-sieve-forwarded-tokens"]) <= TARGET


def test_one_failed_batch_falls_back_alone(policy_gateway, upstream, model):
    first = []

    def respond(ids, attempt, req):
        if not first or first[0] == ids:
            first[:] = [ids]
            return Reply(status=503)
        return Reply(content=answer(key_scores(ids)))

    model.responder = respond
    gw, policy = policy_gateway(scorer_batch_size=6)
    send(gw)
    failed = set(first[0])
    llm = {i: s for i, s in key_scores(local_request(policy).candidates).items() if i not in failed}
    assert forwarded(upstream) == expected_messages(policy, llm)
    assert scorer_failures(gw.metrics) == {"http_error": 1}


def test_unreachable_scorer_never_fails_the_request(policy_gateway, upstream, model):
    gw, policy = policy_gateway(scorer_api_base="http://127.0.0.1:9/v1", scorer_batch_size=100)
    send(gw)
    assert forwarded(upstream) == expected_messages(policy, None)
    assert scorer_failures(gw.metrics) == {"connection": 1}


def test_batches_run_concurrently(policy_gateway, upstream, model):
    model.responder = lambda ids, attempt, req: Reply(content=answer(key_scores(ids)), delay_s=0.6)
    gw, policy = policy_gateway(scorer_batch_size=6, scorer_deadline_s=5.0)
    t0 = time.perf_counter()
    send(gw)
    elapsed = time.perf_counter() - t0
    n_batches = len(model.batches())
    assert n_batches == 3
    assert 0.6 <= elapsed < 1.1, elapsed              # one batch's delay, not 3 x 0.6 s
    scorer_sum = metric_value(gw.metrics, "sieve_scorer_seconds_sum")
    assert 0.6 <= scorer_sum < 1.0
    assert forwarded(upstream) == expected_messages(policy, key_scores(local_request(policy).candidates))


def test_hybrid_sends_only_the_local_top_k(policy_gateway, upstream, model):
    gw, policy = policy_gateway(scorer="hybrid", hybrid_top_k=4)
    send(gw)
    local = local_request(policy).local
    top = sorted(sorted(local, key=lambda i: (-local[i].score, -local[i].relevance, -i))[:4])
    assert model.batches() == [top]
    assert forwarded(upstream) == expected_messages(policy, key_scores(top))


def test_small_history_or_no_saving_skips_the_model(policy_gateway, upstream, model):
    gw, policy = policy_gateway(scorer_min_history_tokens=100_000)
    send(gw)
    assert model.requests == [] and forwarded(upstream) == expected_messages(policy, None)
    # gpt-4o as the scorer of a gpt-4o-mini request: scoring ~2k tokens costs more than the
    # ~1.4k gpt-4o-mini tokens the prune saves, so the local scorer decides.
    gw2, policy2 = policy_gateway(scorer_model="gpt-4o", scorer_cost_check=True)
    send(gw2)
    assert model.requests == [] and forwarded(upstream) == expected_messages(policy2, None)


def test_frozen_requests_never_reach_the_model(policy_gateway, upstream, model):
    gw, policy = policy_gateway()
    turn = [{"role": "assistant", "content": "Hotel A."}, {"role": "user", "content": "Thanks."}]
    send(gw, **{"x-sieve-conversation-id": "c1"})                      # first sight of a named one: low water
    longer = {"model": MODEL, "messages": BODY["messages"] + turn}
    send(gw, longer, **{"x-sieve-conversation-id": "c1"})              # a frozen replay, or an epoch
    asked = len(model.requests)
    longest = {"model": MODEL, "messages": BODY["messages"] + turn + turn}
    r = gw.post("/v1/prune", json=longest, headers={"authorization": "Bearer sk-test",
                                                    "x-sieve-target-tokens": str(TARGET),
                                                    "x-sieve-conversation-id": "c1"})
    assert r.json()["report"]["mode"] == "frozen"
    assert len(model.requests) == asked


def test_scorer_tokens_are_priced_into_savings(policy_gateway, upstream, model):
    gw, policy = policy_gateway()
    send(gw)
    gw.wait_idle()
    price = PriceBook.from_litellm().lookup("gpt-4o-mini")
    expected = 0.0
    for r in model.requests:
        prompt = estimate_prompt_tokens(r.json["messages"])
        completion = len(answer(key_scores(batch_ids(r.json)))) // 4
        expected += prompt * price.base.input + completion * price.base.output
    got = metric_value(gw.metrics, "sieve_cost_usd_total", org="anonymous", model=MODEL, kind="scorer")
    assert got == pytest.approx(expected, rel=1e-9) and got > 0


def tool_step(step: int) -> list[dict]:
    cid = f"call_{step}"
    rows = " ".join(f"row {step}-{r}: sku {500000 + step * 100 + r} qty {r}" for r in range(25))
    return [{"role": "assistant", "content": None, "tool_calls": [
                {"id": cid, "type": "function",
                 "function": {"name": "search_inventory", "arguments": json.dumps({"page": step})}}]},
            {"role": "tool", "tool_call_id": cid, "content": f"page {step}: {rows}"}]


def agent_loop(gw: GatewayServer, steps: int = 20) -> list[dict]:
    messages = [{"role": "system", "content": "You are an inventory agent. Use the tools."},
                {"role": "user", "content": "Find every item with sku 500305 or 501210 and report its quantity."}]
    for step in range(steps):
        messages += tool_step(step)
        send(gw, {"model": MODEL, "messages": messages}, target=2500,
             **{"x-sieve-conversation-id": f"loop-{id(gw)}"})
    return messages


def test_agent_loop_scores_each_unit_once(policy_gateway, upstream, model):
    """20 tool-calling steps with one task: every scoring call asks only about units no
    earlier call asked about (the score cache, and epochs that keep the old prefix)."""
    shared = dict(protect_active_chain=False, protect_last_units=4, scorer_batch_size=4)
    gw, _ = policy_gateway(**shared)
    messages = agent_loop(gw)
    asked = [i for b in model.batches() for i in b]
    assert asked and len(asked) == len(set(asked)), asked
    print(f"\nagent loop, 20 steps: {len(model.requests)} scorer calls / {len(asked)} units")
    # The same history as a new conversation (a fresh decision): the cache answers every unit
    # the loop asked about; only a unit no epoch of the loop offered (one still in the window
    # at its last epoch) is asked about now.
    model.clear()
    send(gw, {"model": MODEL, "messages": messages}, target=2500, **{"x-sieve-conversation-id": "fresh"})
    fresh = [i for b in model.batches() for i in b]
    assert not set(fresh) & set(asked) and len(fresh) <= 2, (fresh, asked)


def test_without_the_cache_a_fresh_decision_asks_again(policy_gateway, upstream, model):
    gw, _ = policy_gateway(protect_active_chain=False, scorer_batch_size=4, scorer_cache_ttl_s=0)
    messages = agent_loop(gw, steps=8)
    model.clear()
    send(gw, {"model": MODEL, "messages": messages}, target=2500, **{"x-sieve-conversation-id": "fresh"})
    assert model.requests


@pytest.mark.filterwarnings("ignore::UserWarning")  # litellm's pydantic models warn on import
async def test_litellm_transport_reaches_an_openai_compatible_base(model):
    """The path for non-OpenAI-compatible model strings, exercised against the fake with
    litellm's ``openai/`` provider (offline: local price map, no network)."""
    client = ScorerClient(LiteLLMUpstream(timeout_s=30), RouteKind.LITELLM, model.base_url, "sk-test")
    messages = [{"role": "system", "content": "s"},
                {"role": "user", "content": "MESSAGES TO SCORE:\n[4] (user/message) hi"}]
    got = await client.complete("openai/gpt-4o-mini", messages, max_tokens=64, json_mode=True, timeout_s=30)
    assert json.loads(got.text) == {"scores": [{"id": 4, "score": 1, "reason": "fake"}]}
    assert got.prompt_tokens and got.completion_tokens
    assert model.requests[-1].json["temperature"] == 0
    assert model.requests[-1].headers["authorization"] == "Bearer sk-test"


SCORING_MESSAGES = [{"role": "system", "content": "s"}, {"role": "user", "content": "MESSAGES TO SCORE:\n[4] (user/message) hi"}]


async def test_a_scoring_call_is_a_forward_through_the_fast_path(model):
    """The scorer's call goes through the forward's transport (``Upstream.send``): the same
    HTTP/1.1 client, key scheme and body limit as a forwarded request."""
    http = Http1Client(connect_timeout_s=5)
    try:
        client = ScorerClient(OpenAICompatibleUpstream(http, read_timeout_s=30), RouteKind.OPENAI, model.base_url,
                              "sk-scorer")
        got = await client.complete("gpt-4o-mini", SCORING_MESSAGES, max_tokens=64, json_mode=True, timeout_s=30)
        assert json.loads(got.text) == {"scores": [{"id": 4, "score": 1, "reason": "fake"}]}
        sent = model.requests[-1]
        assert sent.headers["authorization"] == "Bearer sk-scorer" and sent.json["stream"] is False
        assert sent.json["response_format"] == {"type": "json_object"} and sent.json["temperature"] == 0
        # The forward's body limit holds for the scorer's answer too: over it, a connection failure.
        bounded = ScorerClient(OpenAICompatibleUpstream(http, read_timeout_s=30, max_body_bytes=16), RouteKind.OPENAI,
                               model.base_url, None)
        with pytest.raises(ScorerCallError) as failed:
            await bounded.complete("gpt-4o-mini", SCORING_MESSAGES, max_tokens=64, json_mode=False, timeout_s=30)
        assert failed.value.reason == REASON_CONNECTION and "UpstreamTooLarge" in str(failed.value)
    finally:
        await http.close()
