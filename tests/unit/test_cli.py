"""`sieve serve` start-up checks that need no server, and strict config errors."""

from __future__ import annotations

import pytest

from gateway.cli import main
from gateway.errors import ConfigError
from gateway.policies import load_policies
from gateway.settings import Settings


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


def test_unknown_config_key_is_an_error(tmp_path):
    path = tmp_path / "sieve.yaml"
    path.write_text("modles: {}\n")
    with pytest.raises(ConfigError, match="unknown key"):
        Settings.from_env({"SIEVE_CONFIG": str(path)})


def test_shipped_policies_load():
    policies = load_policies(Settings().policies_dir)
    assert {"default", "agent"} <= set(policies)
    assert policies["agent"].goal_reminder and policies["agent"].protect_last_units == 6


def test_shutdown_grace_is_read_and_checked():
    assert Settings.from_env({}).shutdown_grace_s == 30.0
    assert Settings.from_env({"SIEVE_SHUTDOWN_GRACE_S": "2.5"}).shutdown_grace_s == 2.5
    with pytest.raises(ConfigError, match="SIEVE_SHUTDOWN_GRACE_S must be >= 0"):
        Settings.from_env({"SIEVE_SHUTDOWN_GRACE_S": "-1"})
    with pytest.raises(ConfigError, match="SIEVE_SHUTDOWN_GRACE_S must be a number"):
        Settings.from_env({"SIEVE_SHUTDOWN_GRACE_S": "soon"})
