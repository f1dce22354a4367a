"""A policy that prunes harder as the org's budget runs low (tighten_below), before any 429."""

from __future__ import annotations

from gateway.pruning.policy import Policy
from tests.support.conversations import agent_history
from tests.support.fake_upstream import Reply
from tests.support import openai_client


def test_tightened_target_steps_in_quarters():
    policy = Policy(tighten_below=0.4)
    assert policy.tightened_target(8000, 0.9) == 8000
    assert policy.tightened_target(8000, 0.35) == 6000     # 3 quarters
    assert policy.tightened_target(8000, 0.2) == 4000      # 2 quarters
    assert policy.tightened_target(8000, 0.01) == 2000     # never below a quarter
    assert Policy().tightened_target(8000, 0.0) == 8000    # disabled by default


def test_low_budget_prunes_harder(start_gateway, upstream, tmp_path):
    (tmp_path / "default.yaml").write_text("tighten_below: 0.5\ntarget_tokens: 8000\nmin_prompt_tokens: 0\n")
    usage = {"prompt_tokens": 30_000, "completion_tokens": 10, "total_tokens": 30_010}
    gw = start_gateway(policies_dir=tmp_path, budgets={"orgs": {"acme": {"day": 100_000}}},
                       virtual_keys=({"key": "sk-acme", "org": "acme"},))
    history = agent_history(30)
    sizes = []
    with openai_client(gw, "sk-acme") as client:
        for _ in range(3):
            upstream.enqueue(Reply(usage=usage))
            resp = client.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=history)
            sizes.append(int(resp.headers["x-sieve-forwarded-tokens"]))
            gw.wait_idle()
    # 100k budget: full cap while more than half is left, then smaller caps as it drains.
    assert sizes[0] <= 8000 and sizes[1] <= 8000
    assert sizes[2] <= 6000 < sizes[0]
