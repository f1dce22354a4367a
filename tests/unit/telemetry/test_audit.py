"""The audit log: one JSON line per request, content only on opt-in, never a key."""

from __future__ import annotations

import io
import logging

import orjson
import pytest

from gateway.telemetry.audit import AuditEntry, AuditLog, MessageDecision, Timings, redact
from gateway.telemetry.pricing import PriceBook
from gateway.telemetry.savings import OriginalPrompt, savings_for_request
from gateway.telemetry.usage import Usage

PRICES = PriceBook({}, {"m": {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6}})
PLANTED = "sk-proj-PLANTEDkey0123456789abcdefXYZ"
ODD_KEY = "vk_9f8e7d6c5b4a"  # a virtual key with no recognisable shape: scrubbed as a given secret


def entry(**overrides):
    savings = savings_for_request(PRICES, model="m", original=OriginalPrompt([300, 600], ["a", "b"], None),
                                  forwarded_tokens=300, usage=Usage(320, 10), scorer_usd=1e-5)
    base = dict(
        request_id="req-1", timestamp=1_700_000_000.25, org="acme", team="search", model="m",
        strategy="relevance", outcome="pruned", original_tokens=900, forwarded_tokens=300,
        decisions=[MessageDecision(0, "kept", 5.0, "pinned: system"), MessageDecision(1, "dropped", 1.0, "low")],
        savings=savings, timings=Timings(prune_ms=1.5, scorer_ms=None, upstream_ms=250.0, overhead_ms=2.0),
        request_body={"model": "m", "messages": [{"role": "system", "content": "be brief"},
                                                 {"role": "user", "content": "hello there"}]},
    )
    base.update(overrides)
    return AuditEntry(**base)


def lines(buf: io.BytesIO) -> list[dict]:
    raw = buf.getvalue()
    assert raw.endswith(b"\n")
    return [orjson.loads(line) for line in raw.splitlines()]


def test_one_line_per_request_with_every_field():
    buf = io.BytesIO()
    log = AuditLog(buf)
    log.write(entry())
    log.write(entry(request_id="req-2"))
    first, second = lines(buf)
    assert second["request_id"] == "req-2"
    assert first["timestamp"] == "2023-11-14T22:13:20.250Z"
    assert {k: first[k] for k in ("org", "team", "model", "strategy", "outcome")} == {
        "org": "acme", "team": "search", "model": "m", "strategy": "relevance", "outcome": "pruned"}
    assert first["tokens"] == {"original": 900, "forwarded": 300, "saved": 600}
    assert first["decisions"] == [{"index": 0, "action": "kept", "score": 5.0, "reason": "pinned: system"},
                                  {"index": 1, "action": "dropped", "score": 1.0, "reason": "low"}]
    cost = first["cost"]
    assert cost["priced"] is True
    assert cost["actual_usd"] == pytest.approx(320 * 1e-6 + 10 * 2e-6)
    assert cost["counterfactual_usd"] == pytest.approx(920 * 1e-6 + 10 * 2e-6)
    assert cost["net_usd"] == pytest.approx(600 * 1e-6 - 1e-5)
    assert first["timings"] == {"prune_ms": 1.5, "scorer_ms": None, "upstream_ms": 250.0, "overhead_ms": 2.0}
    assert "request" not in first


def test_content_only_when_the_policy_opts_in():
    buf = io.BytesIO()
    AuditLog(buf).write(entry())
    assert b"hello there" not in buf.getvalue()
    buf = io.BytesIO()
    AuditLog(buf).write(entry(include_content=True))
    (line,) = lines(buf)
    assert line["request"]["messages"][1]["content"] == "hello there"


def test_no_key_is_ever_written():
    body = {
        "model": "m",
        "api_key": PLANTED,
        "metadata": {"Authorization": f"Bearer {PLANTED}", "x-api-key": PLANTED, "note": "fine"},
        "messages": [
            {"role": "user", "content": f"my key is {PLANTED}, and the header: Authorization: Bearer {PLANTED}"},
            {"role": "user", "content": [{"type": "text", "text": f"again {PLANTED} and {ODD_KEY}"}]},
        ],
    }
    buf = io.BytesIO()
    log = AuditLog(buf, secrets=["upstream-secret-value-123"])
    log.write(entry(include_content=True, request_body=body, secrets=[ODD_KEY],
                    decisions=[MessageDecision(0, "kept", 5.0, f"mentions {PLANTED}")]))
    log.write(entry(include_content=True,
                    request_body={"messages": [{"role": "user", "content": "upstream-secret-value-123"}]}))
    out = buf.getvalue()
    for secret in (PLANTED, "PLANTEDkey", ODD_KEY, "upstream-secret-value-123"):
        assert secret.encode() not in out
    first = lines(buf)[0]
    assert first["request"]["metadata"]["note"] == "fine"
    assert first["request"]["metadata"]["Authorization"] == "[redacted]"
    assert "[redacted]" in first["request"]["messages"][0]["content"]


def test_redact_keeps_ordinary_text():
    text = {"content": "use sk-learn, max_tokens=5, sieve_requests_total, prompt_tokens", "prompt_tokens": 5}
    assert redact(text, ["short"]) == text


def test_disabled_log_writes_nothing():
    log = AuditLog.open(None)
    assert not log.enabled
    log.write(entry())
    log.close()


def test_file_target_appends(tmp_path):
    path = tmp_path / "audit.jsonl"
    log = AuditLog.open(str(path))
    log.write(entry())
    assert len(path.read_bytes().splitlines()) == 1  # flushed per line: visible before close
    log.close()
    log = AuditLog.open(path)
    log.write(entry(request_id="req-2"))
    log.close()
    assert [orjson.loads(x)["request_id"] for x in path.read_bytes().splitlines()] == ["req-1", "req-2"]


def test_stdout_target(capsys):
    log = AuditLog.open("-")
    log.write(entry())
    log.close()  # does not close stdout
    out = capsys.readouterr().out
    assert orjson.loads(out.strip())["request_id"] == "req-1"


def test_write_failure_is_logged_not_raised(caplog):
    buf = io.BytesIO()
    log = AuditLog(buf)
    buf.close()
    with caplog.at_level(logging.ERROR, logger="sieve.audit"):
        log.write(entry())
    assert "req-1" in caplog.text


def test_unpriced_and_missing_savings():
    buf = io.BytesIO()
    log = AuditLog(buf)
    log.write(entry(savings=None, outcome="budget_rejected"))
    unpriced = savings_for_request(PRICES, model="zz", original=OriginalPrompt([5], ["a"], None),
                                   forwarded_tokens=5, usage=Usage(9, 1))
    log.write(entry(savings=unpriced))
    first, second = lines(buf)
    assert first["cost"] is None
    assert second["cost"]["priced"] is False and second["cost"]["actual_usd"] == 0.0
