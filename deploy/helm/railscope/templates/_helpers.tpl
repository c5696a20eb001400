{{/* The chart name, or nameOverride. */}}
{{- define "railscope.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The full resource name: <release>-railscope, or fullnameOverride. */}}
{{- define "railscope.fullname" -}}
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

{{- define "railscope.selectorLabels" -}}
app.kubernetes.io/name: {{ include "railscope.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end -}}

{{- define "railscope.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "railscope.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "railscope.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "railscope.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
A value as the agent's flag parser reads it. Helm holds every YAML number as a float64 and prints
1000000 as 1e+06, which the agent's integer flags refuse: whole numbers are printed as integers.
*/}}
{{- define "railscope.flagValue" -}}
{{- if and (kindIs "float64" .) (eq . (float64 (int64 .))) -}}
{{- int64 . -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/*
Whether an optional prometheus-operator object is rendered: list (enabled, "group/version/Kind", $).
enabled is true, false or "auto" (only when the cluster serves that API). Prints "true" or nothing.
*/}}
{{- define "railscope.wanted" -}}
{{- $enabled := toString (index . 0) -}}
{{- $api := index . 1 -}}
{{- $root := index . 2 -}}
{{- if or (eq $enabled "true") (and (eq $enabled "auto") ($root.Capabilities.APIVersions.Has $api)) -}}
true
{{- end -}}
{{- end -}}

{{/* The path of the extra kernel table inside the container (--kernel-table). */}}
{{- define "railscope.kernelTablePath" -}}
/etc/railscope/kernel-table.json
{{- end -}}

{{/* The directory of the cabling map inside the agent's container (--cabling <dir>/cabling.csv). */}}
{{- define "railscope.cablingDir" -}}
/etc/railscope-cabling
{{- end -}}

{{/* Where the image's lldpcli connects to lldpd: liblldpctl's compiled-in control socket (Debian). */}}
{{- define "railscope.lldpctlSocket" -}}
/run/lldpd.socket
{{- end -}}

{{/* "true" when the agent reads the node's lldpd (agent.lldp: lldpd): its socket is mounted. */}}
{{- define "railscope.lldpdMode" -}}
{{- if eq (toString .Values.agent.lldp) "lldpd" -}}
true
{{- end -}}
{{- end -}}

{{/* The collector's resource name: <fullname>-collector. */}}
{{- define "railscope.collectorName" -}}
{{- printf "%s-collector" (include "railscope.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "railscope.collectorSelectorLabels" -}}
app.kubernetes.io/name: {{ include "railscope.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: collector
{{- end -}}

{{- define "railscope.collectorLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "railscope.collectorSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Non-empty when the agent talks to a collector: it then gets a projected, audience-bound token. */}}
{{- define "railscope.collectorToken" -}}
{{- if or .Values.agent.collector .Values.collector.enabled -}}true{{- end -}}
{{- end -}}

{{/*
The collector's in-cluster URL, given to the agents when the chart runs the collector and
agent.collector does not name another: its Service, by name, in the release's namespace.
*/}}
{{- define "railscope.collectorURL" -}}
{{- $scheme := ternary "https" "http" (and .Values.collector.tls (not (empty .Values.collector.tls.secret))) -}}
{{- printf "%s://%s.%s.svc:%d" $scheme (include "railscope.collectorName" .) .Release.Namespace (int .Values.collector.flags.port) -}}
{{- end -}}

{{/* The agent's ServiceAccount as TokenReview names it: system:serviceaccount:<namespace>:<name>. */}}
{{- define "railscope.agentUser" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "railscope.serviceAccountName" .) -}}
{{- end -}}

{{/*
The agent values the collector judges bundles with, so that its pages agree with the agents' alerts
(the expectations of `railscope doctor`, read from RAILSCOPE_<FLAG>).
*/}}
{{- define "railscope.expectationKeys" -}}
losslessPrio expectEswitchMode expectEswMultiport expectRdmaNetns rails eventWindow berWarning berCritical berWindow expectMtu expectDriver expectRdma railMap
{{- end -}}
