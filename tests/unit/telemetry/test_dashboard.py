"""The Grafana dashboard and the alert rules query only metrics Sieve exports.

Every PromQL expression in ``helm/sieve/dashboards/*.json`` and
``helm/sieve/rules/sieve-alerts.yaml`` is reduced to the metric names it
selects (``_bucket``/``_sum``/``_count`` map back to their histogram), and
each must appear in the exposition of a fresh
``gateway.telemetry.metrics.Metrics()`` registry. ``exported_metric_names``
reads any exposition text, so a live ``/metrics`` body can be checked the
same way.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.metrics import MetricWrapperBase

from gateway.telemetry.metrics import Metrics

CHART = Path(__file__).resolve().parents[3] / "helm" / "sieve"
DASHBOARDS = sorted((CHART / "dashboards").glob("*.json"))
RULES = CHART / "rules" / "sieve-alerts.yaml"
DATASOURCE = "${DS_PROMETHEUS}"
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

# PromQL words that look like identifiers but are not metric names.
PROMQL_KEYWORDS = {
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
    "bool", "offset", "atan2", "inf", "nan",
}
# Clauses whose parenthesised list holds label names, not metrics.
LABEL_LIST_CLAUSE = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
IDENTIFIER = re.compile(r"(?<![\w$:.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (histogram suffixes kept)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range and subquery durations
    text = LABEL_LIST_CLAUSE.sub(" ", text)
    names = set()
    for match in IDENTIFIER.finditer(text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in PROMQL_KEYWORDS:
            continue  # a function or aggregation call, or an operator word
        names.add(name)
    return names


def selectors(expr: str) -> list[tuple[str, str]]:
    """(metric name, label matcher text) for every vector selector in ``expr``."""
    found = []
    for name in metric_names(expr):
        for match in re.finditer(rf"(?<![\w:]){re.escape(name)}(\{{[^}}]*\}})?", expr):
            found.append((name, match.group(1) or ""))
    return found


def family_name(name: str) -> str:
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def exported_metric_names(exposition: str) -> dict[str, str]:
    """Metric name -> type, from Prometheus text exposition (HELP/TYPE and samples).

    Labelled metrics with no children yet still have TYPE lines, so a fresh
    registry lists every metric. Counters are listed with ``_total``;
    histograms under their base name (their samples add the suffixed names).
    """
    names: dict[str, str] = {}
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(None, 3)
            if kind == "counter" and not name.endswith("_total"):
                name += "_total"
            names[name] = kind
        elif line and not line.startswith("#"):
            sample = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line)
            if sample:
                names.setdefault(sample.group(0), "sample")
    return names


@pytest.fixture(scope="module")
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture(scope="module")
def exported(metrics: Metrics) -> dict[str, str]:
    return exported_metric_names(generate_latest(metrics.registry).decode())


@pytest.fixture(scope="module")
def label_names(metrics: Metrics) -> dict[str, set[str]]:
    """Metric name (as queried) -> its label names, from the metric objects."""
    out = {}
    for metric in vars(metrics).values():
        if isinstance(metric, MetricWrapperBase):
            # _labelnames is prometheus_client's own record of a metric's labels.
            name = metric._name + ("_total" if metric._type == "counter" else "")
            out[name] = set(metric._labelnames)
    return out


def load_dashboard(path: Path) -> dict:
    return json.loads(path.read_text())


def panels(dashboard: dict) -> list[dict]:
    found = []
    for panel in dashboard.get("panels", []):
        found.append(panel)
        found.extend(panel.get("panels", []))  # collapsed rows hold their panels
    return found


def dashboard_queries(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title, expr) for every Prometheus target."""
    return [(p.get("title", "?"), t["expr"]) for p in panels(dashboard) for t in p.get("targets", []) if t.get("expr")]


def rule_queries() -> list[tuple[str, str]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [(r.get("alert") or r.get("record"), r["expr"]) for g in groups for r in g["rules"]]


def test_there_is_a_dashboard() -> None:
    assert [p.name for p in DASHBOARDS] == ["sieve-overview.json"]


def test_metric_names_parser() -> None:
    expr = ('histogram_quantile(0.99, sum by (le) (rate(sieve_overhead_seconds_bucket[$__rate_interval])))'
            ' / on (org) group_left () sum without (model) (sieve_requests_total{org=~"$org",kind="a b"}) > bool 0')
    assert metric_names(expr) == {"sieve_overhead_seconds_bucket", "sieve_requests_total"}
    assert exported_metric_names("# TYPE a counter\n# TYPE h histogram\nh_bucket{le=\"1\"} 0\n") == {
        "a_total": "counter", "h": "histogram", "h_bucket": "sample"}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_dashboard_query_uses_exported_metrics(path: Path, exported: dict[str, str]) -> None:
    queries = dashboard_queries(load_dashboard(path))
    assert queries, "dashboard has no queries"
    unknown = []
    for title, expr in queries:
        names = metric_names(expr)
        assert names, f"{title}: no metric found in {expr!r}"
        for name in names:
            base = family_name(name)
            ok = (name in exported and exported[name] != "histogram") or (
                base != name and exported.get(base) == "histogram")
            if not ok:
                unknown.append(f"{title}: {name}")
    assert not unknown, f"metrics not exported by Sieve: {unknown}"


def test_alert_rules_use_exported_metrics(exported: dict[str, str]) -> None:
    unknown = [f"{alert}: {name}" for alert, expr in rule_queries() for name in metric_names(expr)
               if not (name in exported or exported.get(family_name(name)) == "histogram")]
    assert not unknown, f"metrics not exported by Sieve: {unknown}"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_covers_the_contract(path: Path) -> None:
    used = {family_name(n) for _, expr in dashboard_queries(load_dashboard(path)) for n in metric_names(expr)}
    required = {
        "sieve_cost_usd_total", "sieve_prompt_tokens_original_total", "sieve_prompt_tokens_forwarded_total",
        "sieve_units_total", "sieve_budget_remaining_tokens", "sieve_budget_rejections_total",
        "sieve_overhead_seconds", "sieve_upstream_seconds", "sieve_scorer_seconds",
        "sieve_scorer_failures_total", "sieve_requests_total",
    }
    assert required <= used, f"panels missing for {sorted(required - used)}"
    exprs = " ".join(expr for _, expr in dashboard_queries(load_dashboard(path)))
    for kind in ("counterfactual", "actual", "scorer"):
        assert kind in exprs, f"net saving must use the {kind} cost"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_datasource_is_the_variable(path: Path) -> None:
    dashboard = load_dashboard(path)
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    ds = variables.get("DS_PROMETHEUS")
    assert ds and ds["type"] == "datasource" and ds["query"] == "prometheus"
    for panel in panels(dashboard):
        if panel.get("type") == "row":
            continue
        assert panel["datasource"]["uid"] == DATASOURCE, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == DATASOURCE, panel["title"]
    for name in ("org", "model"):
        assert variables[name]["datasource"]["uid"] == DATASOURCE
    # No site-specific datasource anywhere: every uid is the variable.
    uids = set(re.findall(r'"uid":\s*"([^"]*)"', path.read_text())) - {dashboard["uid"], "-- Grafana --"}
    assert uids == {DATASOURCE}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_org_and_model_variables(path: Path, label_names: dict[str, set[str]]) -> None:
    dashboard = load_dashboard(path)
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    for name in ("org", "model"):
        var = variables[name]
        assert var["type"] == "query" and var["multi"] and var["includeAll"]
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        assert re.fullmatch(rf"label_values\(sieve_\w+(\{{[^}}]*\}})?,\s*{name}\)", query), query
    # Every selector of a metric that carries org/model is filtered by the variable.
    unfiltered = []
    for title, expr in dashboard_queries(dashboard):
        for metric, matchers in selectors(expr):
            for label in ("org", "model"):
                if label in label_names.get(family_name(metric), set()) and f'{label}=~"${label}"' not in matchers:
                    unfiltered.append(f"{title}: {metric} not filtered by ${label}")
    assert not unfiltered, unfiltered
