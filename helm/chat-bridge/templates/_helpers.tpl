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

{{/* The platforms this release serves, space-separated: config.service.platforms, else
config.service.platform. */}}
{{- define "chat-bridge.platforms" -}}
{{- $list := dig "service" "platforms" list .Values.config }}
{{- if $list }}{{ join " " $list }}{{ else }}{{ dig "service" "platform" "" .Values.config }}{{ end }}
{{- end }}

{{/* Whether Slack's HTTP Events API mode is on (the bridge then listens on config.slack.listen). */}}
{{- define "chat-bridge.slackHttp" -}}
{{- if and (has "slack" (splitList " " (include "chat-bridge.platforms" .))) (eq (dig "slack" "mode" "socket" .Values.config) "http") }}true{{- end }}
{{- end }}

{{/* The container port of Slack's HTTP Events API: the port of config.slack.listen (default 3000). */}}
{{- define "chat-bridge.slackPort" -}}
{{- $listen := dig "slack" "listen" "0.0.0.0:3000" .Values.config }}
{{- regexFind "[0-9]+$" $listen }}
{{- end }}

{{/* The container port of the HTTP listener (/healthz, /readyz, /metrics, /api/v1). */}}
{{- define "chat-bridge.httpPort" -}}
{{- regexFind "[0-9]+$" .Values.config.http.listen }}
{{- end }}

{{/* The series selector of this release's metrics in the alert rules. */}}
{{- define "chat-bridge.metricsSelector" -}}
{{- if .Values.metrics.selector }}{{ .Values.metrics.selector }}{{- else -}}
job="{{ include "chat-bridge.fullname" . }}", namespace="{{ .Release.Namespace }}"
{{- end }}
{{- end }}

{{/* A duration of the configuration in milliseconds, read by the binary's rules (docs/configuration.md):
a sum of <digits><unit> parts with unit ms, s, m or h ("500ms", "20s", "1h30m"), or whole seconds as a
number or as digits (5400, "5400"). Fractions ("1.5h") are refused, as the binary refuses them. */}}
{{- define "chat-bridge.milliseconds" -}}
{{- $s := toString . }}
{{- if regexMatch "^[0-9]+$" $s }}{{ mul (int64 $s) 1000 }}
{{- else if regexMatch "^([0-9]+(ms|s|m|h))+$" $s }}
{{- $total := int64 0 }}
{{- range regexFindAll "[0-9]+(ms|s|m|h)" $s -1 }}
{{- $n := regexFind "^[0-9]+" . | int64 }}
{{- $unit := regexReplaceAll "^[0-9]+" . "" }}
{{- $per := get (dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000) $unit }}
{{- $total = add $total (mul $n $per) }}
{{- end }}
{{- $total }}
{{- else }}
{{- fail (printf "%q is not a duration: write 500ms, 20s, 2m, 1h, 1h30m or whole seconds (fractions such as 1.5h are refused)" $s) }}
{{- end }}
{{- end }}

{{/* A duration of the configuration in whole seconds (rounded down). */}}
{{- define "chat-bridge.seconds" -}}
{{- div (include "chat-bridge.milliseconds" . | int64) 1000 }}
{{- end }}

{{/* Where each project's daemon token is mounted: <dir>/<project>/token (its token_file). */}}
{{- define "chat-bridge.projectTokens" -}}
/var/run/chat-bridge/projects
{{- end }}

{{/* The projected volume's sources: each project's token key, at <project>/token. */}}
{{- define "chat-bridge.projectTokenSources" -}}
{{- range .Values.projects }}
{{- if .token }}
- secret:
    name: {{ .token.secretName | default (include "chat-bridge.secretName" $) }}
    items:
      - key: {{ .token.key }}
        path: {{ .name }}/token
{{- end }}
{{- end }}
{{- end }}

{{/* Config keys that are secrets: they come from the Secret (CHAT_BRIDGE_* variables), never the config. */}}
{{- define "chat-bridge.secretKeys" -}}
daemon.token slack.bot_token slack.app_token slack.signing_secret discord.token http.api_token http.ui_oidc_client_secret
{{- end }}

{{/* What the binary would refuse at start-up and the chart can see at render time: fail the render
with the reason instead of rendering a release whose pods crash-loop. */}}
{{- define "chat-bridge.validate" -}}
{{- $config := .Values.config }}
{{- /* The history UI is served on the HTTP listener (config.http.listen). */}}
{{- $http := default dict $config.http }}
{{- if and (or .Values.ui.enabled (eq (toString (get $http "ui")) "true")) (not (get $http "listen")) }}
{{- fail "ui.enabled needs config.http.listen: the history pages are served on the HTTP listener" }}
{{- end }}
{{- if and .Values.ui.ingress.enabled (not .Values.ui.enabled) }}
{{- fail "ui.ingress.enabled needs ui.enabled: the Ingress would route /ui to pages that are off" }}
{{- end }}
{{- /* Secrets never in the config (the binary refuses them there too). */}}
{{- range splitList " " (include "chat-bridge.secretKeys" .) }}
{{- $parts := splitList "." . }}
{{- $section := index $config (index $parts 0) | default dict }}
{{- if and (kindIs "map" $section) (hasKey $section (index $parts 1)) }}
{{- fail (printf "config.%s: secrets belong in secrets.values or existingSecret, never in config (set it as %s)" . (printf "CHAT_BRIDGE_%s__%s" (index $parts 0) (index $parts 1) | upper)) }}
{{- end }}
{{- end }}
{{- /* A sidecar agent is reached through agent-host: the daemon's address is the chart's to set. */}}
{{- if .Values.agent.enabled }}
{{- $daemon := default dict $config.daemon }}
{{- if or (hasKey $daemon "url") (hasKey $daemon "command") }}
{{- fail "agent.enabled: the chart wires the sidecar agent through agent-host on loopback; leave config.daemon.url and config.daemon.command unset" }}
{{- end }}
{{- end }}
{{- /* Projects: each has its own daemon, so the one-project daemon settings would be a second one. */}}
{{- if .Values.projects }}
{{- $daemon := default dict $config.daemon }}
{{- range $key, $_ := $daemon }}
{{- if ne $key "cwd" }}
{{- fail (printf "config.daemon.%s is set alongside projects: each project has its own daemon; move it to projects[].daemon" $key) }}
{{- end }}
{{- end }}
{{- if .Values.agent.enabled }}
{{- fail "agent.enabled wires one sidecar agent for the one-project configuration; with projects, give each project its daemon.url" }}
{{- end }}
{{- /* Names are unique (each is a token path <name>/token and a route target). */}}
{{- $names := list }}
{{- range .Values.projects }}
{{- if has .name $names }}
{{- fail (printf "projects: %q is the name of two projects: project names are unique" .name) }}
{{- end }}
{{- $names = append $names .name }}
{{- end }}
{{- with $config.default_project }}
{{- if not (has . $names) }}
{{- fail (printf "config.default_project %q names no project: the projects are %s" . (join ", " $names)) }}
{{- end }}
{{- end }}
{{- else if $config.default_project }}
{{- fail (printf "config.default_project %q but projects is empty: add the project or remove default_project" $config.default_project) }}
{{- end }}
{{- /* SIGTERM drains the outbox for drain_timeout; the shutdown then needs up to 3 s more. */}}
{{- $drain := dig "service" "drain_timeout" "20s" $config }}
{{- $drainMs := include "chat-bridge.milliseconds" $drain | int64 }}
{{- $graceMs := mul (int64 .Values.terminationGracePeriodSeconds) 1000 }}
{{- if lt $graceMs (add $drainMs 5000) }}
{{- fail (printf "terminationGracePeriodSeconds (%v) is shorter than config.service.drain_timeout (%v) + 5 s: SIGTERM would kill the pod while it drains; set it to at least %d" .Values.terminationGracePeriodSeconds $drain (div (add $drainMs 5999) 1000)) }}
{{- end }}
{{- /* Slack's events listener and the HTTP listener on one port: the binary refuses it. */}}
{{- if eq (dig "slack" "mode" "socket" $config) "http" }}
{{- $slackListen := dig "slack" "listen" "0.0.0.0:3000" $config }}
{{- if eq (include "chat-bridge.slackPort" .) (include "chat-bridge.httpPort" .) }}
{{- fail (printf "config.slack.listen (%s) and config.http.listen (%s) use the same port %s: give Slack's HTTP Events API its own port" $slackListen $config.http.listen (include "chat-bridge.httpPort" .)) }}
{{- end }}
{{- end }}
{{- end }}
