{{/*
name is the chart's name ("metalheal"), as in the app.kubernetes.io/name label.
*/}}
{{- define "metalheal.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
fullname prefixes every object's name, as config/default's namePrefix does: the release name when it
contains the chart's name (`helm install metalheal` gives metalheal-manager, config/default's names),
else "<release>-metalheal". Cluster-scoped objects carry it too, so two releases do not collide.
*/}}
{{- define "metalheal.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 39 | trimSuffix "-" }}
{{- else }}
{{- $name := include "metalheal.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 39 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 39 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
labels go on every templated object: config/default's (app.kubernetes.io/part-of) and commonLabels.
*/}}
{{- define "metalheal.labels" -}}
app.kubernetes.io/part-of: {{ include "metalheal.name" . }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
selectorLabels pick the manager's pods.
*/}}
{{- define "metalheal.selectorLabels" -}}
app.kubernetes.io/name: {{ include "metalheal.name" . }}
app.kubernetes.io/component: manager
{{- end }}

{{/*
managerLabels go on the manager's Deployment, Service and PodDisruptionBudget.
*/}}
{{- define "metalheal.managerLabels" -}}
{{ include "metalheal.selectorLabels" . }}
{{ include "metalheal.labels" . }}
{{- end }}

{{- define "metalheal.serviceAccountName" -}}
{{ include "metalheal.fullname" . }}-manager
{{- end }}

{{/*
serviceAccountSubject is the manager's service account as a binding's subject.
*/}}
{{- define "metalheal.serviceAccountSubject" -}}
- kind: ServiceAccount
  name: {{ include "metalheal.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
{{- end }}

{{/*
clusterNamespaces are the namespaces whose Clusters' kubeconfig Secrets the manager reads
(--cluster-namespaces), as a JSON list: clusterAPI.clusterNamespaces with clusterAPI.enabled, else none.
*/}}
{{- define "metalheal.clusterNamespaces" -}}
{{- if .Values.clusterAPI.enabled }}
{{- if not .Values.clusterAPI.clusterNamespaces }}
{{- fail "clusterAPI.enabled needs clusterAPI.clusterNamespaces: the namespaces where your Clusters live" }}
{{- end }}
{{- .Values.clusterAPI.clusterNamespaces | uniq | toJson }}
{{- else }}
{{- list | toJson }}
{{- end }}
{{- end }}

{{/*
remediationNamespaces are the namespaces besides the release's whose requests the remediator acts on
(--remediation-namespaces), as a JSON list: remediationNamespaces, then the clusterNamespaces not in it.
*/}}
{{- define "metalheal.remediationNamespaces" -}}
{{- $clusters := include "metalheal.clusterNamespaces" . | fromJsonArray }}
{{- concat (default list .Values.remediationNamespaces) $clusters | uniq | toJson }}
{{- end }}
