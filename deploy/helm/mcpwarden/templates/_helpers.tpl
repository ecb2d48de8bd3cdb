{{/* The name of the chart's objects: RELEASE-mcpwarden, or the release alone when it says mcpwarden already. */}}
{{- define "mcpwarden.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 55 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 55 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "mcpwarden.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "mcpwarden.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "mcpwarden.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The NATS URL both components use: nats.url, or every pod of the chart's NATS cluster. */}}
{{- define "mcpwarden.natsURL" -}}
{{- if .Values.nats.cluster.enabled -}}
{{- if .Values.nats.url -}}
{{- fail "nats.url and nats.cluster.enabled both given: the chart's NATS cluster sets the URL; drop one" -}}
{{- end -}}
{{- $name := printf "%s-nats" (include "mcpwarden.fullname" .) -}}
{{- $urls := list -}}
{{- range $i := until 3 -}}
{{- $urls = append $urls (printf "tls://%s-%d.%s.%s.svc:4222" $name $i $name $.Release.Namespace) -}}
{{- end -}}
{{- join "," $urls -}}
{{- else -}}
{{- $u := required "nats.url is required: the NATS JetStream the daemons publish to and the collectors read (e.g. tls://nats.mcpwarden:4222), or set nats.cluster.enabled" .Values.nats.url -}}
{{- if contains "@" $u -}}
{{- fail "nats.url must not carry credentials (every user of the node can read a command line): give them in daemon.credentialsSecret and collector.secret" -}}
{{- end -}}
{{- $u -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the NATS CA (ca.pem), or nothing. */}}
{{- define "mcpwarden.natsCASecret" -}}
{{- if .Values.nats.tlsCASecret -}}
{{- .Values.nats.tlsCASecret -}}
{{- else if .Values.nats.cluster.enabled -}}
{{- .Values.nats.cluster.tlsSecret -}}
{{- end -}}
{{- end -}}

{{/* A host directory shared with the node's launchers: absolute, no "..", not "/". */}}
{{- define "mcpwarden.hostDir" -}}
{{- $p := .path -}}
{{- if or (not (hasPrefix "/" $p)) (contains ".." $p) (eq $p "/") -}}
{{- fail (printf "%s is %q: want an absolute directory other than / (without ..)" .name $p) -}}
{{- end -}}
{{- trimSuffix "/" $p -}}
{{- end -}}
