"""Which models the gateway serves: pass-through by default, only `models:` with strict_models.

The gateway runs under uvicorn (and, for the start-up warning, as `sieve serve`
in its own process); the provider is the recording fake upstream; the caller
is the official openai client.
"""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from gateway.errors import ConfigError
from gateway.config.settings import Settings
from tests.support.gateway_server import GatewayServer
from tests.integration.budget_helpers import GatewayProcess, write_yaml
from tests.support import openai_client, wait_until

ACME = "sk-sieve-acme-0123456789abcdef"
HI = [{"role": "user", "content": "hi"}]


def strict_config(tmp_path: Path, upstream, strict: object = True) -> Path:
    return write_yaml(tmp_path / "sieve.yaml", {
        "upstream": {"base_url": upstream.base_url}, "strict_models": strict,
        "models": {"gpt-4o-mini": {"kind": "openai"}},
        "keys": [{"key": ACME, "org": "acme"}]})


def test_by_default_an_unconfigured_model_goes_to_the_default_upstream(start_gateway, upstream) -> None:
    gw = start_gateway(virtual_keys=({"key": ACME, "org": "acme"},))
    openai_client(gw, ACME).chat.completions.create(model="any-model-at-all", messages=HI)
    assert upstream.requests[-1].json["model"] == "any-model-at-all"


def test_strict_models_answers_404_for_anything_not_configured(tmp_path: Path, upstream) -> None:
    settings = Settings.from_env({"SIEVE_CONFIG": str(strict_config(tmp_path, upstream))})
    assert settings.strict_models
    with GatewayServer(settings) as gw:
        client = openai_client(gw, ACME)
        with pytest.raises(openai.NotFoundError) as refused:
            client.chat.completions.create(model="gpt-4o", messages=HI)
        assert refused.value.body["code"] == "model_not_found"
        assert refused.value.body["param"] == "model"
        assert "gpt-4o-mini" in refused.value.body["message"]  # what is served, named
        assert upstream.requests == [], "nothing was forwarded"
        client.chat.completions.create(model="gpt-4o-mini", messages=HI)
        assert [r.json["model"] for r in upstream.requests] == ["gpt-4o-mini"]
        listed = [m.id for m in client.models.list()]
        assert listed == ["gpt-4o-mini"]  # the default upstream's other models are not offered
        gw.wait_idle()
        text = gw.get("/metrics").text
    assert 'sieve_requests_total{model="other",org="acme",outcome="client_error"} 1.0' in text


def test_strict_models_from_the_environment() -> None:
    assert Settings.from_env({"SIEVE_STRICT_MODELS": "1"}).strict_models
    assert not Settings.from_env({}).strict_models


def test_strict_models_must_be_a_boolean(tmp_path: Path, upstream) -> None:
    with pytest.raises(ConfigError, match="strict_models must be true or false"):
        Settings.from_env({"SIEVE_CONFIG": str(strict_config(tmp_path, upstream, strict="yes"))})


def test_serve_without_an_upstream_warns_at_start_up(tmp_path: Path) -> None:
    config = write_yaml(tmp_path / "sieve.yaml", {"keys": [{"key": ACME, "org": "acme"}]})
    gw = GatewayProcess(config, {"SIEVE_LOG_LEVEL": "info"}).start()
    try:
        assert wait_until(lambda: "SIEVE_UPSTREAM_BASE_URL" in gw.log(), timeout_s=5), gw.log()
        warning = next(line for line in gw.log().splitlines() if "SIEVE_UPSTREAM_BASE_URL" in line)
        assert "WARNING" in warning and "404" in warning
    finally:
        gw.stop()


def test_serve_with_an_upstream_does_not_warn(tmp_path: Path, upstream) -> None:
    gw = GatewayProcess(strict_config(tmp_path, upstream), {"SIEVE_LOG_LEVEL": "info"}).start()
    try:
        assert "SIEVE_UPSTREAM_BASE_URL" not in gw.log()
    finally:
        gw.stop()
