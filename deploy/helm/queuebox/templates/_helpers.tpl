{{/* The chart's name. */}}
{{- define "queuebox.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name, within the 63 characters a name may have. */}}
{{- define "queuebox.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* What selects the relays' pods; the migration Job's pods are another
component, so that the Service and the PodDisruptionBudget never count them. */}}
{{- define "queuebox.selectorLabels" -}}
app.kubernetes.io/name: {{ include "queuebox.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: relay
{{- end -}}

{{- define "queuebox.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "queuebox.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "queuebox.migrateLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "queuebox.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: migrate
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "queuebox.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "queuebox.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "queuebox.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The Secret the relays take their environment from. */}}
{{- define "queuebox.secretName" -}}
{{- default (include "queuebox.fullname" .) .Values.existingSecret -}}
{{- end -}}

{{/* Where the configuration file is mounted. */}}
{{- define "queuebox.configPath" -}}/etc/queuebox/queuebox.yaml{{- end -}}

{{/* The configuration file: the values' config with the admin listener the
chart needs (every interface of the pod, so that the kubelet and
Prometheus reach it, which QueueBox allows only with a token). Refuses what
would not run. */}}
{{- define "queuebox.configFile" -}}
{{- $c := deepCopy (.Values.config | default dict) -}}
{{- if hasKey $c "admin" -}}
{{- fail "config.admin: the chart sets the admin listener itself (on adminPort, every interface, with the token of the Secret's QUEUEBOX_ADMIN_TOKEN); leave admin out of config, and set adminPort to change the port" -}}
{{- end -}}
{{- if not $c.destinations -}}
{{- fail "config.destinations is empty: give the relay's destinations (and routes) under config, as in docs/configuration.md; the chart's values.yaml shows an example" -}}
{{- end -}}
{{- if not $c.routes -}}
{{- fail "config.routes is empty: give at least one route, such as { topicPattern: \"#\", destination: NAME }; without one every row would go dead" -}}
{{- end -}}
{{- if not (or .Values.existingSecret (hasKey .Values.secretEnv "QUEUEBOX_DATABASE_URL") (dig "database" "url" "" $c)) -}}
{{- fail "the relays have no database: set secretEnv.QUEUEBOX_DATABASE_URL (postgres://user:password@host:5432/db), or existingSecret with that key, or config.database.url" -}}
{{- end -}}
{{- $_ := set $c "admin" (dict "listen" (printf "0.0.0.0:%d" (int .Values.adminPort)) "token" "${QUEUEBOX_ADMIN_TOKEN}") -}}
{{- toYaml $c -}}
{{- end -}}

{{/* The drain timeout in seconds, rounded up. */}}
{{- define "queuebox.drainSeconds" -}}
{{- $ms := dig "shutdown" "drainTimeoutMs" 15000 (.Values.config | default dict) | int -}}
{{- div (add $ms 999) 1000 -}}
{{- end -}}

{{/* The grace period: above the drain timeout, so that the kubelet's
SIGKILL never cuts a drain short. */}}
{{- define "queuebox.gracePeriod" -}}
{{- $drain := include "queuebox.drainSeconds" . | int -}}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds -}}
{{- add $drain 15 -}}
{{- else -}}
{{- $g := .Values.terminationGracePeriodSeconds | int -}}
{{- if le $g $drain -}}
{{- fail (printf "terminationGracePeriodSeconds %d is not above the drain timeout (config.shutdown.drainTimeoutMs, %d s): the kubelet would kill relays in the middle of their drain; give more than %d, or leave it empty for the drain plus 15 s" $g $drain $drain) -}}
{{- end -}}
{{- $g -}}
{{- end -}}
{{- end -}}

{{/* A PodDisruptionBudget's or an IntOrString's value: a number, or a quoted percentage. */}}
{{- define "queuebox.intOrString" -}}
{{- if kindIs "string" . -}}{{ . | quote }}{{- else -}}{{ . | int }}{{- end -}}
{{- end -}}
