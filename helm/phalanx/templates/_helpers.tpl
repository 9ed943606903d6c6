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
{{- if eq $ks.queueSort "Coscheduling" }}
{{- printf "%s:%s" $ks.coschedulingImage.repository $ks.coschedulingImage.tag }}
{{- else }}
{{- printf "%s:%s" $ks.image.repository (include "phalanx.kubeSchedulerTag" .) }}
{{- end }}
{{- end }}

{{/*
The upstream kube-scheduler's tag: `kubeScheduler.image.tag`, or when empty the cluster's own
release, so that a plain install runs the kube-scheduler of the cluster it lands on. A
provider's suffix is dropped (`v1.37.2-eks-1a2b3c`, `v1.36.4+k3s1` and `v1.35.6-gke.1200` run
`v1.37.2`, `v1.36.4` and `v1.35.6`, the upstream images of those releases).
*/}}
{{- define "phalanx.kubeSchedulerTag" -}}
{{- default (regexReplaceAll "[-+].*$" .Capabilities.KubeVersion.Version "") .Values.kubeScheduler.image.tag }}
{{- end }}

{{/*
The Kubernetes minor (e.g. "35") of the kube-scheduler the chart runs, read from its image
tag: upstream's v1.<minor>.<patch>, or scheduler-plugins' v0.<minor>.<patch> (the minor it
embeds) when the Coscheduling queue sort runs that image. "" for a tag that is not a release
(a digest, "latest"), which nothing judges.
*/}}
{{- define "phalanx.kubeSchedulerMinor" -}}
{{- $ks := .Values.kubeScheduler }}
{{- $tag := include "phalanx.kubeSchedulerTag" . }}
{{- $pattern := "^v?1\\.([0-9]+)(\\..*)?$" }}
{{- if eq $ks.queueSort "Coscheduling" }}
{{- $tag = $ks.coschedulingImage.tag }}
{{- $pattern = "^v?0\\.([0-9]+)(\\..*)?$" }}
{{- end }}
{{- if regexMatch $pattern $tag }}
{{- regexReplaceAll $pattern $tag "${1}" }}
{{- end }}
{{- end }}

{{/*
DRAExtendedResource as `kubeScheduler.extraArgs` set it: "true", "false", or "" when they do
not (the last --feature-gates naming it wins, as kube-scheduler merges them).
*/}}
{{- define "phalanx.draExtendedResourceGate" -}}
{{- $gate := "" }}
{{- $previous := "" }}
{{- range .Values.kubeScheduler.extraArgs }}
{{- $arg := toString . }}
{{- $gates := "" }}
{{- if hasPrefix "--feature-gates=" $arg }}
{{- $gates = trimPrefix "--feature-gates=" $arg }}
{{- else if eq $previous "--feature-gates" }}
{{- $gates = $arg }}
{{- end }}
{{- range splitList "," $gates }}
{{- $pair := splitList "=" (trim .) }}
{{- if and (eq (len $pair) 2) (eq (first $pair) "DRAExtendedResource") }}
{{- $gate = lower (trim (last $pair)) }}
{{- end }}
{{- end }}
{{- $previous = $arg }}
{{- end }}
{{- if has $gate (list "true" "t" "1") }}true
{{- else if has $gate (list "false" "f" "0") }}false
{{- end }}
{{- end }}

{{/*
PHALANX_DRA_EXTENDED_RESOURCES: whether the chart's kube-scheduler serves extended resources
from DRA devices (its DRAExtendedResource gate). `phalanx.draExtendedResources` true or
false is taken as said; auto reads the gate from `kubeScheduler.extraArgs`, else from the
version: on by default from 1.36, off before. A tag that is not a release counts as 1.36 or
later.
*/}}
{{- define "phalanx.draExtendedResources" -}}
{{- $said := toString .Values.phalanx.draExtendedResources }}
{{- if ne $said "auto" }}
{{- $said }}
{{- else }}
{{- $gate := include "phalanx.draExtendedResourceGate" . }}
{{- $minor := include "phalanx.kubeSchedulerMinor" . }}
{{- if $gate }}{{ $gate }}
{{- else if and $minor (lt (int $minor) 36) }}false
{{- else }}true
{{- end }}
{{- end }}
{{- end }}

{{/*
A Go duration ("15s", "1m30s", "500ms") in seconds, as text for float64. Assumes the schema
checked the text (digits, optional fraction, unit; repeated).
*/}}
{{- define "phalanx.durationSeconds" -}}
{{- $units := dict "ns" 0.000000001 "us" 0.000001 "µs" 0.000001 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 }}
{{- $total := 0.0 }}
{{- range regexFindAll "[0-9.]+(ns|us|µs|ms|s|m|h)" . -1 }}
{{- $number := regexFind "^[0-9.]+" . }}
{{- $total = addf $total (mulf (float64 $number) (get $units (trimPrefix $number .))) }}
{{- end }}
{{- $total }}
{{- end }}

{{/*
What must hold across values, checked before anything renders (DESIGN §2, §6): timeouts
that must nest (Phalanx refuses to start otherwise, or kube-scheduler abandons a held
/bind), and kube-scheduler's own cross-field rules, which it checks only at start (a
configuration breaking one crash-loops the pod).
*/}}
{{- define "phalanx.validate" -}}
{{- $ks := .Values.kubeScheduler }}
{{- $px := .Values.phalanx }}
{{- $barrier := float64 $px.barrierTimeoutSeconds }}
{{- $http := float64 $ks.extender.httpTimeoutSeconds }}
{{- $ttl := float64 $px.reservationTtlSeconds }}
{{- /* Phalanx's deadline for one member's binding, retries included, which comes after the
barrier and the gang's commit record: BindSettings.timeout_seconds in
src/phalanx/service/binder.py. */}}
{{- $bindSeconds := 8.0 }}
{{- if ge (addf $barrier $bindSeconds) $http }}
{{- fail (printf "phalanx.barrierTimeoutSeconds (%v) plus %v s must be below kubeScheduler.extender.httpTimeoutSeconds (%v): a /bind is held at the gang barrier for up to barrierTimeoutSeconds, then Phalanx writes the gang's commit record and binds the member, the binding alone allowed up to %v s (Phalanx's bind deadline, retries included), and kube-scheduler abandons a /bind that outlasts its httpTimeout (a failed binding). Lower the barrier or raise the httpTimeout." $px.barrierTimeoutSeconds $bindSeconds $ks.extender.httpTimeoutSeconds $bindSeconds) }}
{{- end }}
{{- if ge $barrier $ttl }}
{{- fail (printf "phalanx.barrierTimeoutSeconds (%v) must be below phalanx.reservationTtlSeconds (%v): a reservation must outlive the bind barrier that waits on it." $px.barrierTimeoutSeconds $px.reservationTtlSeconds) }}
{{- end }}
{{- if gt (int64 $ks.podInitialBackoffSeconds) (int64 $ks.podMaxBackoffSeconds) }}
{{- fail (printf "kubeScheduler.podInitialBackoffSeconds (%d) must not exceed kubeScheduler.podMaxBackoffSeconds (%d): kube-scheduler refuses a retry backoff that starts above its cap and would not start. Lower podInitialBackoffSeconds or raise podMaxBackoffSeconds." (int64 $ks.podInitialBackoffSeconds) (int64 $ks.podMaxBackoffSeconds)) }}
{{- end }}
{{- $election := $ks.leaderElection }}
{{- if $election.leaderElect }}
{{- $lease := float64 (include "phalanx.durationSeconds" $election.leaseDuration) }}
{{- $renew := float64 (include "phalanx.durationSeconds" $election.renewDeadline) }}
{{- $retry := float64 (include "phalanx.durationSeconds" $election.retryPeriod) }}
{{- if le $lease $renew }}
{{- fail (printf "kubeScheduler.leaderElection.leaseDuration (%s) must be greater than kubeScheduler.leaderElection.renewDeadline (%s): kube-scheduler refuses such a leader election and would not start. Raise leaseDuration or lower renewDeadline." $election.leaseDuration $election.renewDeadline) }}
{{- end }}
{{- /* client-go's leader elector: renewDeadline > JitterFactor (1.2) x retryPeriod. */}}
{{- if le $renew (mulf 1.2 $retry) }}
{{- fail (printf "kubeScheduler.leaderElection.renewDeadline (%s) must be greater than 1.2 x kubeScheduler.leaderElection.retryPeriod (%s): kube-scheduler's leader elector (client-go, whose retry jitter factor is 1.2) refuses anything less, and kube-scheduler would not start. Raise renewDeadline or lower retryPeriod." $election.renewDeadline $election.retryPeriod) }}
{{- end }}
{{- if le $retry 0.0 }}
{{- fail (printf "kubeScheduler.leaderElection.retryPeriod (%s) must be greater than zero: kube-scheduler would not start." $election.retryPeriod) }}
{{- end }}
{{- else if gt (int64 .Values.replicaCount) 1 }}
{{- fail (printf "replicaCount (%d) needs kubeScheduler.leaderElection.leaderElect: true: without leader election every replica's kube-scheduler schedules at once, each with its own Phalanx holding its own reservations, and they place gangs against each other. Turn leader election on or set replicaCount to 1." (int64 .Values.replicaCount)) }}
{{- end }}
{{- /* Kubernetes' version skew policy: a kube-scheduler is never newer than the kube-apiserver and
at most one minor older. Tags that are not a release (a digest, "latest") are not judged. */}}
{{- $cluster := int (regexFind "^[0-9]+" .Capabilities.KubeVersion.Minor) }}
{{- $field := "kubeScheduler.image.tag" }}
{{- $fix := "Set kubeScheduler.image.tag to your cluster's release." }}
{{- if eq $ks.queueSort "Coscheduling" }}
{{- $field = "kubeScheduler.coschedulingImage.tag" }}
{{- $fix = "Set kubeScheduler.coschedulingImage.tag to a scheduler-plugins release built for your cluster's, or kubeScheduler.queueSort to PrioritySort (the upstream kube-scheduler image)." }}
{{- end }}
{{- $tag := ternary $ks.coschedulingImage.tag (include "phalanx.kubeSchedulerTag" .) (eq $ks.queueSort "Coscheduling") }}
{{- $known := include "phalanx.kubeSchedulerMinor" . }}
{{- if $known }}
{{- $minor := int $known }}
{{- if gt $minor $cluster }}
{{- fail (printf "%s (%s) runs kube-scheduler 1.%d, newer than this cluster's Kubernetes %s: a kube-scheduler must never be newer than the kube-apiserver. %s" $field $tag $minor .Capabilities.KubeVersion.Version $fix) }}
{{- else if lt $minor (sub $cluster 1) }}
{{- fail (printf "%s (%s) runs kube-scheduler 1.%d, more than one minor older than this cluster's Kubernetes %s, beyond Kubernetes' version skew policy. %s" $field $tag $minor .Capabilities.KubeVersion.Version $fix) }}
{{- end }}
{{- end }}
{{- /* kube-scheduler 1.37 locks DRAExtendedResource on (GA): it exits at start when told otherwise. */}}
{{- $schedulerMinor := include "phalanx.kubeSchedulerMinor" . }}
{{- if and $schedulerMinor (ge (int $schedulerMinor) 37) (eq (include "phalanx.draExtendedResourceGate" .) "false") }}
{{- fail (printf "kubeScheduler.extraArgs turn DRAExtendedResource off, but kube-scheduler 1.%s (%s) has it locked on (GA since 1.37) and would refuse to start. Remove DRAExtendedResource=false from its --feature-gates." $schedulerMinor (include "phalanx.kubeSchedulerImage" .)) }}
{{- end }}
{{- $ports := list (int64 $px.port) (int64 $px.metricsPort) (int64 $ks.securePort) }}
{{- if ne (len (uniq $ports)) (len $ports) }}
{{- fail (printf "phalanx.port (%d), phalanx.metricsPort (%d) and kubeScheduler.securePort (%d) must all differ: both containers share the pod's network namespace, so a second listener on one port cannot bind and its container crash-loops. Give each a port of its own." (int64 $px.port) (int64 $px.metricsPort) (int64 $ks.securePort)) }}
{{- end }}
{{- end }}
