{{/*
Common helpers of the compute-domains chart: names, labels, the image, the resource.k8s.io API
version, the NetworkPolicy, and the settings that more than one component uses. Helpers that
only the hook Jobs use are in _helpers-hooks.tpl, those that only the node-side pods use in
_helpers-node.tpl; the IMEX agent's pod template is in _imexagent.tpl and the render-time checks
in _validate.tpl. Every helper is named `compute-domains.*`, states what it takes and what it
returns, and fails the render with a message when it is called wrongly.
*/}}

{{/*
compute-domains.name
  Takes: the root context.
  Returns: the chart name or .Values.nameOverride, at most 63 characters. Used in object names
  only: the app.kubernetes.io/name label is always the chart name (see compute-domains.labels).
*/}}
{{- define "compute-domains.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
compute-domains.fullname
  Takes: the root context.
  Returns: the base of every object name, at most 63 characters: .Values.fullnameOverride,
  or the release name when it already contains the chart name, or `<release>-<name>`.
*/}}
{{- define "compute-domains.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "compute-domains.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
compute-domains.componentName
  Takes: (dict "root" $ "suffix" "kubelet-plugin").
  Returns: `<fullname>-<suffix>`, at most 63 characters. The fullname is shortened, never the
  suffix, so names of different components stay distinct.
*/}}
{{- define "compute-domains.componentName" -}}
{{- $root := required "compute-domains.componentName: argument \"root\" (the root context) is missing" .root -}}
{{- $suffix := required "compute-domains.componentName: argument \"suffix\" is missing" .suffix -}}
{{- if gt (len $suffix) 40 -}}
{{- fail (printf "compute-domains.componentName: suffix %q is longer than 40 characters" $suffix) -}}
{{- end -}}
{{- $base := include "compute-domains.fullname" $root | trunc (int (sub 62 (len $suffix))) | trimSuffix "-" -}}
{{- printf "%s-%s" $base $suffix -}}
{{- end -}}

{{/*
compute-domains.chart
  Takes: the root context.
  Returns: `<chart>-<version>` for the helm.sh/chart label (`+` is not allowed in labels).
*/}}
{{- define "compute-domains.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
compute-domains.selectorLabels
  Takes: (dict "root" $ "component" "kubelet-plugin").
  Returns: the labels that select a component's pods (name, instance, component). They never
  change between versions: a DaemonSet's selector is immutable.
*/}}
{{- define "compute-domains.selectorLabels" -}}
{{- $root := required "compute-domains.selectorLabels: argument \"root\" (the root context) is missing" .root -}}
{{- $component := required "compute-domains.selectorLabels: argument \"component\" is missing" .component -}}
app.kubernetes.io/name: {{ $root.Chart.Name }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ $component }}
{{- end -}}

{{/*
compute-domains.labels
  Takes: (dict "root" $ "component" "kubelet-plugin").
  Returns: the standard labels of an object of that component: the selector labels plus
  version, part-of, managed-by, helm.sh/chart and .Values.commonLabels. Components call it
  through their own helper below, so every object of a component carries the same set.
*/}}
{{- define "compute-domains.labels" -}}
{{- $root := required "compute-domains.labels: argument \"root\" (the root context) is missing" .root -}}
{{ include "compute-domains.selectorLabels" . }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: compute-domains
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
helm.sh/chart: {{ include "compute-domains.chart" $root }}
{{- with $root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
compute-domains.kubeletPlugin.labels
  Takes: the root context.
  Returns: the standard labels of the kubelet plugin's objects (DaemonSet and its pods,
  ServiceAccount, RBAC, admission policies), component `kubelet-plugin`.
*/}}
{{- define "compute-domains.kubeletPlugin.labels" -}}
{{ include "compute-domains.labels" (dict "root" . "component" "kubelet-plugin") }}
{{- end -}}

{{/*
compute-domains.kubeletPlugin.selectorLabels
  Takes: the root context.
  Returns: the selector labels of the kubelet plugin's pods.
*/}}
{{- define "compute-domains.kubeletPlugin.selectorLabels" -}}
{{ include "compute-domains.selectorLabels" (dict "root" . "component" "kubelet-plugin") }}
{{- end -}}

{{/*
compute-domains.kubeletPlugin.name
  Takes: the root context.
  Returns: the name of the plugin's DaemonSet, ServiceAccount, ClusterRole(Binding) and
  Role(Binding): `<fullname>-kubelet-plugin`.
*/}}
{{- define "compute-domains.kubeletPlugin.name" -}}
{{ include "compute-domains.componentName" (dict "root" . "suffix" "kubelet-plugin") }}
{{- end -}}

{{/*
compute-domains.kubeletPlugin.serviceAccountUser
  Takes: the root context.
  Returns: the user name the API server sees for the plugin's (and node-init's) requests,
  `system:serviceaccount:<namespace>:<serviceaccount>`; the admission policies match on it.
*/}}
{{- define "compute-domains.kubeletPlugin.serviceAccountUser" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "compute-domains.kubeletPlugin.name" .) -}}
{{- end -}}

{{/*
compute-domains.controller.labels
  Takes: the root context.
  Returns: the standard labels of the controller's objects (Deployment and its pods,
  PodDisruptionBudget, Service, ServiceAccount, RBAC, admission policy), component `controller`.
*/}}
{{- define "compute-domains.controller.labels" -}}
{{ include "compute-domains.labels" (dict "root" . "component" "controller") }}
{{- end -}}

{{/*
compute-domains.controller.selectorLabels
  Takes: the root context.
  Returns: the selector labels of the controller's pods.
*/}}
{{- define "compute-domains.controller.selectorLabels" -}}
{{ include "compute-domains.selectorLabels" (dict "root" . "component" "controller") }}
{{- end -}}

{{/*
compute-domains.controller.name
  Takes: the root context.
  Returns: the name of the controller's Deployment, PodDisruptionBudget, Service,
  ServiceAccount, ClusterRole(Binding), Role(Binding) and leader-election Lease:
  `<fullname>-controller`.
*/}}
{{- define "compute-domains.controller.name" -}}
{{ include "compute-domains.componentName" (dict "root" . "suffix" "controller") }}
{{- end -}}

{{/*
compute-domains.controller.serviceAccountUser
  Takes: the root context.
  Returns: the user name the API server sees for the controller's requests,
  `system:serviceaccount:<namespace>:<serviceaccount>`; its admission policy matches on it.
*/}}
{{- define "compute-domains.controller.serviceAccountUser" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "compute-domains.controller.name" .) -}}
{{- end -}}

{{/*
compute-domains.imexAgent.labels
  Takes: the root context.
  Returns: the standard labels of the IMEX agent's objects (DaemonSet and its pods,
  ResourceClaimTemplate, Service, ServiceAccount, RBAC, admission policy), component
  `imex-agent`. The controller finds the agent pods by this component label.
*/}}
{{- define "compute-domains.imexAgent.labels" -}}
{{ include "compute-domains.labels" (dict "root" . "component" "imex-agent") }}
{{- end -}}

{{/*
compute-domains.imexAgent.selectorLabels
  Takes: the root context.
  Returns: the selector labels of the IMEX agent's pods.
*/}}
{{- define "compute-domains.imexAgent.selectorLabels" -}}
{{ include "compute-domains.selectorLabels" (dict "root" . "component" "imex-agent") }}
{{- end -}}

{{/*
compute-domains.imexAgent.name
  Takes: the root context.
  Returns: the name of the agent's DaemonSet, ResourceClaimTemplate, Service, ServiceAccount,
  ClusterRole(Binding) and Role(Binding): `<fullname>-imex-agent`.
*/}}
{{- define "compute-domains.imexAgent.name" -}}
{{ include "compute-domains.componentName" (dict "root" . "suffix" "imex-agent") }}
{{- end -}}

{{/*
compute-domains.imexAgent.claimTemplateName
  Takes: the root context.
  Returns: the name of the agent's ResourceClaimTemplate, `<fullname>-imex-agent-daemon`. A
  template's spec is immutable, and 0.1.0's (named `<fullname>-imex-agent`) carried the
  version labels, so no upgrade could patch it: 0.2.0 starts a new template whose spec holds
  only labels that never change. Agent pods that still run keep the claims they have.
*/}}
{{- define "compute-domains.imexAgent.claimTemplateName" -}}
{{ include "compute-domains.componentName" (dict "root" . "suffix" "imex-agent-daemon") }}
{{- end -}}

{{/*
compute-domains.imexAgent.serviceAccountUser
  Takes: the root context.
  Returns: the user name the API server sees for the agent's requests,
  `system:serviceaccount:<namespace>:<serviceaccount>`; its admission policy matches on it.
*/}}
{{- define "compute-domains.imexAgent.serviceAccountUser" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "compute-domains.imexAgent.name" .) -}}
{{- end -}}

{{/*
compute-domains.metrics.labels
  Takes: the root context.
  Returns: the standard labels of the ServiceMonitor, component `metrics`.
*/}}
{{- define "compute-domains.metrics.labels" -}}
{{ include "compute-domains.labels" (dict "root" . "component" "metrics") }}
{{- end -}}

{{/*
compute-domains.platform.labels
  Takes: the root context.
  Returns: the standard labels of the objects a platform needs besides the components' own
  (the critical-pods ResourceQuota, the OpenShift SCC grant), component `platform`.
*/}}
{{- define "compute-domains.platform.labels" -}}
{{ include "compute-domains.labels" (dict "root" . "component" "platform") }}
{{- end -}}

{{/*
compute-domains.deviceClasses.labels
  Takes: the root context.
  Returns: the standard labels of the DeviceClasses, component `device-classes`.
*/}}
{{- define "compute-domains.deviceClasses.labels" -}}
{{ include "compute-domains.labels" (dict "root" . "component" "device-classes") }}
{{- end -}}

{{/*
compute-domains.image
  Takes: the root context.
  Returns: the image reference: `<repository>@<digest>` when .Values.image.digest is set,
  else `<repository>:<tag>` with the tag defaulting to the chart's appVersion.
*/}}
{{- define "compute-domains.image" -}}
{{- $repository := required "image.repository is empty: set the image repository" .Values.image.repository -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
compute-domains.resourceApiVersion
  Takes: the root context.
  Returns: the resource.k8s.io API version for DRA objects: .Values.resourceApiVersion when
  set, else the newest of v1, v1beta2, v1beta1 the cluster serves (.Capabilities); fails when
  it serves none (DRA disabled).
*/}}
{{- define "compute-domains.resourceApiVersion" -}}
{{- if .Values.resourceApiVersion -}}
{{- .Values.resourceApiVersion -}}
{{- else -}}
{{- $found := "" -}}
{{- range list "resource.k8s.io/v1" "resource.k8s.io/v1beta2" "resource.k8s.io/v1beta1" -}}
{{- if and (not $found) ($.Capabilities.APIVersions.Has .) -}}
{{- $found = . -}}
{{- end -}}
{{- end -}}
{{- if not $found -}}
{{- fail "the cluster serves no resource.k8s.io API (Dynamic Resource Allocation): use Kubernetes 1.34 or newer with the resource.k8s.io API enabled, or set resourceApiVersion when rendering offline" -}}
{{- end -}}
{{- $found -}}
{{- end -}}
{{- end -}}

{{/*
compute-domains.networkPolicy
  Takes: (dict "root" $ "component" "controller" "labels" "<labels YAML>" "selector" "<selector
  labels YAML>" "ports" (list 8080)), optionally "annotations" "<annotations YAML>".
  Returns: the component's NetworkPolicy: ingress only to its own TCP ports (metrics and
  probes, and the webhook's HTTPS endpoint, from anywhere: scrapers and the API server have no
  fixed address), egress only to the API server's ports (networkPolicy.apiServerPorts, any
  address). The components resolve no names: they reach the API server by the IP in their
  environment.
*/}}
{{- define "compute-domains.networkPolicy" -}}
{{- $root := required "compute-domains.networkPolicy: argument \"root\" (the root context) is missing" .root -}}
{{- $component := required "compute-domains.networkPolicy: argument \"component\" is missing" .component -}}
{{- $ports := required "compute-domains.networkPolicy: argument \"ports\" is missing" .ports -}}
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ include "compute-domains.componentName" (dict "root" $root "suffix" $component) }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- .labels | nindent 4 }}
  {{- with .annotations }}
  annotations:
    {{- . | nindent 4 }}
  {{- end }}
spec:
  podSelector:
    matchLabels:
      {{- .selector | nindent 6 }}
  policyTypes: [Ingress, Egress]
  ingress:
    - ports:
        {{- range $ports }}
        - protocol: TCP
          port: {{ . }}
        {{- end }}
  egress:
    - ports:
        {{- range $root.Values.networkPolicy.apiServerPorts }}
        - protocol: TCP
          port: {{ . }}
        {{- end }}
{{- end -}}

{{/*
compute-domains.podIdentityEnv
  Takes: nothing (pass the root context).
  Returns: the env list items the controller and the IMEX agent get from the downward API:
  POD_NAME (metadata.name), POD_NAMESPACE (metadata.namespace), POD_UID (metadata.uid),
  POD_IP (status.podIP). Their flags refer to them as $(POD_NAME) and so on.
*/}}
{{- define "compute-domains.podIdentityEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: POD_UID
  valueFrom:
    fieldRef:
      fieldPath: metadata.uid
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- end -}}

{{/*
compute-domains.tokenExtraVariable
  Takes: (dict "name" "podName" "key" "pod-name").
  Returns: the `variables` list item of an admission policy: `<name>`, the value of the extra
  field authentication.kubernetes.io/<key> in the caller's pod-bound token, or '' when the
  token carries none.
*/}}
{{- define "compute-domains.tokenExtraVariable" -}}
{{- $name := required "compute-domains.tokenExtraVariable: argument \"name\" is missing" .name -}}
{{- $key := required "compute-domains.tokenExtraVariable: argument \"key\" is missing" .key -}}
{{- $extra := printf "authentication.kubernetes.io/%s" $key -}}
- name: {{ $name }}
  expression: >-
    has(request.userInfo.extra) &&
    '{{ $extra }}' in request.userInfo.extra &&
    size(request.userInfo.extra['{{ $extra }}']) > 0
    ? request.userInfo.extra['{{ $extra }}'][0] : ''
{{- end -}}

{{/*
compute-domains.logArgs
  Takes: the root context.
  Returns: the YAML list items of `--log-format` and `--verbosity` from `logging`, for every
  container that runs `computedomains`; nothing at the defaults (text, 0), so a default render
  carries no logging flags.
*/}}
{{- define "compute-domains.logArgs" -}}
{{- $args := list -}}
{{- if ne .Values.logging.format "text" -}}
{{- $args = append $args (printf "--log-format=%s" .Values.logging.format) -}}
{{- end -}}
{{- if .Values.logging.verbosity -}}
{{- $args = append $args (printf "--verbosity=%d" (int .Values.logging.verbosity)) -}}
{{- end -}}
{{- if $args }}{{ toYaml $args }}{{ end -}}
{{- end -}}

{{/*
compute-domains.kubeletPlugin.nodeNameVariable
  Takes: nothing (pass the root context).
  Returns: the `variables` list item of the admission policies: `nodeName`, the node named in
  the caller's pod-bound token (extra authentication.kubernetes.io/node-name), or '' when the
  token names none.
*/}}
{{- define "compute-domains.kubeletPlugin.nodeNameVariable" -}}
{{ include "compute-domains.tokenExtraVariable" (dict "name" "nodeName" "key" "node-name") }}
{{- end -}}

{{/*
compute-domains.webhook.labels
  Takes: the root context.
  Returns: the standard labels of the webhook's objects (Deployment and its pods,
  PodDisruptionBudget, Service, ServiceAccount, RBAC, webhook configurations, cert-manager
  objects), component `webhook`.
*/}}
{{- define "compute-domains.webhook.labels" -}}
{{ include "compute-domains.labels" (dict "root" . "component" "webhook") }}
{{- end -}}

{{/*
compute-domains.webhook.selectorLabels
  Takes: the root context.
  Returns: the selector labels of the webhook's pods.
*/}}
{{- define "compute-domains.webhook.selectorLabels" -}}
{{ include "compute-domains.selectorLabels" (dict "root" . "component" "webhook") }}
{{- end -}}

{{/*
compute-domains.webhook.name
  Takes: the root context.
  Returns: the name of the webhook's Deployment, PodDisruptionBudget, ServiceAccount,
  ClusterRole(Binding), Role(Binding) and its Validating- and MutatingWebhookConfiguration:
  `<fullname>-webhook`. The webhook gets the two configuration names as flags.
*/}}
{{- define "compute-domains.webhook.name" -}}
{{ include "compute-domains.componentName" (dict "root" . "suffix" "webhook") }}
{{- end -}}

{{/*
compute-domains.webhookTLSSecretName
  Takes: the root context.
  Returns: the name of the Secret with the webhook's CA and serving certificate,
  `<fullname>-webhook-tls` (keys ca.crt, tls.crt, tls.key; ca.key when self-managed). The
  webhook creates it, or cert-manager does with webhook.certManager.enabled; no template
  renders the Secret itself, so Helm and Argo CD never overwrite it.
*/}}
{{- define "compute-domains.webhookTLSSecretName" -}}
{{ include "compute-domains.componentName" (dict "root" . "suffix" "webhook-tls") }}
{{- end -}}

{{/*
compute-domains.webhook.serviceName
  Takes: the root context.
  Returns: the name of the webhook's Service, the one the ComputeDomain CRD's conversion
  calls: the crds subchart's `compute-domains-crds.webhookServiceName`. With crds.enabled=false
  the subchart (and its helper) is not part of the render, so the same formula is applied
  here; tests/chart checks that both agree.
*/}}
{{- define "compute-domains.webhook.serviceName" -}}
{{- if .Values.crds.enabled -}}
{{ include "compute-domains-crds.webhookServiceName" . }}
{{- else -}}
{{- printf "%s-cd-webhook" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/*
compute-domains.webhook.syncWave
  Takes: nothing (pass the root context).
  Returns: the annotation that puts a webhook object into Argo CD sync wave -1: after the CRDs
  (-2), before everything else (0), so the conversion webhook serves before anything reads a
  ComputeDomain at v1beta1.
*/}}
{{- define "compute-domains.webhook.syncWave" -}}
argocd.argoproj.io/sync-wave: "-1"
{{- end -}}

{{/*
compute-domains.unprivilegedContainerSecurityContext
  Takes: (dict "runAsUser" <UID or nil>).
  Returns: the securityContext of a container that only talks to the API server: not root
  (the UID given; nil leaves the UID to the platform, as OpenShift's restricted SCC requires),
  no privilege, no capabilities, read-only root filesystem, the runtime's seccomp profile.
  Used by the controller (.Values.controller.runAsUser) and the webhook (.Values.webhook.runAsUser).
*/}}
{{- define "compute-domains.unprivilegedContainerSecurityContext" -}}
{{- if not (hasKey . "runAsUser") -}}
{{- fail "compute-domains.unprivilegedContainerSecurityContext: argument \"runAsUser\" is missing (nil for the platform's choice)" -}}
{{- end -}}
privileged: false
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
{{- if not (kindIs "invalid" .runAsUser) }}
runAsUser: {{ .runAsUser }}
runAsGroup: {{ .runAsUser }}
{{- end }}
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/*
compute-domains.podDomainLabel
  Takes: the root context.
  Returns: the pod label the webhook sets on a ComputeDomain's pods, `computedomains.io/domain`
  (webhook/podaffinity.py DOMAIN_LABEL): the admission policy guards it, and a pod arriving with
  it reaches the webhook's failurePolicy Fail entry.
*/}}
{{- define "compute-domains.podDomainLabel" -}}
computedomains.io/domain
{{- end }}
