{{/* Chart name, truncated to the 63 characters Kubernetes names allow. */}}
{{- define "sieve.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name; the release name alone when it already holds the chart name. */}}
{{- define "sieve.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "sieve.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "sieve.labels" -}}
helm.sh/chart: {{ include "sieve.chart" . }}
{{ include "sieve.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sieve
{{- end }}

{{- define "sieve.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sieve.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "sieve.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "sieve.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "sieve.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* True ("true") when the chart itself must create the Secret: some inline value is set. */}}
{{- define "sieve.createSecret" -}}
{{- $s := .Values.secrets }}
{{- if or $s.providerKeys.values (and $s.adminKey.value (not $s.adminKey.existingSecret)) (and $s.virtualKeys.value (not $s.virtualKeys.existingSecret)) (and $s.metricsKey.value (not $s.metricsKey.existingSecret)) }}true{{ end }}
{{- end }}

{{- define "sieve.adminKeySecret" -}}
{{- default (include "sieve.fullname" .) .Values.secrets.adminKey.existingSecret }}
{{- end }}

{{- define "sieve.virtualKeysSecret" -}}
{{- default (include "sieve.fullname" .) .Values.secrets.virtualKeys.existingSecret }}
{{- end }}

{{- define "sieve.hasAdminKey" -}}
{{- if or .Values.secrets.adminKey.existingSecret .Values.secrets.adminKey.value }}true{{ end }}
{{- end }}

{{- define "sieve.metricsKeySecret" -}}
{{- default (include "sieve.fullname" .) .Values.secrets.metricsKey.existingSecret }}
{{- end }}

{{/* True when a metrics key is configured: /metrics is then closed and scraped with it. */}}
{{- define "sieve.hasMetricsKey" -}}
{{- if or .Values.secrets.metricsKey.existingSecret .Values.secrets.metricsKey.value }}true{{ end }}
{{- end }}

{{- define "sieve.hasVirtualKeys" -}}
{{- if or .Values.secrets.virtualKeys.existingSecret .Values.secrets.virtualKeys.value }}true{{ end }}
{{- end }}

{{/* True when some shared Redis is configured (external URL, its Secret, or the bundled Valkey). */}}
{{- define "sieve.hasRedis" -}}
{{- if or .Values.redis.enabled .Values.redis.url .Values.redis.existingSecret }}true{{ end }}
{{- end }}

{{/* The chart's own Valkey (redis.enabled): its Deployment, Service and password Secret. */}}
{{- define "sieve.valkeyName" -}}
{{- printf "%s-valkey" (include "sieve.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "sieve.valkeySelectorLabels" -}}
app.kubernetes.io/name: {{ include "sieve.name" . }}-valkey
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Not sieve.labels: the ServiceMonitor and the PodDisruptionBudget select Sieve's own by those. */}}
{{- define "sieve.valkeyLabels" -}}
helm.sh/chart: {{ include "sieve.chart" . }}
{{ include "sieve.valkeySelectorLabels" . }}
app.kubernetes.io/component: state
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sieve
{{- end }}

{{/*
Environment for the Redis URL. The bundled Valkey's password comes from its
Secret and is spliced into the URL by Kubernetes' $(VAR) expansion, so it never
appears in the rendered manifest.
*/}}
{{- define "sieve.redisEnv" -}}
{{- $r := .Values.redis }}
{{- if $r.enabled }}
{{- $host := include "sieve.valkeyName" . }}
{{- if $r.auth.enabled }}
- name: SIEVE_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ default (include "sieve.valkeyName" .) $r.auth.existingSecret }}
      key: {{ $r.auth.existingSecretPasswordKey }}
- name: SIEVE_REDIS_URL
  value: {{ printf "redis://:$(SIEVE_REDIS_PASSWORD)@%s:6379/0" $host | quote }}
{{- else }}
- name: SIEVE_REDIS_URL
  value: {{ printf "redis://%s:6379/0" $host | quote }}
{{- end }}
{{- else if $r.existingSecret }}
- name: SIEVE_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ $r.existingSecret }}
      key: {{ $r.existingSecretKey }}
{{- else if $r.url }}
- name: SIEVE_REDIS_URL
  value: {{ $r.url | quote }}
{{- end }}
{{- end }}

{{/* The config file Sieve reads (SIEVE_CONFIG); strict keys, see Settings.with_config_file. */}}
{{- define "sieve.configFile" -}}
{{- $c := .Values.config }}
{{- $out := dict "policy" $c.policy }}
{{- $up := dict }}
{{- if $c.upstream.baseUrl }}{{ $_ := set $up "base_url" $c.upstream.baseUrl }}{{ end }}
{{- if $c.upstream.apiKeyEnv }}{{ $_ := set $up "api_key_env" $c.upstream.apiKeyEnv }}{{ end }}
{{- if $up }}{{ $_ := set $out "upstream" $up }}{{ end }}
{{- if $c.models }}{{ $_ := set $out "models" $c.models }}{{ end }}
{{- with $c.budgets }}
{{- if or .orgs .teams .keys }}{{ $_ := set $out "budgets" . }}{{ end }}
{{- end }}
{{- if $c.orgPolicies }}{{ $_ := set $out "org_policies" $c.orgPolicies }}{{ end }}
{{- if $c.passthrough }}{{ $_ := set $out "passthrough" $c.passthrough }}{{ end }}
{{- if $c.prices }}{{ $_ := set $out "prices" $c.prices }}{{ end }}
{{- toYaml $out }}
{{- end }}

{{/* Policy files as ConfigMap data: each value is YAML text. */}}
{{- define "sieve.policyFiles" -}}
{{- range $name, $policy := .Values.policies }}
{{ printf "%s.yaml" $name }}: |
{{- if kindIs "string" $policy }}
{{ $policy | indent 2 }}
{{- else }}
{{ toYaml $policy | indent 2 }}
{{- end }}
{{- end }}
{{- end }}
