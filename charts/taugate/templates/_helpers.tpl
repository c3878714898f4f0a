{{/* Names ------------------------------------------------------------------------------------- */}}

{{- define "taugate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "taugate.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "taugate.webhookName" -}}{{ include "taugate.fullname" . }}-webhook{{- end -}}
{{- define "taugate.operatorName" -}}{{ include "taugate.fullname" . }}-operator{{- end -}}
{{- define "taugate.certsName" -}}{{ include "taugate.fullname" . }}-certs{{- end -}}
{{- define "taugate.certsHookName" -}}{{ include "taugate.fullname" . }}-certs-hook{{- end -}}
{{- define "taugate.cleanupName" -}}{{ include "taugate.fullname" . }}-cleanup{{- end -}}
{{/* Both webhook configurations (Mutating and Validating) carry this name. */}}
{{- define "taugate.configurationName" -}}{{ include "taugate.fullname" . }}{{- end -}}
{{- define "taugate.tlsSecretName" -}}{{ include "taugate.fullname" . }}-webhook-tls{{- end -}}
{{- define "taugate.evidenceKeySecretName" -}}
{{- .Values.operator.evidence.signingKey.existingSecret | default (printf "%s-evidence-key" (include "taugate.fullname" .)) -}}
{{- end -}}
{{- define "taugate.admissionKeySecretName" -}}
{{- .Values.webhook.admissionKey.existingSecret | default (printf "%s-admission-key" (include "taugate.fullname" .)) -}}
{{- end -}}
{{- define "taugate.evidenceClaimName" -}}
{{- .Values.operator.evidence.persistence.existingClaim | default (printf "%s-evidence" (include "taugate.fullname" .)) -}}
{{- end -}}
{{- define "taugate.certificateName" -}}{{ include "taugate.fullname" . }}-webhook{{- end -}}

{{- define "taugate.priorityClassName" -}}
{{- if .Values.priorityClass.name -}}
{{- .Values.priorityClass.name -}}
{{- else if .Values.priorityClass.create -}}
{{- include "taugate.fullname" . }}-critical
{{- end -}}
{{- end -}}

{{/* The operator's username: the webhook configurations' matchConditions skip it and the server's
     guard clause (TAUGATE_SERVICE_ACCOUNT) allows it untouched. */}}
{{- define "taugate.operatorUsername" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "taugate.operatorName" . }}
{{- end -}}

{{/* The image of every taugate container. taugate publishes none, so there is no default to pull:
     rendering fails, naming how to build and set it, rather than pointing pods at a registry name
     nobody pushes to. */}}
{{- define "taugate.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- $fix := printf "taugate publishes no image: build it from the repository's Dockerfile and push it where your nodes pull from (docker build -t REGISTRY/taugate:%s . && docker push REGISTRY/taugate:%s), then install with --set image.repository=REGISTRY/taugate (docs/install.md: Before you install)" $tag $tag -}}
{{ required (printf "image.repository is not set: %s" $fix) .Values.image.repository }}:{{ $tag }}
{{- end -}}

{{/* Labels ------------------------------------------------------------------------------------ */}}

{{- define "taugate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "taugate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "webhook"). */}}
{{- define "taugate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "taugate.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "taugate.componentLabels" -}}
{{ include "taugate.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Routes (files/routes.json, generated from webhook/routes.py by scripts/chart_routes.py) ---- */}}

{{- define "taugate.routes" -}}
{{- $doc := .Files.Get "files/routes.json" | fromJson -}}
{{- if not $doc.routes -}}
{{- fail "files/routes.json is missing or has no routes: run python scripts/chart_routes.py" -}}
{{- end -}}
{{- toJson $doc.routes -}}
{{- end -}}

{{/* failurePolicy of one route: (dict "root" $ "key" "mutate"): its entry in
     webhook.failurePolicyOverrides, else webhook.failurePolicy. */}}
{{- define "taugate.failurePolicy" -}}
{{- $w := .root.Values.webhook -}}
{{- index ($w.failurePolicyOverrides | default dict) .key | default $w.failurePolicy -}}
{{- end -}}

{{/* Namespaces no webhook ever sees: kube-system, the release namespace, and the configured ones. */}}
{{- define "taugate.excludedNamespaces" -}}
{{- $ns := list "kube-system" .Release.Namespace -}}
{{- range .Values.webhook.excludedNamespaces -}}{{- $ns = append $ns . -}}{{- end -}}
{{- toJson ($ns | uniq) -}}
{{- end -}}

{{/* Settings every taugate process reads (taugate/settings.py, prefix TAUGATE_). */}}
{{- define "taugate.settingsEnv" -}}
- name: TAUGATE_SERVICE_ACCOUNT
  value: {{ include "taugate.operatorUsername" . | quote }}
- name: TAUGATE_SYSTEM_NAMESPACE
  value: {{ .Values.systemNamespace | quote }}
- name: TAUGATE_CONTROLLER_USERS
  value: {{ .Values.webhook.trustedControllers | toJson | quote }}
- name: TAUGATE_UNMANAGED_GPU_WORKLOADS
  value: {{ .Values.webhook.unmanagedGpuWorkloads | default "deny" | quote }}
- name: TAUGATE_GPU_DEVICE_RESOURCES
  value: {{ .Values.gpu.deviceResources | default list | toJson | quote }}
- name: TAUGATE_GPU_DEVICE_CLASSES
  value: {{ .Values.gpu.deviceClasses | toJson | quote }}
- name: TAUGATE_DRA_GPU_WORKLOADS
  value: {{ .Values.gpu.draWorkloads | default "deny" | quote }}
- name: TAUGATE_DEVICE_ACCESS
  value: {{ .Values.gpu.deviceAccess | default "deny" | quote }}
- name: TAUGATE_ADMISSION_POLICY
  value: {{ .Values.admissionPolicy.enabled | quote }}
- name: TAUGATE_RAY_SHUTDOWN_AFTER_JOB_FINISHES
  value: {{ .Values.ray.shutdownAfterJobFinishes | default "set" | quote }}
- name: TAUGATE_ADMIN_GROUPS
  value: {{ append .Values.platformAdmins.groups "system:masters" | uniq | toJson | quote }}
- name: TAUGATE_ADMISSION_DEADLINE_SECONDS
  value: {{ .Values.webhook.admissionDeadlineSeconds | quote }}
- name: TAUGATE_ADMISSION_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "taugate.admissionKeySecretName" . }}
      key: key
- name: TAUGATE_LOG_LEVEL
  value: {{ .Values.logging.level | default "info" | quote }}
- name: TAUGATE_LOG_FORMAT
  value: {{ .Values.logging.format | default "json" | quote }}
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{- end -}}

{{/* Checks the schema cannot express (they compare two values or a value with the release). */}}
{{- define "taugate.checks" -}}
{{- if eq .Values.systemNamespace .Release.Namespace -}}
{{- fail (printf "systemNamespace (%s) must differ from the release namespace: the webhook configurations never select taugate's own namespace, so TauWorkspaces there would not be validated" .Values.systemNamespace) -}}
{{- end -}}
{{- if ge (float64 .Values.webhook.admissionDeadlineSeconds) (float64 .Values.webhook.timeoutSeconds) -}}
{{- fail (printf "webhook.admissionDeadlineSeconds (%v) must be below webhook.timeoutSeconds (%v): the server must answer before the API server gives up" .Values.webhook.admissionDeadlineSeconds .Values.webhook.timeoutSeconds) -}}
{{- end -}}
{{- if and .Values.webhook.opa.enabled (ge (float64 .Values.webhook.opa.timeoutSeconds) (float64 .Values.webhook.admissionDeadlineSeconds)) -}}
{{- fail (printf "webhook.opa.timeoutSeconds (%v) must be below webhook.admissionDeadlineSeconds (%v): a late OPA must be answered before the deadline" .Values.webhook.opa.timeoutSeconds .Values.webhook.admissionDeadlineSeconds) -}}
{{- end -}}
{{- if and .Values.webhook.opa.enabled (eq (int .Values.webhook.opa.port) (int .Values.webhook.port)) -}}
{{- fail (printf "webhook.opa.port (%v) must differ from webhook.port: both listen in the same pod" .Values.webhook.opa.port) -}}
{{- end -}}
{{- $keys := list -}}
{{- range (include "taugate.routes" . | fromJsonArray) -}}{{- $keys = append $keys .key -}}{{- end -}}
{{- if and (eq (include "taugate.failurePolicy" (dict "root" . "key" "mutate")) "Ignore") (not .Values.admissionPolicy.enabled) (ne .Values.webhook.failurePolicy "Ignore") -}}
{{- fail "the workload route's failurePolicy is Ignore (webhook.failurePolicyOverrides.mutate) while admissionPolicy.enabled is false: with taugate's webhook down, GPU workloads would be admitted unqueued; turn admissionPolicy on, set webhook.failurePolicyOverrides.mutate: Fail, or, knowingly (docs/runbook.md, last resort), webhook.failurePolicy: Ignore" -}}
{{- end -}}
{{- range $k, $v := .Values.webhook.failurePolicyOverrides -}}
{{- if not (has $k $keys) -}}
{{- fail (printf "webhook.failurePolicyOverrides names route %q; the routes are %s" $k (join ", " $keys)) -}}
{{- end -}}
{{- end -}}
{{- with .Values.operator.leaderElection -}}
{{- if le (float64 .leaseDurationSeconds) (float64 .renewDeadlineSeconds) -}}
{{- fail (printf "operator.leaderElection.leaseDurationSeconds (%v) must be greater than renewDeadlineSeconds (%v): a leader that cannot renew must stop before a standby may take over" .leaseDurationSeconds .renewDeadlineSeconds) -}}
{{- end -}}
{{- if le (float64 .renewDeadlineSeconds) (mulf 1.2 (float64 .retryPeriodSeconds)) -}}
{{- fail (printf "operator.leaderElection.renewDeadlineSeconds (%v) must be greater than 1.2 x retryPeriodSeconds (%v)" .renewDeadlineSeconds .retryPeriodSeconds) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Pod-level pieces shared by every taugate pod ---------------------------------------------- */}}

{{- define "taugate.podSecurityContext" -}}
{{- toYaml .Values.podSecurityContext -}}
{{- end -}}

{{- define "taugate.containerSecurityContext" -}}
{{- toYaml .Values.securityContext -}}
{{- end -}}

{{/* Arguments of `taugate certs` for the hook Jobs and the renewal CronJob: one idempotent
     command that creates the CA and serving certificate in the Secret when missing, renews them
     when they expire within renewBeforeDays, and patches the CA bundle into both webhook
     configurations when they exist. */}}
{{- define "taugate.certsArgs" -}}
- certs
- sync
- --secret={{ include "taugate.tlsSecretName" . }}
- --namespace={{ .Release.Namespace }}
- --service={{ include "taugate.webhookName" . }}
- --days={{ .Values.certs.selfSigned.validityDays }}
- --renew-before-days={{ .Values.certs.selfSigned.renewBeforeDays }}
- --mutating-webhook-configuration={{ include "taugate.configurationName" . }}
- --validating-webhook-configuration={{ include "taugate.configurationName" . }}
{{- end -}}

{{/* RBAC rules of `taugate certs sync`: the one Secret, and the caBundle of the two configurations. */}}
{{- define "taugate.certsClusterRules" -}}
- apiGroups: [admissionregistration.k8s.io]
  resources: [mutatingwebhookconfigurations, validatingwebhookconfigurations]
  resourceNames: [{{ include "taugate.configurationName" . }}]
  verbs: [get, patch]
{{- end -}}
{{- define "taugate.certsNamespaceRules" -}}
# create cannot be restricted by resourceNames (Kubernetes RBAC rule).
- apiGroups: [""]
  resources: [secrets]
  verbs: [create]
- apiGroups: [""]
  resources: [secrets]
  resourceNames: [{{ include "taugate.tlsSecretName" . }}]
  verbs: [get, update, patch]
{{- end -}}

{{/* The peers that may reach the webhook port (networkPolicy.webhookFrom; see values.yaml).
Never empty: an empty `from` would admit every source. */}}
{{- define "taugate.webhookFrom" -}}
{{- $np := .Values.networkPolicy -}}
{{- if $np.webhookFrom -}}
{{- toYaml $np.webhookFrom -}}
{{- else -}}
{{- $peers := list -}}
{{- if $np.apiServerNamespaces -}}
{{- $peers = append $peers (dict "namespaceSelector" (dict "matchExpressions" (list (dict "key" "kubernetes.io/metadata.name" "operator" "In" "values" $np.apiServerNamespaces)))) -}}
{{- end -}}
{{- /* The API servers' addresses: the EndpointSlice default/kubernetes their endpoint reconciler
     keeps beside the Endpoints (kubernetes pkg/controlplane/reconcilers/endpointsadapter.go
     EnsureEndpointSliceFromEndpoints); read as a slice, since reading v1 Endpoints makes every
     helm install and upgrade print "v1 Endpoints is deprecated in v1.33+". */ -}}
{{- $slice := lookup "discovery.k8s.io/v1" "EndpointSlice" "default" "kubernetes" -}}
{{- $found := list -}}
{{- range (dig "endpoints" list $slice) -}}
{{- range (dig "addresses" list .) -}}
{{- $found = append $found (printf "%s/%s" . (ternary "128" "32" (contains ":" .))) -}}
{{- end -}}
{{- end -}}
{{- if not $found -}}{{/* nothing looked up: apiServer.cidrs, unless they are a catch-all */}}
{{- range $np.apiServer.cidrs -}}
{{- if not (has . (list "0.0.0.0/0" "::/0")) -}}{{- $found = append $found . -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- range ($found | uniq) -}}
{{- $peers = append $peers (dict "ipBlock" (dict "cidr" .)) -}}
{{- end -}}
{{- range $np.apiServerSources -}}
{{- $peers = append $peers . -}}
{{- end -}}
{{- range $np.metricsFrom -}}
{{- $peers = append $peers . -}}
{{- end -}}
{{- if not $peers -}}
{{- fail "networkPolicy: no source may reach the webhook port (webhookFrom, apiServerNamespaces, apiServerSources and metricsFrom are empty and no API server address is known); set networkPolicy.webhookFrom, or networkPolicy.enabled=false" -}}
{{- end -}}
{{- toYaml $peers -}}
{{- end -}}
{{- end -}}
