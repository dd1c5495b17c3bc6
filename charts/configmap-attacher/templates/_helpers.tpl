{{/* Chart name, truncated to 63 characters. */}}
{{- define "configmap-attacher.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified name: the release name, with the chart name unless it already contains it. */}}
{{- define "configmap-attacher.fullname" -}}
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

{{- define "configmap-attacher.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "configmap-attacher.selectorLabels" -}}
app.kubernetes.io/name: {{ include "configmap-attacher.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end }}

{{- define "configmap-attacher.labels" -}}
helm.sh/chart: {{ include "configmap-attacher.chart" . }}
{{ include "configmap-attacher.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: configmap-attacher
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "configmap-attacher.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "configmap-attacher.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image: repository@digest when image.digest is set, else repository:tag (default appVersion). */}}
{{- define "configmap-attacher.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The job label of the chart's own scrape, as prometheus-operator sets it: a ServiceMonitor's
targets carry the Service's name, a PodMonitor's "<namespace>/<PodMonitor name>" (prometheus-operator
v0.85.0 pkg/prometheus/promcfg.go; a jobLabel or a relabeling of job changes it). The alerts'
default selector; the dashboard selects the job with its variable instead. */}}
{{- define "configmap-attacher.metricsJob" -}}
{{- if .Values.podMonitor.enabled }}
{{- printf "%s/%s" .Release.Namespace (include "configmap-attacher.fullname" .) }}
{{- else }}
{{- printf "%s-metrics" (include "configmap-attacher.fullname" .) }}
{{- end }}
{{- end }}

{{/* Checks that fail the render with a message naming the value to fix: only those that
depend on several values. What one value may be (types, enums, a non-empty selector, durations,
unknown keys) is values.schema.json's, which helm checks before rendering. */}}
{{- define "configmap-attacher.validate" -}}
{{- if and .Values.rbac.create (eq .Values.rbac.scope "namespaces") (empty .Values.namespaces) }}
{{- fail "rbac.scope: namespaces needs the list of watched namespaces in namespaces (a Role and RoleBinding is created in each)" }}
{{- end }}
{{- if and .Values.prometheusRule.enabled (not .Values.metrics.enabled) (not .Values.podMonitor.enabled) }}
{{- fail "prometheusRule.enabled needs metrics.enabled (the Service a ServiceMonitor scrapes) or podMonitor.enabled" }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled .Values.podMonitor.enabled }}
{{- fail "serviceMonitor.enabled and podMonitor.enabled are mutually exclusive: both would scrape every pod, and every series would be counted twice. Keep one (podMonitor needs no metrics Service)" }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled (not .Values.metrics.enabled) }}
{{- fail "serviceMonitor.enabled needs metrics.enabled" }}
{{- end }}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElection.enabled) }}
{{- fail "replicas > 1 needs leaderElection.enabled: only one replica may write" }}
{{- end }}
{{- end }}

{{/* Exactly the calls the controller makes. It watches ConfigMaps and Secrets through the
metadata API (no data), but RBAC cannot tell a metadata request from a full one. */}}
{{- define "configmap-attacher.rules" -}}
# The ReplicaSet cache (list + watch); never written.
- apiGroups: ["apps"]
  resources: ["replicasets"]
  verbs: ["list", "watch"]
# Every user owns: the workloads whose existence decides whether their ReplicaSets, revisions
# and Jobs may own, and whose current templates their anchors stand for; never written.
- apiGroups: ["apps"]
  resources: ["deployments", "statefulsets", "daemonsets"]
  verbs: ["list", "watch"]
# StatefulSets' and DaemonSets' revisions (owners), and the anchors: the only objects the
# controller creates and deletes (ControllerRevisions labelled configmap-attacher.io/anchor;
# the controller deletes nothing else, each delete carrying the anchor's UID as a precondition).
- apiGroups: ["apps"]
  resources: ["controllerrevisions"]
  verbs: ["list", "watch", "get", "create", "delete"]
# An anchor's controller is its Namespace (so that no workload's deletion takes it, and no
# StatefulSet or DaemonSet adopts it): one GET of the namespace per anchor created. In a Role this
# grants the Role's own namespace alone.
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["get"]
- apiGroups: ["batch"]
  resources: ["jobs", "cronjobs"]
  verbs: ["list", "watch"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
- apiGroups: ["argoproj.io"]
  resources: ["rollouts", "experiments"]
  verbs: ["list", "watch"]
# Before an object's first owner, the new owners are confirmed live: a GET of each ReplicaSet and
# of its controller (metadata only), which etcd answers at once. Without get the controller
# reads them with a list by name instead, which waits for the apiserver's watch cache.
- apiGroups: ["apps"]
  resources: ["replicasets", "deployments", "statefulsets", "daemonsets"]
  verbs: ["get"]
- apiGroups: ["batch"]
  resources: ["jobs", "cronjobs"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get"]
- apiGroups: ["argoproj.io"]
  resources: ["rollouts", "experiments"]
  verbs: ["get"]
# Metadata-only caches of ConfigMaps and Secrets, and one add-only PATCH per object that lacks
# an owner.
- apiGroups: [""]
  resources: ["configmaps", "secrets"]
  verbs: ["list", "watch", "patch"]
# Warning Events on the Rollout or Deployment when a patch is forbidden or rejected.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- if .Values.rbac.ownerReferencesPermissionEnforcement }}
# OwnerReferencesPermissionEnforcement: changing ownerReferences needs delete on the object.
- apiGroups: [""]
  resources: ["configmaps", "secrets"]
  verbs: ["delete"]
{{- end }}
{{- end }}

{{/* The cleanup hook's ServiceAccount, roles and Job. */}}
{{- define "configmap-attacher.cleanupName" -}}
{{- printf "%s-cleanup" (include "configmap-attacher.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Exactly the calls `configmap-attacher cleanup` makes, besides stopping the controller. */}}
{{- define "configmap-attacher.cleanupRules" -}}
# The anchors: listed by label, deleted one by one (UID and resourceVersion preconditions).
# RBAC cannot restrict a delete to labelled objects: the admission policy does
# (admission-policy.yaml).
- apiGroups: ["apps"]
  resources: ["controllerrevisions"]
  verbs: ["list", "delete"]
# The anchors' workloads (are they live, which objects their templates use), and the owners of
# the anchors' objects (does another live owner keep them).
- apiGroups: ["apps"]
  resources: ["deployments", "statefulsets", "daemonsets", "replicasets", "controllerrevisions"]
  verbs: ["get"]
- apiGroups: ["batch"]
  resources: ["cronjobs", "jobs"]
  verbs: ["get"]
- apiGroups: ["argoproj.io"]
  resources: ["rollouts", "experiments"]
  verbs: ["get"]
# The owner references of the anchors' objects (read as metadata; RBAC cannot tell that from
# reading a Secret's data), and of bare Pods that own them.
- apiGroups: [""]
  resources: ["configmaps", "secrets", "pods"]
  verbs: ["get"]
{{- end }}

{{/* The identities the admission policy restricts: the controller's and the cleanup hook's. */}}
{{- define "configmap-attacher.policyUsers" -}}
{{- $users := list (printf "system:serviceaccount:%s:%s" .Release.Namespace (include "configmap-attacher.serviceAccountName" .)) }}
{{- if and .Values.cleanup.enabled .Values.rbac.create }}
{{- $users = append $users (printf "system:serviceaccount:%s:%s" .Release.Namespace (include "configmap-attacher.cleanupName" .)) }}
{{- end }}
{{- range $i, $u := $users }}{{ if $i }} || {{ end }}request.userInfo.username == {{ $u | squote }}{{ end }}
{{- end }}
