"""`sieve prune` and `sieve replay` on files, through the CLI entry point."""

from __future__ import annotations

import json

import orjson

from gateway.cli import main
from tests.support.conversations import agent_history


def test_prune_file_prints_request_and_report(tmp_path, capsys):
    path = tmp_path / "req.json"
    path.write_text(json.dumps({"model": "gpt-4o-mini", "messages": agent_history(15)}))
    assert main(["prune", str(path), "--target", "2000"]) == 0
    out = orjson.loads(capsys.readouterr().out)
    assert out["report"]["forwarded_tokens"] <= 2000 < out["report"]["original_tokens"]
    assert out["request"]["messages"][0]["role"] == "system"


def test_prune_file_bad_input_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text('{"model": "m"}')
    assert main(["prune", str(path)]) == 1
    assert "'messages' is required" in capsys.readouterr().err


def test_replay_projects_savings_per_model(tmp_path, capsys):
    history = agent_history(25)
    lines = [json.dumps({"model": "gpt-4o-mini", "messages": history[:k]})
             for k in range(3, len(history) + 1) if history[k - 1]["role"] == "user"]
    audit = {"request_id": "r1", "request": {"model": "claude-haiku-4-5", "messages": history}}
    path = tmp_path / "logs.jsonl"
    path.write_text("\n".join(lines + [json.dumps(audit), "garbage"]) + "\n")
    assert main(["replay", str(path), "--target", "3000", "--no-progress"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:] if line and not line.startswith("skipped")}
    assert rows["gpt-4o-mini"][1] == str(len(lines))
    assert float(rows["gpt-4o-mini"][4]) > 20          # saved %
    assert float(rows["gpt-4o-mini"][7]) > 0            # saved $
    assert rows["claude-haiku-4-5"][1] == "1"
    assert "skipped 1 line" in out
