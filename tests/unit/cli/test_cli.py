"""`sieve serve` start-up checks that need no server, and strict config errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.errors import ConfigError
from gateway.config.policies import load_policies
from gateway.pruning.compression import OMITTED_PREFIX
from gateway.pruning.policy import Policy
from gateway.pruning.tokens import TokenCounters
from gateway.config.settings import Settings
from tests.support.conversations import agent_history
from tests.support.formats import chat_to_messages


def test_open_gateway_refuses_a_public_bind(capsys, monkeypatch):
    monkeypatch.delenv("SIEVE_ALLOW_OPEN", raising=False)
    assert main(["serve", "--host", "0.0.0.0", "--port", "8199"]) == 2
    assert "refusing to listen on 0.0.0.0" in capsys.readouterr().err


def test_unknown_policy_key_names_file_and_line(tmp_path):
    (tmp_path / "default.yaml").write_text("strategy: relevance\nprotect_last_unit: 3\n")
    with pytest.raises(ConfigError, match=r"default.yaml:2: unknown key 'protect_last_unit' \(did you mean"):
        load_policies(tmp_path)


def test_bad_policy_value_is_a_start_up_error(tmp_path):
    (tmp_path / "default.yaml").write_text("low_water_ratio: 2\n")
    with pytest.raises(ConfigError, match="low_water_ratio must be in"):
        load_policies(tmp_path)
    (tmp_path / "default.yaml").write_text("loop_low_water_ratio: 0\n")
    with pytest.raises(ConfigError, match="loop_low_water_ratio must be in"):
        load_policies(tmp_path)


def test_unknown_config_key_is_an_error(tmp_path):
    path = tmp_path / "sieve.yaml"
    path.write_text("modles: {}\n")
    with pytest.raises(ConfigError, match="unknown key"):
        Settings.from_env({"SIEVE_CONFIG": str(path)})


def test_shipped_policies_load():
    policies = load_policies(Settings().policies_dir)
    assert {"default", "agent"} <= set(policies)
    assert policies["agent"].goal_reminder and policies["agent"].protect_last_units == 6
    # sieve_expand is on in both (issue 20: a policy turns it off), and a file that says nothing
    # of it gets it too.
    assert policies["default"].expand_tool and policies["agent"].expand_tool and Policy().expand_tool


def test_shutdown_grace_is_read_and_checked():
    assert Settings.from_env({}).shutdown_grace_s == 30.0
    assert Settings.from_env({"SIEVE_SHUTDOWN_GRACE_S": "2.5"}).shutdown_grace_s == 2.5
    with pytest.raises(ConfigError, match="SIEVE_SHUTDOWN_GRACE_S must be >= 0"):
        Settings.from_env({"SIEVE_SHUTDOWN_GRACE_S": "-1"})
    with pytest.raises(ConfigError, match="SIEVE_SHUTDOWN_GRACE_S must be a number"):
        Settings.from_env({"SIEVE_SHUTDOWN_GRACE_S": "soon"})


def _sieve_prune(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    """``sieve prune`` as a user runs it: its own process, its exit status and streams."""
    return subprocess.run([sys.executable, "-m", "gateway.cli", "prune", *args], input=stdin, capture_output=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[3])


def test_prune_of_a_bare_json_array_is_one_clean_line(tmp_path):
    path = tmp_path / "request.json"
    path.write_text('[{"role": "user", "content": "hi"}]')
    done = _sieve_prune(str(path))
    assert done.returncode == 1 and done.stdout == b""
    assert done.stderr.decode().splitlines() == [
        f"sieve prune: {path}: the request body must be a JSON object, not an array"]


def test_prune_reads_standard_input():
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    done = _sieve_prune("-", stdin=json.dumps(body).encode())
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["request"] == body
    bad = _sieve_prune("-", stdin=b"{not json")
    assert bad.returncode == 1 and len(bad.stderr.decode().splitlines()) == 1
    assert bad.stderr.decode().startswith("sieve prune: stdin: ")


def test_prune_shows_the_markers_with_their_refs_as_forwarded():
    # The shipped default has sieve_expand on: the printed messages are those the gateway
    # forwards, markers naming their refs, and the report counts exactly them.
    body = {"model": "gpt-4o-mini", "messages": agent_history(20)}
    done = _sieve_prune("-", "--target", "3000", stdin=json.dumps(body).encode())
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    sent = out["request"]["messages"]
    assert any(str(m.get("content")).startswith(OMITTED_PREFIX + ", ref ") for m in sent)
    counter = TokenCounters().for_model("gpt-4o-mini")
    assert out["report"]["forwarded_tokens"] == sum(map(counter.model_tokens, sent))
    assert out["report"]["target_rule_tokens"] == counter.count_messages(sent) <= 3000


def test_prune_format_answers_in_the_bodys_own_format():
    body = {"model": "claude-sonnet-4-5", "max_tokens": 64, "system": "Be brief.",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {
                "type": "ephemeral"}}]}]}
    done = _sieve_prune("-", "--format", "messages", stdin=json.dumps(body).encode())
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["request"] == body and out["report"]["format"] == "messages"
    wrong = _sieve_prune("-", "--format", "responses", stdin=json.dumps(body).encode())
    assert wrong.returncode == 1
    assert wrong.stderr.decode().splitlines() == [
        "sieve prune: stdin: 'input' is required (unless previous_response_id or conversation names the history)"]


def test_prune_reads_the_bodys_format_when_none_is_given():
    """Issue 28: a Messages body without --format was read as Chat (79 tokens counted for a
    62,565-token body, nothing pruned, no warning)."""
    body = chat_to_messages({"model": "claude-sonnet-4-5", "messages": agent_history(20)})
    body["max_tokens"] = 64
    done = _sieve_prune("-", "--target", "3000", stdin=json.dumps(body).encode())
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["report"]["format"] == "messages" and out["report"]["original_tokens"] > 10_000
    assert out["report"]["forwarded_tokens"] < out["report"]["original_tokens"]
    assert "messages" in out["request"] and "system" in out["request"]  # answered in its own format
    responses = {"model": "gpt-5", "input": "hi", "instructions": "Be brief."}
    assert json.loads(_sieve_prune("-", stdin=json.dumps(responses).encode()).stdout)["report"]["format"] == \
        "responses"


def test_prune_refuses_a_body_of_two_formats_and_says_how_to_choose():
    body = {"model": "m", "system": "Be brief.", "messages": [{"role": "tool", "tool_call_id": "c", "content": "x"}]}
    done = _sieve_prune("-", stdin=json.dumps(body).encode())
    assert done.returncode == 1 and done.stdout == b""
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1 and "looks like Anthropic Messages" in lines[0] and "pass --format" in lines[0]


@pytest.mark.parametrize("target", ["0", "-5", "many"])
def test_prune_refuses_a_target_that_is_not_a_positive_integer(target):
    """Issue 28: --target -5 or 0 was accepted (the x-sieve-target-tokens header gives 400)."""
    done = _sieve_prune("-", "--target", target, stdin=b'{"model": "m", "messages": []}')
    assert done.returncode == 2 and done.stdout == b""
    assert "--target: must be a positive integer" in done.stderr.decode()
