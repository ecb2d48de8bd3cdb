{{/* The collector's pod: the Deployment's, and the migration Job's with --migrate-only. */}}
{{- define "mcpwarden.collectorPod" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
{{- $secret := required "collector.secret is required: a Secret with the keys nats-password and clickhouse-dsn" $v.collector.secret -}}
automountServiceAccountToken: false
enableServiceLinks: false
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  seccompProfile:
    type: RuntimeDefault
{{- with $v.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.collector.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.collector.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if .migrate }}
restartPolicy: OnFailure
{{- else }}
# A stop lets the insert under way finish (up to 10 s).
terminationGracePeriodSeconds: 30
{{- end }}
containers:
  - name: {{ if .migrate }}migrate{{ else }}collector{{ end }}
    image: {{ include "mcpwarden.image" $root }}
    imagePullPolicy: {{ $v.image.pullPolicy }}
    args:
      - collect
      {{- if .migrate }}
      - --migrate-only
      {{- else }}
      - --nats={{ include "mcpwarden.natsURL" $root }}
      - --nats-user={{ $v.collector.natsUser }}
      - --nats-password-file=/etc/mcpwarden/nats/password
      {{- if include "mcpwarden.natsCASecret" $root }}
      - --nats-tls-ca=/etc/mcpwarden/tls/ca.pem
      {{- end }}
      - --stream-replicas={{ $v.collector.streamReplicas }}
      {{- if $v.collector.metrics.enabled }}
      - --metrics-listen=$(POD_IP):{{ $v.collector.metrics.port }}
      {{- end }}
      {{- end }}
    env:
      # The DSN holds a password: from the Secret into the variable every
      # command reads it from, never onto the command line.
      - name: MCPWARDEN_CLICKHOUSE_DSN
        valueFrom:
          secretKeyRef:
            name: {{ $secret }}
            key: clickhouse-dsn
      # No configuration file: the settings are the flags and the DSN.
      - name: HOME
        value: /home/nonroot
      {{- if not .migrate }}
      - name: POD_IP
        valueFrom:
          fieldRef:
            fieldPath: status.podIP
      {{- end }}
    {{- if and (not .migrate) $v.collector.metrics.enabled }}
    ports:
      - name: metrics
        containerPort: {{ $v.collector.metrics.port }}
        protocol: TCP
    {{- end }}
    securityContext:
      privileged: false
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities:
        drop: [ALL]
    resources:
      {{- toYaml $v.collector.resources | nindent 6 }}
    {{- if not .migrate }}
    volumeMounts:
      - {name: nats-password, mountPath: /etc/mcpwarden/nats, readOnly: true}
      {{- if include "mcpwarden.natsCASecret" $root }}
      - {name: nats-tls, mountPath: /etc/mcpwarden/tls, readOnly: true}
      {{- end }}
    {{- end }}
{{- if not .migrate }}
volumes:
  - name: nats-password
    secret:
      secretName: {{ $secret }}
      items: [{key: nats-password, path: password}]
      defaultMode: 0400
  {{- if include "mcpwarden.natsCASecret" $root }}
  - name: nats-tls
    secret:
      secretName: {{ include "mcpwarden.natsCASecret" $root }}
      items: [{key: ca.pem, path: ca.pem}]
  {{- end }}
{{- end }}
{{- end -}}
