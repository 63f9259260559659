{{/*
Names. With the release named custom-metrics-server (the documented install), the full name is
custom-metrics-server and the objects carry manifests/base's names.
*/}}
{{- define "cms.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "cms.fullname" -}}
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

{{- define "cms.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels every object carries; `component` is server or node-agent. */}}
{{- define "cms.labels" -}}
helm.sh/chart: {{ include "cms.chart" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: {{ include "cms.name" . }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The server: selector labels, and every label of its objects. */}}
{{- define "cms.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cms.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "cms.serverLabels" -}}
{{ include "cms.selectorLabels" . }}
{{ include "cms.labels" . }}
app.kubernetes.io/component: server
{{- end }}

{{/* The node agent: a name label of its own, so the server's selector never matches it. */}}
{{- define "cms.nodeAgent.fullname" -}}
{{- printf "%s-node-agent" (include "cms.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "cms.nodeAgent.selectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-node-agent" (include "cms.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "cms.nodeAgent.labels" -}}
{{ include "cms.nodeAgent.selectorLabels" . }}
{{ include "cms.labels" . }}
app.kubernetes.io/component: node-agent
{{- end }}

{{- define "cms.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "cms.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "cms.leaseName" -}}
{{- default (include "cms.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}

{{/* image: repository[:tag][@digest]; the tag defaults to the chart's appVersion. */}}
{{- define "cms.imageRef" -}}
{{- $image := index . 0 }}
{{- $appVersion := index . 1 }}
{{- if $image.digest }}
{{- printf "%s@%s" $image.repository $image.digest }}
{{- else }}
{{- printf "%s:%s" $image.repository (default $appVersion $image.tag) }}
{{- end }}
{{- end }}

{{- define "cms.image" -}}
{{- include "cms.imageRef" (list .Values.image .Chart.AppVersion) }}
{{- end }}

{{- define "cms.nodeAgent.image" -}}
{{- $agent := .Values.nodeAgent.image }}
{{- if $agent.repository }}
{{- include "cms.imageRef" (list (dict "repository" $agent.repository "tag" (default .Values.image.tag $agent.tag) "digest" $agent.digest) .Chart.AppVersion) }}
{{- else }}
{{- include "cms.imageRef" (list (dict "repository" .Values.image.repository "tag" (default .Values.image.tag $agent.tag) "digest" (default .Values.image.digest $agent.digest)) .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* TLS: the serving Secret, the DNS names kube-aggregator dials, cert-manager's Certificate. */}}
{{- define "cms.tlsSecretName" -}}
{{- if eq .Values.tls.mode "existingSecret" }}
{{- required "tls.secretName is required with tls.mode existingSecret: the name of your Secret holding tls.crt and tls.key" .Values.tls.secretName }}
{{- else }}
{{- default (printf "%s-tls" (include "cms.fullname" .)) .Values.tls.secretName }}
{{- end }}
{{- end }}

{{- define "cms.dnsNames" -}}
{{- $svc := include "cms.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- toJson (list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.tls.clusterDomain)) }}
{{- end }}

{{- define "cms.certManager.servingName" -}}
{{- printf "%s-serving" (include "cms.fullname" .) }}
{{- end }}

{{/* The arguments of `custom-metrics-server serve`, one flag per item. */}}
{{- define "cms.args" -}}
{{- $v := .Values -}}
- serve
- --secure-port={{ $v.securePort }}
- --tls-cert-file=/var/run/serving-cert/tls.crt
- --tls-private-key-file=/var/run/serving-cert/tls.key
- --backend-timeout={{ $v.backendTimeout }}
- --metric-resolution={{ $v.metricResolution }}
- --kubelet-source={{ $v.kubelet.source }}
{{- if not (kindIs "invalid" $v.kubelet.port) }}
- --kubelet-port={{ $v.kubelet.port }}
{{- end }}
{{- with $v.kubelet.certificateAuthority }}
- --kubelet-certificate-authority={{ . }}
{{- end }}
{{- if $v.kubelet.insecureTLS }}
- --kubelet-insecure-tls
{{- end }}
{{- with $v.kubelet.requestTimeout }}
- --kubelet-request-timeout={{ . }}
{{- end }}
{{- if $v.leaderElection.enabled }}
- --leader-elect
- --leader-elect-resource-name={{ include "cms.leaseName" . }}
{{- end }}
- --v={{ $v.logLevel }}
{{- if $v.prometheus.enabled }}
- --prometheus-url={{ $v.prometheus.url }}
- --config=/etc/custom-metrics-server/prometheus/{{ include "cms.prometheus.configKey" . }}
- --metrics-relist-interval={{ $v.prometheus.relistInterval }}
{{- with $v.prometheus.maxAge }}
- --metrics-max-age={{ . }}
{{- end }}
{{- with $v.prometheus.queryTimeout }}
- --prometheus-query-timeout={{ . }}
{{- end }}
{{- with $v.prometheus.verb }}
- --prometheus-verb={{ . }}
{{- end }}
{{- with $v.prometheus.caFile }}
- --prometheus-ca-file={{ . }}
{{- end }}
{{- with $v.prometheus.tokenFile }}
- --prometheus-token-file={{ . }}
{{- end }}
{{- if $v.prometheus.authInCluster }}
- --prometheus-auth-incluster
{{- end }}
{{- range $name, $value := $v.prometheus.headers }}
- --prometheus-header={{ $name }}={{ $value }}
{{- end }}
{{- end }}
{{- if $v.metricsApi.enabled }}
- --enable-metrics-api
{{- if ne $v.metricsApi.source "kubelet" }}
- --resource-metrics-source={{ $v.metricsApi.source }}
{{- end }}
{{- end }}
{{- if $v.nodeAgent.enabled }}
- --usage-source=node-agent
{{- if $v.nodeAgent.insecureTLS }}
- --node-agent-insecure-tls
{{- end }}
- --node-agent-selector={{ include "cms.nodeAgent.selectorLabels" . | fromYaml | include "cms.selectorString" }}
- --node-agent-port={{ $v.nodeAgent.securePort }}
{{- with $v.nodeAgent.certificateAuthority }}
- --node-agent-certificate-authority={{ . }}
{{- end }}
{{- end }}
{{- if not (kindIs "invalid" $v.backends.config) }}
- --backends-config=/etc/custom-metrics-server/backends/backends.yaml
{{- end }}
{{- range $v.extraArgs }}
- {{ . }}
{{- end }}
{{- end }}

{{/* {a: b, c: d} -> "a=b,c=d" (keys sorted) */}}
{{- define "cms.selectorString" -}}
{{- $pairs := list }}
{{- range $key, $value := . }}
{{- $pairs = append $pairs (printf "%s=%s" $key $value) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}

{{- define "cms.prometheus.configKey" -}}
{{- if .Values.prometheus.existingConfigMap }}
{{- .Values.prometheus.existingConfigMapKey }}
{{- else }}
{{- "config.yaml" }}
{{- end }}
{{- end }}

{{- define "cms.prometheus.configMapName" -}}
{{- default (printf "%s-prometheus-rules" (include "cms.fullname" .)) .Values.prometheus.existingConfigMap }}
{{- end }}

{{/* Checks of values that span several keys (the schema checks each key alone). */}}
{{- define "cms.validate" -}}
{{- $v := .Values }}
{{- if and $v.metricsApi.enabled (eq $v.metricsApi.source "prometheus") (not $v.prometheus.enabled) }}
{{- fail "metricsApi.source=prometheus reads the Prometheus rules file's resourceRules: set prometheus.enabled=true" }}
{{- end }}
{{- if and $v.nodeAgent.enabled (not $v.nodeAgent.insecureTLS) (not $v.nodeAgent.certificateAuthority) }}
{{- fail "nodeAgent.insecureTLS=false needs nodeAgent.certificateAuthority (the CA of the agents' certificates, mounted with extraVolumes/extraVolumeMounts)" }}
{{- end }}
{{- if and (eq $v.tls.mode "existingSecret") (not $v.tls.existingSecret.caBundle) }}
{{- fail "tls.mode=existingSecret needs tls.existingSecret.caBundle: the PEM of the CA that signed the Secret's tls.crt (every APIService verifies the server with it)" }}
{{- end }}
{{- $pdb := $v.podDisruptionBudget }}
{{- if and $pdb.enabled (kindIs "invalid" $pdb.maxUnavailable) (not (kindIs "string" $pdb.minAvailable)) }}
{{- if ge (int $pdb.minAvailable) (int $v.replicas) }}
{{- fail (printf "podDisruptionBudget.minAvailable=%d with replicas=%d would block every node drain: raise replicas, set podDisruptionBudget.maxUnavailable, or disable the budget" (int $pdb.minAvailable) (int $v.replicas)) }}
{{- end }}
{{- end }}
{{- end }}
