{{/* Labels of one component (a service, or the gateway). */}}
{{- define "gpubill.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/part-of: gpubill
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end }}

{{- define "gpubill.selector" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end }}

{{/* The Secret holding DATABASE_URL. */}}
{{- define "gpubill.databaseSecret" -}}
{{- if .Values.postgres.existingSecret -}}
{{ .Values.postgres.existingSecret }}
{{- else if .Values.postgres.cluster.enabled -}}
{{ printf "%s-app" .Values.postgres.cluster.name }}
{{- else -}}
{{ fail "postgres.existingSecret is required when postgres.cluster.enabled is false" }}
{{- end -}}
{{- end }}
