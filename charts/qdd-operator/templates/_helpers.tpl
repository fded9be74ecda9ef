{{/* Names and labels shared by every template. */}}

{{- define "qdd-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "qdd-operator.fullname" -}}
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

{{- define "qdd-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "qdd-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "qdd-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "qdd-operator.labels" -}}
{{ include "qdd-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: qdd
helm.sh/chart: {{ include "qdd-operator.chart" . }}
{{- end }}

{{- define "qdd-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "qdd-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "qdd-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
Rules for the objects the operator handles inside a namespace. Used by the ClusterRole
(cluster-scoped mode) and by the Role in every watched namespace (namespace-scoped mode).
docs/install.md ("RBAC") says why each verb is there; tests/unit/test_chart.py pins them.
Server-side apply is a PATCH; when the object does not exist yet the API server also checks
`create`, so every applied kind has both.
*/}}
{{- define "qdd-operator.namespacedRules" -}}
# What a QwenDisaggDeployment author can cause through these rules: docs/security.md.
# QwenDisaggDeployments: kopf lists and watches them and keeps its bookkeeping in their
# annotations (patch); every reconcile reads the object fresh (get). Never update: the operator
# does not write spec.
- apiGroups: ["qdd.dev"]
  resources: ["qwendisaggdeployments"]
  verbs: ["get", "list", "watch", "patch"]
# Status is written through the status subresource only (merge patch).
- apiGroups: ["qdd.dev"]
  resources: ["qwendisaggdeployments/status"]
  verbs: ["patch"]
# Children carry an owner reference with blockOwnerDeletion; where the
# OwnerReferencesPermissionEnforcement admission plugin is on, that needs update on finalizers.
- apiGroups: ["qdd.dev"]
  resources: ["qwendisaggdeployments/finalizers"]
  verbs: ["update"]
# QwenDisaggBenchmarks: watched, read fresh on every reconcile, status patched; Jobs and ConfigMaps
# owned by them (blockOwnerDeletion: finalizers update). Never update: the operator writes no spec.
- apiGroups: ["qdd.dev"]
  resources: ["qwendisaggbenchmarks"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["qdd.dev"]
  resources: ["qwendisaggbenchmarks/status"]
  verbs: ["patch"]
- apiGroups: ["qdd.dev"]
  resources: ["qwendisaggbenchmarks/finalizers"]
  verbs: ["update"]
# QwenDisaggRoleScales (spec.autoscaling.mode On, docs/autoscaling.md): one per role, created and
# pruned with the deployment, watched; qdd's planner writes spec.replicas through /scale (as an HPA
# does), the operator writes their status.
- apiGroups: ["qdd.dev"]
  resources: ["qwendisaggrolescales"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["qdd.dev"]
  resources: ["qwendisaggrolescales/scale", "qwendisaggrolescales/status"]
  verbs: ["get", "patch"]
# Benchmark scripts and results ConfigMaps (applied, read to skip unchanged writes); the autoscaler
# reads a deployment's performance profile (<name>-perf-profile); the weight cache's program ConfigMap
# (spec.model.cache: applied, watched, pruned).
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Events on the custom resource (InvalidSpec, Ready, GroupRestart; kopf's warnings).
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
# Engine pods: decode groups are bare pods the operator creates (apply), watches, lists and
# deletes together; `get` because the router's Role grants pods get/list/watch, and RBAC lets a
# subject grant only what it holds.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Each engine pod's start-up, read once from the first MiB of its log (status.startup).
- apiGroups: [""]
  resources: ["pods/log"]
  verbs: ["get"]
# Headless Services for DP rendezvous, the router Service, the router's ServiceAccount.
- apiGroups: [""]
  resources: ["services", "serviceaccounts"]
  verbs: ["list", "watch", "create", "patch", "delete"]
# Prefill StatefulSet, router Deployment, the weight cache's prefetch DaemonSet: applied, watched, pruned.
- apiGroups: ["apps"]
  resources: ["statefulsets", "deployments", "daemonsets"]
  verbs: ["list", "watch", "create", "patch", "delete"]
# PodDisruptionBudgets of roles with two or more endpoints (at most one endpoint drained at a time).
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["list", "watch", "create", "patch", "delete"]
# KV-transfer preflight and benchmark Jobs (created, replaced when their manifest changes, pruned;
# benchmark Jobs watched for completion).
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["list", "watch", "create", "patch", "delete"]
# The router's Role and RoleBinding (pods get/list/watch for service discovery).
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["list", "watch", "create", "patch", "delete"]
# One ComputeDomain per deployment (NVIDIA DRA driver); get reads its readiness.
- apiGroups: ["resource.nvidia.com"]
  resources: ["computedomains"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# IMEX-channel ResourceClaims shared by the StatefulSet pods of one tray (one per tray, made with the
# spec of the driver's claim template; docs/placement.md#imex-channels-one-claim-per-tray).
- apiGroups: ["resource.k8s.io"]
  resources: ["resourceclaims"]
  verbs: ["list", "watch", "create", "patch", "delete"]
# Gang placement in one NVLink domain (Kubernetes Workload API, docs/placement.md): one Workload
# and its PodGroups per deployment; immutable, so replaced by delete and create.
- apiGroups: ["scheduling.k8s.io"]
  resources: ["workloads", "podgroups"]
  verbs: ["list", "watch", "create", "patch", "delete"]
{{- end }}

{{/* kopf watches CRDs to notice resources that appear or change while it runs. */}}
{{- define "qdd-operator.crdRules" -}}
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["list", "watch"]
# Nodes, read-only: when no NVLink domain can hold a deployment, its condition gives the free GPUs per
# domain from the nodes' clique labels and allocatable GPUs (docs/placement.md, list); a tray that
# comes back (Ready, uncordoned, its clique label back) queues the deployments waiting for it
# (qdd.controller.tray_watch, kopf's watch: list + watch; docs/reliability.md).
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["list", "watch"]
{{- end }}

{{/* Name of the kopf peering object the replicas share. */}}
{{- define "qdd-operator.peeringName" -}}
{{- default (include "qdd-operator.fullname" .) .Values.operator.peering.name -}}
{{- end -}}

{{/* kopf's peering (operator.replicas > 1): the replicas' keep-alives in the peering object. */}}
{{- define "qdd-operator.peeringRules" -}}
{{- if gt (int .Values.operator.replicas) 1 }}
# kopf peering between the replicas: each reads the shared peering object and patches its
# keep-alive into its status (docs/reliability.md#operator-replicas).
- apiGroups: ["kopf.dev"]
  resources: [{{ if .Values.watchNamespaces }}"kopfpeerings"{{ else }}"clusterkopfpeerings"{{ end }}]
  verbs: ["get", "list", "watch", "patch"]
{{- end }}
{{- end -}}
