{{/* Object names: the release name, plus the chart name unless the release name has it. */}}
{{- define "phalanx.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "phalanx.fullname" -}}
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

{{- define "phalanx.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "phalanx.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "phalanx.selectorLabels" -}}
app.kubernetes.io/name: {{ include "phalanx.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "phalanx.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "phalanx.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "phalanx.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* kube-scheduler's image: scheduler-plugins' build when its Coscheduling QueueSort orders the queue. */}}
{{- define "phalanx.kubeSchedulerImage" -}}
{{- $ks := .Values.kubeScheduler }}
{{- $image := ternary $ks.coschedulingImage $ks.image (eq $ks.queueSort "Coscheduling") }}
{{- printf "%s:%s" $image.repository $image.tag }}
{{- end }}

{{/*
Timeouts that must nest, checked before anything renders (DESIGN §2, §6): a /bind held at
the barrier must be answered before kube-scheduler's httpTimeout abandons it, and a
reservation must outlive the barrier that waits on it (Phalanx refuses to start otherwise).
*/}}
{{- define "phalanx.validate" -}}
{{- $barrier := float64 .Values.phalanx.barrierTimeoutSeconds }}
{{- $http := float64 .Values.kubeScheduler.extender.httpTimeoutSeconds }}
{{- $ttl := float64 .Values.phalanx.reservationTtlSeconds }}
{{- if ge $barrier $http }}
{{- fail (printf "phalanx.barrierTimeoutSeconds (%v) must be below kubeScheduler.extender.httpTimeoutSeconds (%v): kube-scheduler would abandon a /bind that Phalanx still holds at the gang barrier. Lower the barrier or raise the httpTimeout." .Values.phalanx.barrierTimeoutSeconds .Values.kubeScheduler.extender.httpTimeoutSeconds) }}
{{- end }}
{{- if ge $barrier $ttl }}
{{- fail (printf "phalanx.barrierTimeoutSeconds (%v) must be below phalanx.reservationTtlSeconds (%v): a reservation must outlive the bind barrier that waits on it." .Values.phalanx.barrierTimeoutSeconds .Values.phalanx.reservationTtlSeconds) }}
{{- end }}
{{- end }}
