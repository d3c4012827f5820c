{{/* The chart's name. */}}
{{- define "chat-bridge.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name. */}}
{{- define "chat-bridge.fullname" -}}
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

{{/* Labels on every object. */}}
{{- define "chat-bridge.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "chat-bridge.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels that select the pods. */}}
{{- define "chat-bridge.selectorLabels" -}}
app.kubernetes.io/name: {{ include "chat-bridge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of the `helm test` pod: not the pods' selector labels, so neither the Service, the PDB, the
NetworkPolicy's podSelector nor the spread constraints count it as a chat-bridge pod. */}}
{{- define "chat-bridge.testSelectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-test" (include "chat-bridge.name" . | trunc 58 | trimSuffix "-") }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: test
{{- end }}

{{/* The service account's name. */}}
{{- define "chat-bridge.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "chat-bridge.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret holding the environment secrets. */}}
{{- define "chat-bridge.secretName" -}}
{{- default (include "chat-bridge.fullname" .) .Values.secrets.existingSecret }}
{{- end }}

{{/* Whether Slack's HTTP Events API mode is on (the bridge then listens on config.slack.listen). */}}
{{- define "chat-bridge.slackHttp" -}}
{{- if and (eq (dig "service" "platform" "" .Values.config) "slack") (eq (dig "slack" "mode" "socket" .Values.config) "http") }}true{{- end }}
{{- end }}

{{/* The container port of Slack's HTTP Events API: the port of config.slack.listen (default 3000). */}}
{{- define "chat-bridge.slackPort" -}}
{{- $listen := dig "slack" "listen" "0.0.0.0:3000" .Values.config }}
{{- regexFind "[0-9]+$" $listen }}
{{- end }}

{{/* The container port of the HTTP listener (/healthz, /readyz, /metrics, /api/v1, /ui/). */}}
{{- define "chat-bridge.httpPort" -}}
{{- regexFind "[0-9]+$" .Values.config.http.listen }}
{{- end }}

{{/* The series selector of this release's metrics in the alert rules. */}}
{{- define "chat-bridge.metricsSelector" -}}
{{- if .Values.metrics.selector }}{{ .Values.metrics.selector }}{{- else -}}
job="{{ include "chat-bridge.fullname" . }}", namespace="{{ .Release.Namespace }}"
{{- end }}
{{- end }}

{{/* A duration of the configuration ("90s", "60m", "1.5h", "500ms") in whole seconds. */}}
{{- define "chat-bridge.seconds" -}}
{{- $n := regexFind "^[0-9]+(\\.[0-9]+)?" . | float64 }}
{{- $unit := regexFind "(ms|s|m|h)$" . }}
{{- if eq $unit "ms" }}{{ div ($n | int) 1000 }}
{{- else if eq $unit "m" }}{{ mulf $n 60 | int }}
{{- else if eq $unit "h" }}{{ mulf $n 3600 | int }}
{{- else }}{{ $n | int }}
{{- end }}
{{- end }}
