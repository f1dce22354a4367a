"""The Helm chart renders offline as docs/deploy.md installs it.

``helm template`` runs on the chart as it is in the repository (no staging, no
``helm dependency build``): the trial command of docs/deploy.md section 2, the
chart's own Valkey, and a metrics key. Helm is the binary ``.ci/check_deploy.sh``
installs into ``.ci/tools/`` (or one on PATH); without it these tests skip.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "sieve"
DEPLOY_MD = ROOT / "docs" / "deploy.md"
HELM = next((str(p) for p in (ROOT / ".ci" / "tools" / "helm",) if p.is_file()), None) or shutil.which("helm")
needs_helm = pytest.mark.skipif(HELM is None, reason="helm is not installed (bash .ci/check_deploy.sh installs it)")


def render(*args: str) -> list[dict[str, Any]]:
    assert HELM is not None
    done = subprocess.run([HELM, "template", "sieve", str(CHART), "--namespace", "sieve", *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name} among {[(d['kind'], d['metadata']['name']) for d in docs]}"
    return found[0]


def container_env(deployment: dict[str, Any]) -> dict[str, Any]:
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def trial_command() -> list[str]:
    """The `helm upgrade --install` of deploy.md's minimal trial, as its words."""
    text = DEPLOY_MD.read_text()
    block = text[text.index("A minimal trial"):]
    block = block[block.index("```sh") + 5:block.index("```", block.index("```sh") + 5)]
    command = re.search(r"helm upgrade --install .*?(?=\n(?!\s)|\Z)", block.replace("\\\n", " "), re.S)
    assert command is not None, block
    return shlex.split(command.group(0))


def test_the_chart_declares_nothing_to_fetch() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert "dependencies" not in chart, "a dependency needs `helm dependency build`, which needs the internet"


@needs_helm
def test_the_trial_in_deploy_md_renders_as_written() -> None:
    words = trial_command()
    assert words[:5] == ["helm", "upgrade", "--install", "sieve", "helm/sieve"]
    sets = [words[i + 1] for i, word in enumerate(words) if word == "--set"]
    docs = render(*(arg for value in sets for arg in ("--set", value)))
    sieve = find(docs, "Deployment", "sieve")
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    image = sieve["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"sieve:{app_version}"  # the tag section 1 builds and loads into the cluster
    text = DEPLOY_MD.read_text()
    for step in (f"docker build -t {image} .", f"kind load docker-image {image}", f"minikube image load {image}"):
        assert step in text, step
    assert container_env(sieve)["SIEVE_ALLOW_OPEN"] == "1"


@needs_helm
def test_redis_enabled_renders_the_charts_own_valkey() -> None:
    docs = render("--set", "redis.enabled=true", "--set", "replicaCount=2")
    valkey = find(docs, "Deployment", "sieve-valkey")
    container = valkey["spec"]["template"]["spec"]["containers"][0]
    assert container["image"].startswith("valkey/valkey:")
    assert "$(VALKEY_PASSWORD)" in container["args"] and "noeviction" in container["args"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    service = find(docs, "Service", "sieve-valkey")
    assert service["spec"]["ports"][0]["port"] == 6379
    assert service["spec"]["selector"] == valkey["spec"]["selector"]["matchLabels"]
    assert find(docs, "Secret", "sieve-valkey")["data"]["redis-password"]
    env = container_env(find(docs, "Deployment", "sieve"))
    assert env["SIEVE_REDIS_URL"] == "redis://:$(SIEVE_REDIS_PASSWORD)@sieve-valkey:6379/0"
    assert env["SIEVE_REDIS_PASSWORD"] == {"secretKeyRef": {"name": "sieve-valkey", "key": "redis-password"}}
    # Sieve's own Service and ServiceMonitor never select the Valkey pods.
    sieve_selector = find(docs, "Service", "sieve")["spec"]["selector"]
    assert not sieve_selector.items() <= valkey["spec"]["template"]["metadata"]["labels"].items()


@needs_helm
def test_a_metrics_key_closes_metrics_and_the_service_monitor_presents_it() -> None:
    docs = render("--set", "secrets.metricsKey.existingSecret=sieve-metrics",
                  "--set", "metrics.serviceMonitor.enabled=true")
    env = container_env(find(docs, "Deployment", "sieve"))
    assert env["SIEVE_METRICS_KEY"] == {"secretKeyRef": {"name": "sieve-metrics", "key": "metrics-key"}}
    open_routes = Settings.from_env({"SIEVE_OPEN_ROUTES": env["SIEVE_OPEN_ROUTES"]}).open_routes
    assert "/metrics" not in open_routes and {"/healthz", "/readyz"} <= set(open_routes)
    endpoint = find(docs, "ServiceMonitor", "sieve")["spec"]["endpoints"][0]
    assert endpoint["authorization"] == {"type": "Bearer",
                                         "credentials": {"name": "sieve-metrics", "key": "metrics-key"}}


def test_the_production_values_close_metrics() -> None:
    values = yaml.safe_load((CHART / "ci" / "production-values.yaml").read_text())
    assert values["secrets"]["metricsKey"]["existingSecret"]
    assert "ghcr.io" not in values["image"]["repository"]
