{{/* The chart's name. */}}
{{- define "corvo.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's object name; pods are <fullname>-<ordinal>. */}}
{{- define "corvo.fullname" -}}
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

{{/* The headless service that gives every pod a stable DNS name. */}}
{{- define "corvo.headless" -}}
{{- printf "%s-headless" (include "corvo.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "corvo.selectorLabels" -}}
app.kubernetes.io/name: {{ include "corvo.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "corvo.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "corvo.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Pods: 1 for a single node, .Values.replicas for a cluster. */}}
{{- define "corvo.replicas" -}}
{{- if .Values.cluster.enabled -}}
{{- if lt (int .Values.replicas) 3 -}}
{{- fail (printf "cluster.enabled needs replicas >= 3 (got %v): a Raft cluster of 2 survives no failure; use a single node instead" .Values.replicas) -}}
{{- end -}}
{{- int .Values.replicas -}}
{{- else -}}
1
{{- end -}}
{{- end -}}

{{/* Seconds SIGTERM may take: the drain, the leadership hand-off (5 s), a margin. */}}
{{- define "corvo.gracePeriod" -}}
{{- add (int .Values.server.shutdownTimeoutSeconds) 5 (int .Values.server.shutdownMarginSeconds) -}}
{{- end -}}

{{/* The `corvo server` arguments. */}}
{{- define "corvo.args" -}}
- server
- --data-dir=/data
- --bind=:{{ .Values.server.httpPort }}
- --log-level={{ .Values.server.logLevel }}
- --shutdown-timeout={{ .Values.server.shutdownTimeoutSeconds }}s
- --retention={{ .Values.server.retention }}
- --auth={{ include "corvo.authMode" . }}
{{- if .Values.shards }}
- --shards={{ .Values.shards }}
{{- end }}
{{- if .Values.server.maxPayload }}
- --max-payload={{ .Values.server.maxPayload }}
{{- end }}
{{- if .Values.server.cacheMB }}
- --cache-mb={{ .Values.server.cacheMB }}
{{- end }}
{{- if .Values.server.minFreeDisk }}
- --min-free-disk={{ .Values.server.minFreeDisk }}
{{- end }}
{{- if .Values.cluster.enabled }}
- --raft-bind=:{{ .Values.server.raftPort }}
- --discover=dns
- --discover-service={{ include "corvo.headless" . }}.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}
- --replicas={{ .Values.cluster.shardReplicas }}
{{- end }}
{{- if .Values.tls.secretName }}
- --tls-cert=/etc/corvo/tls/tls.crt
- --tls-key=/etc/corvo/tls/tls.key
{{- end }}
{{- if include "corvo.peerTLS" . }}
- --peer-tls-ca=/etc/corvo/peer-tls/ca.crt
- --peer-tls-cert=/etc/corvo/peer-tls/tls.crt
- --peer-tls-key=/etc/corvo/peer-tls/tls.key
{{- end }}
{{- range .Values.server.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/* The Secret holding the cluster secret (key "cluster-secret"). */}}
{{- define "corvo.clusterSecretName" -}}
{{- if .Values.cluster.existingSecret -}}
{{- .Values.cluster.existingSecret -}}
{{- else -}}
{{- printf "%s-cluster" (include "corvo.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}


{{/* auth.mode, checked: auto, on or off. */}}
{{- define "corvo.authMode" -}}
{{- if not (has .Values.auth.mode (list "auto" "on" "off")) -}}
{{- fail (printf "auth.mode must be auto, on or off, not %q" .Values.auth.mode) -}}
{{- end -}}
{{- .Values.auth.mode -}}
{{- end -}}

{{/* The Secret holding the admin API key (key "admin-key"). */}}
{{- define "corvo.adminKeySecretName" -}}
{{- if .Values.auth.existingSecret -}}
{{- .Values.auth.existingSecret -}}
{{- else -}}
{{- printf "%s-admin-key" (include "corvo.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* "true" when nodes use mutual TLS (cluster mode with a peer Secret). */}}
{{- define "corvo.peerTLS" -}}
{{- if and .Values.cluster.enabled .Values.tls.peerSecretName -}}true{{- end -}}
{{- end -}}

{{/* "true" when the API is served over TLS. */}}
{{- define "corvo.tls" -}}
{{- if or .Values.tls.secretName (include "corvo.peerTLS" .) -}}true{{- end -}}
{{- end -}}
