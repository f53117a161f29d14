{{/*
Labels of every object: the ones the kustomize manifests carry (app.kubernetes.io/name, part-of) plus
Helm's own. Selectors and pod template labels use only app.kubernetes.io/name (as the manifests do).
*/}}
{{- define "gang-extender.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/part-of: gang-extender
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The extender's identity, as the admission policy matches it. */}}
{{- define "gang-extender.user" -}}
system:serviceaccount:{{ .Release.Namespace }}:gang-extender
{{- end -}}

{{/* The extender elects a leader: several replicas, or asked to. */}}
{{- define "gang-extender.electing" -}}
{{- if or (gt (int .Values.replicas) 1) .Values.leaderElection.extender -}}true{{- end -}}
{{- end -}}

{{/* The URL scheme kube-scheduler dials the extender with. */}}
{{- define "gang-extender.scheme" -}}
{{- if .Values.tls.enabled -}}https{{- else -}}http{{- end -}}
{{- end -}}

{{/* Where the TLS Secret is mounted in both containers. */}}
{{- define "gang-extender.tlsDir" -}}/etc/gang-extender/tls{{- end -}}

{{/* An exec probe of the extender on 127.0.0.1 (an httpGet probe would dial the pod IP). */}}
{{- define "gang-extender.probe" -}}
{{- $url := printf "%s://127.0.0.1:%d%s" (include "gang-extender.scheme" .root) (int .root.Values.extender.port) .path -}}
{{- if .root.Values.tls.enabled -}}
{{- $dir := printf "%s/" (include "gang-extender.tlsDir" .root) -}}
[python, -c, {{ printf "import ssl, urllib.request as u; d = '%s'; c = ssl.create_default_context(cafile=d + 'ca.crt'); c.load_cert_chain(d + 'client.crt', d + 'client.key'); u.urlopen('%s', timeout=3, context=c)" $dir $url | quote }}]
{{- else -}}
[python, -c, {{ printf "import urllib.request as u; u.urlopen('%s', timeout=3)" $url | quote }}]
{{- end -}}
{{- end -}}

{{/* The KubeSchedulerConfiguration (config.yaml of the ConfigMap). */}}
{{- define "gang-extender.schedulerConfig" -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  resourceLock: leases
  resourceName: {{ .Values.schedulerName | quote }}
  resourceNamespace: {{ .Release.Namespace }}
podInitialBackoffSeconds: {{ int .Values.scheduler.podInitialBackoffSeconds }}
podMaxBackoffSeconds: {{ int .Values.scheduler.podMaxBackoffSeconds }}
profiles:
- schedulerName: {{ .Values.schedulerName | quote }}
extenders:
- urlPrefix: {{ printf "%s://127.0.0.1:%d" (include "gang-extender.scheme" .) (int .Values.extender.port) | quote }}
  filterVerb: filter
  {{- if eq .Values.gang.bindMode "barrier" }}
  bindVerb: bind
  {{- end }}
  preemptVerb: preempt
  nodeCacheCapable: true
  httpTimeout: {{ printf "%ds" (int .Values.scheduler.extenderHTTPTimeoutSeconds) }}
  ignorable: false
  {{- if .Values.tls.enabled }}
  {{- $dir := include "gang-extender.tlsDir" . }}
  enableHTTPS: true
  tlsConfig:
    caFile: {{ $dir }}/ca.crt
    certFile: {{ $dir }}/client.crt
    keyFile: {{ $dir }}/client.key
  {{- end }}
{{- end -}}

{{/* The extender's flags, in the order the kustomize overlays produce them. */}}
{{- define "gang-extender.args" -}}
- --host=127.0.0.1
- --port={{ int .Values.extender.port }}
- --gang-timeout-seconds={{ .Values.gang.timeoutSeconds }}
- --scheduler-http-timeout-seconds={{ int .Values.scheduler.extenderHTTPTimeoutSeconds }}
- --threads={{ int .Values.extender.threads }}
- --log-level={{ .Values.extender.logLevel }}
{{- if .Values.metrics.enabled }}
- --metrics-address={{ .Values.metrics.address }}:{{ int .Values.metrics.port }}
{{- end }}
{{- if include "gang-extender.electing" . }}
- --leader-election=on
- --lease-namespace={{ .Release.Namespace }}
- --lease-name={{ .Values.leaderElection.extenderLeaseName }}
{{- else }}
- --release-journal=/tmp/releases.jsonl
{{- end }}
{{- if .Values.tls.enabled }}
{{- $dir := include "gang-extender.tlsDir" . }}
- --tls-cert-file={{ $dir }}/tls.crt
- --tls-key-file={{ $dir }}/tls.key
{{- if .Values.tls.requireClientCertificate }}
- --tls-client-ca-file={{ $dir }}/ca.crt
{{- end }}
{{- end }}
{{- include "gang-extender.flag" (list "gang-backoff-seconds" .Values.gang.backoffSeconds) }}
{{- include "gang-extender.flag" (list "max-wait-seconds" .Values.gang.maxWaitSeconds) }}
{{- include "gang-extender.flag" (list "preemption" .Values.gang.preemption) }}
{{- include "gang-extender.flag" (list "max-evictions-per-minute" .Values.gang.maxEvictionsPerMinute) }}
{{- include "gang-extender.flag" (list "quorum-wait-seconds" .Values.gang.quorumWaitSeconds) }}
{{- if ne .Values.gang.bindMode "barrier" }}
- --bind-mode={{ .Values.gang.bindMode }}
{{- end }}
{{- if not (has .Values.schedulerName (list "default-scheduler" "gang-scheduler")) }}
- --scheduler-names={{ .Values.schedulerName }}
{{- end }}
{{- range .Values.extender.extraArgs }}
- {{ . }}
{{- end }}
{{- end -}}


{{/*
One optional flag: (list NAME VALUE) renders "- --NAME=VALUE" unless VALUE is null. A YAML 1.1
on/off read as a boolean is written back as on/off.
*/}}
{{- define "gang-extender.flag" -}}
{{- $value := index . 1 -}}
{{- if kindIs "bool" $value -}}{{- $value = ternary "on" "off" $value -}}{{- end -}}
{{- /* a whole number as digits: YAML numbers reach templates as floats, which print 1e+06 */ -}}
{{- if and (kindIs "float64" $value) (eq (float64 (int64 $value)) $value) -}}{{- $value = int64 $value -}}{{- end -}}
{{- if not (kindIs "invalid" $value) }}
- --{{ index . 0 }}={{ $value }}
{{- end -}}
{{- end -}}

{{/* The scheduler configuration ConfigMap's name: gang-scheduler-config-<10 hex of its content's sha256>. */}}
{{- define "gang-extender.configMapName" -}}
gang-scheduler-config-{{ include "gang-extender.schedulerConfig" . | sha256sum | trunc 10 }}
{{- end -}}

{{/* Both containers: non-root, read-only root file system, no privilege escalation, no capabilities. */}}
{{- define "gang-extender.containerSecurityContext" -}}
runAsNonRoot: true
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop: [ALL]
{{- end -}}
