{{/* The release's base name: the release name, with "dolphin" added when it lacks it. */}}
{{- define "dolphin.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains "dolphin" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-dolphin" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end }}

{{/* Labels of every object of the release. */}}
{{- define "dolphin.labels" -}}
{{ include "dolphin.selectorLabels" . }}
app.kubernetes.io/part-of: dolphin
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* Labels that select the operator's pods (fixed once installed: a Deployment's selector
cannot change). */}}
{{- define "dolphin.selectorLabels" -}}
app.kubernetes.io/name: dolphin-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* True when the operator manages its own namespace only. */}}
{{- define "dolphin.namespaced" -}}
{{- if eq .Values.scope "Namespace" }}true{{ end -}}
{{- end }}

{{- define "dolphin.operatorName" -}}{{ include "dolphin.fullname" . }}-operator{{- end }}

{{- define "dolphin.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (include "dolphin.operatorName" .) -}}
{{- end }}

{{- define "dolphin.webhookServiceName" -}}{{ include "dolphin.fullname" . }}-webhook{{- end }}

{{- define "dolphin.webhookSecretName" -}}{{ include "dolphin.fullname" . }}-webhook-cert{{- end }}

{{/* A ValidatingWebhookConfiguration is cluster-wide: a namespaced install's is named after
its namespace, so that installs in two namespaces do not overwrite each other's. */}}
{{- define "dolphin.webhookConfigurationName" -}}
{{- if include "dolphin.namespaced" . -}}
{{ include "dolphin.fullname" . }}-validating-webhooks-{{ .Release.Namespace }}
{{- else -}}
{{ include "dolphin.fullname" . }}-validating-webhooks
{{- end -}}
{{- end }}

{{/* The ClusterRole scrapers of the secure metrics endpoint are bound to: dolphin-metrics-reader
for release dolphin (as config/rbac names it); a namespaced install's carries its namespace. */}}
{{- define "dolphin.metricsReaderName" -}}
{{- if include "dolphin.namespaced" . -}}
{{ include "dolphin.fullname" . }}-metrics-reader-{{ .Release.Namespace }}
{{- else -}}
{{ include "dolphin.fullname" . }}-metrics-reader
{{- end -}}
{{- end }}

{{/* Cluster-scoped names of a namespaced install carry its namespace for the same reason. */}}
{{- define "dolphin.clusterObjectName" -}}
{{- if include "dolphin.namespaced" . -}}
{{ include "dolphin.operatorName" . }}-{{ .Release.Namespace }}
{{- else -}}
{{ include "dolphin.operatorName" . }}
{{- end -}}
{{- end }}

{{/* A namespaced install's webhooks see objects of its namespace only. */}}
{{- define "dolphin.webhookNamespaceSelector" -}}
{{- if include "dolphin.namespaced" . -}}
namespaceSelector:
  matchLabels:
    kubernetes.io/metadata.name: {{ .Release.Namespace }}
{{- end -}}
{{- end }}

{{/* With cert-manager, its CA injector writes the webhook CA (the operator does otherwise). */}}
{{- define "dolphin.webhookAnnotations" -}}
{{- if eq .Values.webhook.certificates "CertManager" -}}
cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/{{ include "dolphin.webhookSecretName" . }}
{{- end -}}
{{- end }}

{{- define "dolphin.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/* How Prometheus scrapes the secure endpoint: with the token of the chart's scraper
ServiceAccount (bound to the metrics reader role), trusting the operator's self-signed
certificate. */}}
{{- define "dolphin.scrapeAuth" -}}
# The metrics carry the cluster's own namespace and instance labels: kept, not renamed to
# exported_namespace (the alerts and the dashboard select on them).
honorLabels: true
{{ if .Values.metrics.secure -}}
scheme: https
authorization:
  type: Bearer
  credentials:
    name: {{ include "dolphin.fullname" . }}-metrics-scraper
    key: token
tlsConfig:
  insecureSkipVerify: true
{{- else -}}
scheme: http
{{- end -}}
{{- end }}
