{{/* The release's name for chart-wide objects (the operator, the database): "agentfn" unless renamed. */}}
{{- define "agentfn.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "agentfn.labels" -}}
app.kubernetes.io/name: agentfn
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Labels that select this release's pods of one component: (dict "root" $ "component" "operator"). */}}
{{- define "agentfn.selectorLabels" -}}
app.kubernetes.io/name: agentfn
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The functions, in a fixed order. `public`: routed through the gateway; `db`: owns a schema. */}}
{{- define "agentfn.functions" -}}
memory: {public: true, db: true}
page: {public: false, db: true}
model: {public: true, db: true, exchanges: true}
platform_status: {public: false, db: false, tool: true, exchanges: true}
list_models: {public: false, db: false, tool: true, exchanges: true}
radar_latest: {public: false, db: false, tool: true, exchanges: true}
run_code: {public: false, db: true, tool: true}
{{- end -}}

{{/* A function's Knative Service name (= its pods' serving.knative.dev/service label): (dict "root" $ "fn" "run_code"). */}}
{{- define "agentfn.service" -}}
{{- printf "%s%s" .root.Values.functionPrefix (.fn | replace "_" "-") -}}
{{- end -}}

{{/* A function's in-cluster base URL. */}}
{{- define "agentfn.url" -}}
{{- printf "http://%s.%s.svc.cluster.local" (include "agentfn.service" .) .root.Release.Namespace -}}
{{- end -}}

{{/* An image reference: (dict "root" $ "name" "memory"), by digest when images.digests has the part's. */}}
{{- define "agentfn.image" -}}
{{- $images := .root.Values.images -}}
{{- $override := get $images.overrides .name -}}
{{- $digest := get (default dict $images.digests) .name -}}
{{- if $override -}}
{{- $override -}}
{{- else -}}
{{- printf "%s/%s:%s" $images.registry (.name | replace "_" "-") (default .root.Chart.AppVersion $images.tag) -}}
{{- end -}}
{{- if $digest -}}
{{- printf "@%s" $digest -}}
{{- end -}}
{{- end -}}

{{/* The Postgres Cluster's name (cnpg mode). */}}
{{- define "agentfn.postgres" -}}
{{- printf "%spostgres" .Values.functionPrefix -}}
{{- end -}}

{{/* A part's Postgres role, as the dev stack names it: agentfn_memory. */}}
{{- define "agentfn.dbRole" -}}
{{- printf "agentfn_%s" . -}}
{{- end -}}

{{/* NetworkPolicy peers for a "where" value ({cidrs, namespaces}). */}}
{{- define "agentfn.peers" -}}
{{- range .cidrs }}
- ipBlock:
    cidr: {{ . }}
{{- end }}
{{- range .namespaces }}
- namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: {{ . }}
{{- end }}
{{- end -}}

{{/* NetworkPolicy TCP ports from a list of numbers. */}}
{{- define "agentfn.ports" -}}
{{- range . }}
- protocol: TCP
  port: {{ . }}
{{- end }}
{{- end -}}

{{/* The container securityContext every agentfn container has. */}}
{{- define "agentfn.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
capabilities:
  drop: [ALL]
{{- end -}}
