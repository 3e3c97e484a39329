{{- define "cluster.name" -}}
{{- .Values.name | default .Release.Name -}}
{{- end }}

{{/* An object name from a server name: lower case, '_', '.' and '$' as '-'. */}}
{{- define "cluster.objectName" -}}
{{- printf "%s-%s" (index . 0) (index . 1 | lower | replace "_" "-" | replace "." "-" | replace "$" "-") | trunc 253 -}}
{{- end }}

{{- define "cluster.labels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: dolphin
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "cluster.annotations" -}}
{{- if .Values.keep }}
annotations:
  helm.sh/resource-policy: keep
{{- end }}
{{- end }}
