#!/usr/bin/env python3
"""Split `helm template` output for validation.

    python helm/sieve/ci/split_manifests.py RENDERED.yaml OUT_DIR

Writes OUT_DIR/core.yaml with every built-in Kubernetes kind (for
kubernetes-validate --strict) and, for the Prometheus Operator custom
resources that kubernetes-validate has no schema for, checks of their own:
each PrometheusRule's spec goes to OUT_DIR/prometheusrule-N.yaml as a plain
rule file for `promtool check rules`, and each ServiceMonitor must select the
chart's Service and scrape a port that Service names. The rendered config file
and policy files go to OUT_DIR/config.yaml and OUT_DIR/policies/ so the
gateway's strict loaders can read them. Prints the kinds found.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

CUSTOM_KINDS = {"ServiceMonitor", "PrometheusRule"}  # monitoring.coreos.com/v1


def main(argv: list[str]) -> int:
    rendered, out = Path(argv[1]), Path(argv[2])
    out.mkdir(parents=True, exist_ok=True)
    docs = [d for d in yaml.safe_load_all(rendered.read_text()) if d]
    core = [d for d in docs if d["kind"] not in CUSTOM_KINDS]
    (out / "core.yaml").write_text(yaml.safe_dump_all(core, sort_keys=False))
    problems = []
    services = [d for d in docs if d["kind"] == "Service"]
    for n, doc in enumerate(d for d in docs if d["kind"] == "PrometheusRule"):
        if doc.get("apiVersion") != "monitoring.coreos.com/v1" or not doc.get("spec", {}).get("groups"):
            problems.append(f"PrometheusRule {doc['metadata']['name']}: needs monitoring.coreos.com/v1 and spec.groups")
        (out / f"prometheusrule-{n}.yaml").write_text(yaml.safe_dump(doc.get("spec", {}), sort_keys=False))
    for doc in (d for d in docs if d["kind"] == "ServiceMonitor"):
        name = doc["metadata"]["name"]
        selector = doc["spec"]["selector"]["matchLabels"]
        ports = {e.get("port") for e in doc["spec"]["endpoints"]}
        matched = [s for s in services if selector.items() <= s["metadata"]["labels"].items()]
        if not matched:
            problems.append(f"ServiceMonitor {name}: selects no Service of this release")
        for svc in matched:
            missing = ports - {p.get("name") for p in svc["spec"]["ports"]}
            if missing:
                problems.append(f"ServiceMonitor {name}: Service {svc['metadata']['name']} has no port {sorted(missing)}")
    # The config file and policies the pods will mount, for the gateway's own strict loaders.
    for doc in (d for d in docs if d["kind"] == "ConfigMap"):
        name = doc["metadata"]["name"]
        if name.endswith("-config"):
            (out / "config.yaml").write_text(doc["data"]["config.yaml"])
        elif name.endswith("-policies"):
            (out / "policies").mkdir(exist_ok=True)
            for filename, text in doc["data"].items():
                (out / "policies" / filename).write_text(text)
    for problem in problems:
        print(f"split-manifests: {problem}", file=sys.stderr)
    kinds = [f"{d['kind']}/{d['metadata']['name']}" for d in docs]
    print(" ".join(kinds))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
