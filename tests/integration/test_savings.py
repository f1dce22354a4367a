"""Dollars through the real gateway: cost and token counters move by exactly what the price map says.

The fake upstream returns usage as scripted (OpenAI shape, and Anthropic's as
litellm reports it inside an OpenAI-shaped usage), or as its prompt-cache
simulation computes it. Expected dollars are computed here from litellm's price
map entries themselves (not through ``gateway.telemetry.pricing``) and compared
with the deltas of ``sieve_cost_usd_total`` scraped from ``/metrics``.

The counterfactual rule (gateway/telemetry/savings.py), restated for the expectations:
the unpruned request's prompt is ``usage.prompt + (original − forwarded)``; its
cached part is the original messages that match the conversation's previous
unpruned request (whole messages) plus the non-message overhead, at least what
the provider really read; its cache writes are the real ones, capped by its
uncached part; an unchanged request costs exactly what it cost.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import orjson
import pytest

from gateway.pruning.conversation import build_conversation
from prometheus_client.parser import text_string_to_metric_families

from gateway.pruning.tokens import TokenCounters
from gateway.config.settings import Settings
from gateway.telemetry.pricing import load_litellm_model_cost
from gateway.expand import tool_definition
from gateway.wire.formats import WireFormat
from tests.support.conversations import agent_history
from tests.support.fake_scorer import ScorerModel, answer
from tests.support.fake_upstream import PromptCache, Reply
from tests.support.gateway_server import GatewayServer
from tests.support import openai_client

ORG = "anonymous"  # an open gateway's callers
OPENAI_MODEL, ANTHROPIC_MODEL = "gpt-4o-mini", "claude-haiku-4-5"


# -- helpers -----------------------------------------------------------------

Sample = tuple[str, tuple[tuple[str, str], ...]]


def scrape(gw) -> dict[Sample, float]:
    """Every sample of ``/metrics`` once the deferred accounting has run."""
    gw.wait_idle()
    text = httpx.get(gw.base_url + "/metrics", timeout=10).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict[Sample, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


class Delta:
    """Metric deltas between two scrapes, by name and labels."""

    def __init__(self, before: dict[Sample, float], after: dict[Sample, float]) -> None:
        self.before, self.after = before, after

    def __call__(self, name: str, **labels: str) -> float:
        return value(self.after, name, **labels) - value(self.before, name, **labels)

    def cost(self, model: str, kind: str) -> float:
        return self("sieve_cost_usd_total", org=ORG, model=model, kind=kind)

    def net(self, model: str) -> float:
        return self.cost(model, "counterfactual") - self.cost(model, "actual") - self.cost(model, "scorer")


def rates(model: str) -> dict[str, float]:
    """USD per token from litellm's price map entry; no cache price means the input price."""
    entry = load_litellm_model_cost()[model]
    base = entry["input_cost_per_token"]
    return {"input": base, "output": entry["output_cost_per_token"],
            "read": entry.get("cache_read_input_token_cost") or base,
            "write": entry.get("cache_creation_input_token_cost") or base}


def bill(model: str, prompt: int, completion: int, read: int = 0, write: int = 0) -> float:
    """Dollars of one call; ``prompt`` includes the cached reads and writes."""
    r = rates(model)
    return (prompt - read - write) * r["input"] + read * r["read"] + write * r["write"] + completion * r["output"]


def sieve_tool_tokens(model: str) -> int:
    """The default policy's sieve_expand definition in the model's encoding: a pruned request
    carries it (billed), the unpruned one would not, so the counterfactual leaves it out."""
    return TokenCounters().for_model(model).count_text(orjson.dumps(tool_definition(WireFormat.CHAT)).decode())


def openai_usage(prompt: int, completion: int, cached: int | None = None) -> dict[str, Any]:
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                             "total_tokens": prompt + completion}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached, "audio_tokens": 0}
    return usage


def anthropic_usage(prompt: int, completion: int, read: int, write: int) -> dict[str, Any]:
    """litellm's usage for an Anthropic call: prompt_tokens is the total; the cache parts named twice."""
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": read, "cache_creation_tokens": write,
                                      "text_tokens": prompt - read - write},
            "cache_read_input_tokens": read, "cache_creation_input_tokens": write}


def ask(gw, model: str, messages: list[dict], *, stream: bool = False, headers: dict | None = None):
    """One chat call; returns (response headers, usage as the client saw it or None)."""
    c = openai_client(gw, "sk-savings-test")
    if not stream:
        raw = c.chat.completions.with_raw_response.create(model=model, messages=messages,
                                                          extra_headers=headers or {})
        return raw.headers, raw.parse().usage
    with c.chat.completions.with_streaming_response.create(model=model, messages=messages, stream=True,
                                                           extra_headers=headers or {}) as raw:
        chunks = list(raw.parse())
    assert chunks and all(ch.usage is None for ch in chunks), "the usage chunk Sieve asked for is hidden"
    return raw.headers, None


SMALL = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Where is my order #W1000001?"}]

# (model, usage as returned, tokens billed: prompt, completion, read, write)
USAGES = {
    "openai-uncached": (OPENAI_MODEL, openai_usage(1500, 40), (1500, 40, 0, 0)),
    "openai-cached": (OPENAI_MODEL, openai_usage(2048, 40, cached=1536), (2048, 40, 1536, 0)),
    "anthropic-read-write": (ANTHROPIC_MODEL, anthropic_usage(3000, 60, read=2000, write=600),
                             (3000, 60, 2000, 600)),
    "anthropic-uncached": (ANTHROPIC_MODEL, anthropic_usage(1200, 30, read=0, write=0), (1200, 30, 0, 0)),
}


# -- unpruned requests: counterfactual == actual, both exactly the bill -------

@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("case", list(USAGES))
def test_unpruned_request_costs_exactly_its_bill(gateway, upstream, case, stream):
    model, usage, (prompt, completion, read, write) = USAGES[case]
    upstream.enqueue(Reply(content="Your order ships today.", usage=usage))
    before = scrape(gateway)
    headers, seen = ask(gateway, model, SMALL, stream=stream)
    d = Delta(before, scrape(gateway))
    if not stream:
        assert seen.prompt_tokens == prompt  # verbatim
    expected = bill(model, prompt, completion, read, write)
    assert d.cost(model, "actual") == pytest.approx(expected, rel=1e-12)
    assert d.cost(model, "counterfactual") == pytest.approx(expected, rel=1e-12)
    assert d.cost(model, "scorer") == 0.0
    assert d.net(model) == pytest.approx(0.0, abs=1e-15)
    original = int(headers["x-sieve-original-tokens"])
    assert original == int(headers["x-sieve-forwarded-tokens"]) > 0
    assert d("sieve_prompt_tokens_original_total", org=ORG, model=model) == original
    assert d("sieve_prompt_tokens_forwarded_total", org=ORG, model=model) == original
    assert d("sieve_completion_tokens_total", org=ORG, model=model) == completion
    assert d("sieve_requests_total", org=ORG, model=model, outcome="passthrough") == 1
    assert d("sieve_units_total", org=ORG, action="kept") == len(SMALL)
    assert d("sieve_unpriced_requests_total", model=model) == 0
    if stream:  # Sieve asked for the usage chunk, read it and hid it from the client
        assert upstream.requests[-1].json["stream_options"] == {"include_usage": True}


def test_the_hand_computed_prices_are_litellms():
    """Guard for the expectations above: the figures they use are the price map's."""
    assert rates(OPENAI_MODEL) == {"input": 1.5e-07, "output": 6e-07, "read": 7.5e-08, "write": 1.5e-07}
    assert rates(ANTHROPIC_MODEL) == {"input": 1e-06, "output": 5e-06, "read": 1e-07, "write": 1.25e-06}


# -- a first-sight prune: the saving is exactly the removed tokens at input price

@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("model,cached", [(OPENAI_MODEL, 0), (OPENAI_MODEL, 1024), (ANTHROPIC_MODEL, 1024)])
def test_stateless_prune_saves_the_removed_tokens_at_input_price(gateway, upstream, model, cached, stream):
    history = agent_history(24, output_lines=25)
    headers = {"x-sieve-target-tokens": "4000", "x-sieve-conversation-id": f"first-{model}-{cached}-{stream}"}
    pruned = gateway.post("/v1/prune", json={"model": model, "messages": history}, headers={
        **headers, "x-sieve-conversation-id": "dry-run"}).json()["report"]
    forwarded = pruned["forwarded_tokens"]
    prompt, completion = forwarded + 300, 25  # the provider's count: ours + tool/format overhead
    usage = openai_usage(prompt, completion, cached) if model == OPENAI_MODEL else \
        anthropic_usage(prompt, completion, read=cached, write=prompt - cached)
    upstream.enqueue(Reply(content="done", usage=usage))
    before = scrape(gateway)
    got, _ = ask(gateway, model, history, stream=stream, headers=headers)
    d = Delta(before, scrape(gateway))
    original = int(got["x-sieve-original-tokens"])
    assert int(got["x-sieve-forwarded-tokens"]) == forwarded < original
    write = prompt - cached if model == ANTHROPIC_MODEL else 0
    actual = bill(model, prompt, completion, cached, write)
    # No previous request: the unpruned one would have read what this one read, and
    # written no more than this one wrote; the removed tokens at the input price.
    # The sieve_expand definition the pruned request carried is in the actual prompt only.
    tool = sieve_tool_tokens(model)
    assert upstream.requests[-1].json["tools"][-1]["function"]["name"] == "sieve_expand"
    counterfactual = bill(model, prompt + original - forwarded - tool, completion, cached, write)
    assert d.cost(model, "actual") == pytest.approx(actual, rel=1e-12)
    assert d.cost(model, "counterfactual") == pytest.approx(counterfactual, rel=1e-12)
    assert d.net(model) == pytest.approx((original - forwarded - tool) * rates(model)["input"], rel=1e-9)
    assert d("sieve_prompt_tokens_original_total", org=ORG, model=model) == original
    assert d("sieve_prompt_tokens_forwarded_total", org=ORG, model=model) == forwarded
    assert d("sieve_completion_tokens_total", org=ORG, model=model) == completion
    assert d("sieve_requests_total", org=ORG, model=model, outcome="pruned") == 1
    changed = d("sieve_units_total", org=ORG, action="masked") + d("sieve_units_total", org=ORG, action="dropped")
    assert changed > 0
    units = build_conversation(history, lambda m: 0).units  # a tool call and its results: one unit
    assert changed + d("sieve_units_total", org=ORG, action="kept") == len(units)


# -- pruning that breaks a cached prefix costs more than it saves -------------

def _agent_steps(history: list[dict]) -> list[int]:
    """Request lengths of an agent loop: each request ends where the model answers."""
    return [i for i in range(3, len(history) + 1) if history[i - 1]["role"] in ("user", "tool")
            and (i == len(history) or history[i]["role"] == "assistant")]


@pytest.fixture
def cached_upstream(upstream):
    """The shared fake upstream with a prompt cache; the cache shape is set by the test."""
    yield upstream
    upstream.prompt_cache = None


def _counterfactual(model: str, prompt: int, completion: int, read: int, write: int,
                    original: int, forwarded: int, prefix_tokens: int) -> float:
    """The counterfactual rule for a pruned request whose previous unpruned request was a prefix of it."""
    overhead = max(prompt - forwarded, 0)
    cf_prompt = max(prompt + original - forwarded, 0)
    cf_read = min(max(prefix_tokens + overhead, read), cf_prompt)
    cf_write = min(write, cf_prompt - cf_read)
    return bill(model, cf_prompt, completion, cf_read, cf_write)


@pytest.mark.parametrize("shape,model", [("anthropic", ANTHROPIC_MODEL), ("openai", OPENAI_MODEL)])
def test_prune_that_breaks_the_cached_prefix(gateway, cached_upstream, shape, model):
    """An agent loop under a 5,000-token cap: steps extend each other (cache reads grow) until
    the history passes the cap; that step's epoch prunes the middle of the prefix, so the
    provider reads (almost) nothing from cache and, on Anthropic, re-writes the whole prompt.
    With Anthropic's prices (read 0.1×, write 1.25× input) that step's net saving is negative."""
    cached_upstream.prompt_cache = PromptCache(shape)
    history = agent_history(30, output_lines=25)
    counter = TokenCounters().for_model(model)
    headers = {"x-sieve-conversation-id": f"break-{shape}", "x-sieve-target-tokens": "5000"}
    previous: list[dict] | None = None
    broke = False
    for cut in _agent_steps(history):
        messages = history[:cut]
        before = scrape(gateway)
        got, usage = ask(gateway, model, messages, headers=headers)
        d = Delta(before, scrape(gateway))
        original, forwarded = int(got["x-sieve-original-tokens"]), int(got["x-sieve-forwarded-tokens"])
        read = usage.prompt_tokens_details.cached_tokens
        write = getattr(usage, "cache_creation_input_tokens", None) or 0
        actual = bill(model, usage.prompt_tokens, usage.completion_tokens, read, write)
        assert d.cost(model, "actual") == pytest.approx(actual, rel=1e-12)
        if forwarded == original:  # still under the cap: nothing changed, nothing saved or lost
            assert not broke, "after the first epoch every step replays its decisions"
            assert d.cost(model, "counterfactual") == pytest.approx(actual, rel=1e-12)
            previous = messages
            continue
        assert previous is not None, "the first steps fit under the cap"
        prefix = sum(counter.count_message(m) for m in messages[:len(previous)])
        # The conversation came to Sieve with answers in it already: Sieve never adds its
        # sieve_expand tool to it (``tools`` stays as the conversation began, gateway.expand).
        sent = forwarded
        expected = _counterfactual(model, usage.prompt_tokens, usage.completion_tokens, read, write,
                                   original, sent, prefix)
        assert d.cost(model, "counterfactual") == pytest.approx(expected, rel=1e-12)
        assert d("sieve_requests_total", org=ORG, model=model, outcome="pruned") == 1
        # The provider had cached the whole previous request; after the epoch it
        # reads only the few leading messages pruning left in place.
        assert read < prefix // 4
        if shape == "anthropic":
            assert write == usage.prompt_tokens - read  # the new prefix is written again, at 1.25×
            assert d.net(model) < 0, "pruning that breaks the cache must show as a loss"
            assert d.net(model) == pytest.approx(expected - actual, rel=1e-9)
        broke = True
        break
    assert broke, "the loop never outgrew the cap"


def test_cache_break_loss_is_the_cost_of_the_lost_cache(gateway, cached_upstream):
    """Same scenario, checked from the other side: what the loss is made of. The unpruned
    request would have read ``prefix`` tokens at 0.1× and written only the new suffix at
    1.25×; the pruned one writes everything it sends at 1.25×."""
    cached_upstream.prompt_cache = PromptCache("anthropic")
    history = agent_history(30, output_lines=25)
    headers = {"x-sieve-conversation-id": "break-sum", "x-sieve-target-tokens": "5000"}
    before = scrape(gateway)
    epochs = 0
    for cut in _agent_steps(history)[:10]:
        got, _ = ask(gateway, ANTHROPIC_MODEL, history[:cut], headers=headers)
        epochs += got["x-sieve-saved-tokens"] != "0"
    d = Delta(before, scrape(gateway))
    assert epochs >= 1
    # Over the whole loop so far the dashboard's net figure is negative too.
    assert d.net(ANTHROPIC_MODEL) < 0
    assert d("sieve_requests_total", org=ORG, model=ANTHROPIC_MODEL, outcome="pruned") == epochs


# -- the scorer's own dollars -------------------------------------------------

def test_llm_scorer_cost_is_counted_and_taken_off_the_saving(tmp_path, upstream):
    """The cheap scoring model's usage, priced at ITS model's price, moves kind=scorer,
    and the net saving is counterfactual − actual − scorer."""
    scorer_usage = {"prompt_tokens": 900, "completion_tokens": 60, "total_tokens": 960}

    def respond(ids, attempt, req):
        return Reply(content=answer({i: 1 for i in ids}), usage=scorer_usage)

    with ScorerModel(respond) as scorer:
        folder = tmp_path / "policies"
        folder.mkdir()
        fields = {"scorer": "llm", "scorer_model": OPENAI_MODEL, "scorer_api_base": scorer.base_url,
                  "scorer_min_history_tokens": 0, "scorer_cost_check": False,
                  "scorer_batch_timeout_s": 5.0, "scorer_deadline_s": 10.0}
        (folder / "default.yaml").write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in fields.items()))
        audit = tmp_path / "audit.jsonl"
        with GatewayServer(Settings(upstream_base_url=upstream.base_url, policies_dir=folder,
                                    audit_log=str(audit))) as gw:
            history = agent_history(24, output_lines=25)
            upstream.enqueue(Reply(content="done", usage=openai_usage(3000, 20)))
            before = scrape(gw)
            got, _ = ask(gw, ANTHROPIC_MODEL, history, headers={"x-sieve-target-tokens": "4000"})
            d = Delta(before, scrape(gw))
        calls = len(scorer.requests)
    assert calls >= 1
    r = rates(OPENAI_MODEL)  # the scorer model's price, not the main model's
    expected_scorer = calls * (900 * r["input"] + 60 * r["output"])
    assert d.cost(ANTHROPIC_MODEL, "scorer") == pytest.approx(expected_scorer, rel=1e-12)
    original, forwarded = int(got["x-sieve-original-tokens"]), int(got["x-sieve-forwarded-tokens"])
    assert forwarded < original
    assert d.cost(ANTHROPIC_MODEL, "actual") == pytest.approx(bill(ANTHROPIC_MODEL, 3000, 20), rel=1e-12)
    tool = sieve_tool_tokens(ANTHROPIC_MODEL)  # the default policy's sieve_expand, billed with the pruned request
    assert d.cost(ANTHROPIC_MODEL, "counterfactual") == pytest.approx(
        bill(ANTHROPIC_MODEL, 3000 + original - forwarded - tool, 20), rel=1e-12)
    assert d.net(ANTHROPIC_MODEL) == pytest.approx(
        (original - forwarded - tool) * rates(ANTHROPIC_MODEL)["input"] - expected_scorer, rel=1e-9)
    (line,) = [json.loads(raw) for raw in audit.read_bytes().splitlines()]
    assert line["cost"]["sieve_tool_tokens"] == tool
    assert line["cost"]["scorer_usd"] == pytest.approx(expected_scorer, rel=1e-12)
    assert line["timings"]["scorer_ms"] > 0  # the scoring round's own time


# -- no price, no guess -------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_unpriced_model_is_counted_and_never_priced(gateway, upstream, stream):
    model = "fake-model"
    assert model not in load_litellm_model_cost()
    upstream.enqueue(Reply(content="hello", usage=openai_usage(5000, 50, cached=2048)))
    before = scrape(gateway)
    got, _ = ask(gateway, model, SMALL, stream=stream)
    after = scrape(gateway)
    d = Delta(before, after)
    assert d("sieve_unpriced_requests_total", model=model) == 1
    for kind in ("counterfactual", "actual"):
        assert ("sieve_cost_usd_total", (("kind", kind), ("model", model), ("org", ORG))) not in after
    assert d.cost(model, "scorer") == 0.0  # the scorer's dollars (none here) would still count
    assert d("sieve_completion_tokens_total", org=ORG, model=model) == 50
    assert d("sieve_prompt_tokens_original_total", org=ORG, model=model) == int(got["x-sieve-original-tokens"])
    assert d("sieve_requests_total", org=ORG, model=model, outcome="passthrough") == 1


def test_priced_overrides_make_a_model_priced(start_gateway, upstream):
    """The configurable price table prices a model the map does not know."""
    gw = start_gateway(prices={"fake-model": {"input_cost_per_token": 2e-6, "output_cost_per_token": 8e-6,
                                              "cache_read_input_token_cost": 5e-7}})
    upstream.enqueue(Reply(usage=openai_usage(1000, 10, cached=400)))
    before = scrape(gw)
    ask(gw, "fake-model", SMALL)
    d = Delta(before, scrape(gw))
    assert d("sieve_unpriced_requests_total", model="fake-model") == 0
    assert d.cost("fake-model", "actual") == pytest.approx(600 * 2e-6 + 400 * 5e-7 + 10 * 8e-6, rel=1e-12)


def test_upstream_error_moves_no_dollars(gateway, upstream):
    upstream.enqueue(Reply(status=500))
    before = scrape(gateway)
    with pytest.raises(openai.InternalServerError):
        ask(gateway, OPENAI_MODEL, SMALL)
    d = Delta(before, scrape(gateway))
    assert d("sieve_requests_total", org=ORG, model=OPENAI_MODEL, outcome="upstream_error") == 1
    for kind in ("counterfactual", "actual", "scorer"):
        assert d.cost(OPENAI_MODEL, kind) == 0.0
    assert d("sieve_completion_tokens_total", org=ORG, model=OPENAI_MODEL) == 0
