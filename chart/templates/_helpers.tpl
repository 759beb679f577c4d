{{/*
Helpers of the compute-domains chart. Every helper is named `compute-domains.*`, states what it
takes and what it returns, and fails the render with a message when it is called wrongly.
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
compute-domains.paths
  Takes: the root context.
  Returns: a YAML map of the node paths the node-side pods use, each mounted at the same path
  in the containers: registryDir, pluginsDir, cdiRoot, runDir, verdictFile, imexDir,
  imexStatusFile, and the container-only paths driverRoot and procRoot. The flags and the
  mounts both read it, so they cannot disagree.
  Use: `$p := include "compute-domains.paths" . | fromYaml`.
*/}}
{{- define "compute-domains.paths" -}}
{{- $kubelet := .Values.kubeletPlugin.kubeletDir | trimSuffix "/" -}}
registryDir: {{ printf "%s/plugins_registry" $kubelet }}
pluginsDir: {{ printf "%s/plugins" $kubelet }}
cdiRoot: /var/run/cdi
runDir: /var/run/compute-domains
verdictFile: /var/run/compute-domains/fabric-verdict.json
imexDir: /var/run/compute-domains/imex
imexStatusFile: /var/run/compute-domains/imex/status.json
driverRoot: /driver-root
procRoot: /host/proc
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
compute-domains.containerSecurityContext
  Takes: the root context.
  Returns: the securityContext of every container in the node-side pods (kubelet plugin,
  node-init, IMEX agent). They run as root because they write files on the node that root
  owns and that must keep their owner: the kubelet's plugin and registry folders (plugin
  socket, checkpoint), /var/run/cdi (CDI specs), /var/run/compute-domains (fabric verdict,
  IMEX files) and, for the agent, the pod's /etc/hosts. With every capability dropped, root
  has only an owner's rights there (no CAP_DAC_OVERRIDE, no CAP_SYS_ADMIN), nothing else.
*/}}
{{- define "compute-domains.containerSecurityContext" -}}
privileged: false
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsUser: 0
runAsGroup: 0
runAsNonRoot: false
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/*
compute-domains.nodePodSecurityContext
  Takes: the root context.
  Returns: the pod-level securityContext of the node-side pods (kubelet plugin with node-init,
  IMEX agent): the runtime's default seccomp profile, and the SELinux type
  .Values.nodePods.seLinuxType when set (hosts that enforce SELinux label the kubelet's and
  the driver's folders so that the default container type may not write them).
*/}}
{{- define "compute-domains.nodePodSecurityContext" -}}
seccompProfile:
  type: RuntimeDefault
{{- with .Values.nodePods.seLinuxType }}
seLinuxOptions:
  type: {{ . }}
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
compute-domains.nodeInit.args
  Takes: the root context.
  Returns: the YAML list items of the init container's `computedomains node-init` arguments.
  It takes the fault grace: a restarted pod on a node running a job holds its verdict as the
  plugin's re-check does.
*/}}
{{- define "compute-domains.nodeInit.args" -}}
{{- $p := include "compute-domains.paths" . | fromYaml -}}
- node-init
- --node-name=$(NODE_NAME)
- --namespace=$(NAMESPACE)
- --proc-root={{ $p.procRoot }}
- --fabric-verdict-file={{ $p.verdictFile }}
- --fault-grace-checks={{ .Values.nodeInit.faultGrace.checks }}
- --fault-grace-seconds={{ .Values.nodeInit.faultGrace.seconds }}
{{ include "compute-domains.fabricCheck.args" . }}
{{- with include "compute-domains.logArgs" . }}
{{ . }}
{{- end }}
{{- end -}}

{{/*
compute-domains.fabricCheck.args
  Takes: the root context.
  Returns: the YAML list items of the fabric check's own arguments, taken by node-init (the
  init container) and by the kubelet plugin (which runs the re-check).
*/}}
{{- define "compute-domains.fabricCheck.args" -}}
{{- $p := include "compute-domains.paths" . | fromYaml -}}
- --driver-root={{ $p.driverRoot }}
{{- if hasKey .Values.nodeInit "transitionalGrace" }}
- --transitional-grace={{ .Values.nodeInit.transitionalGrace }}
{{- end }}
- {{ ternary "--taint-broken" "--no-taint-broken" .Values.nodeInit.taintBroken }}
{{- end -}}

{{/*
compute-domains.downwardEnv
  Takes: nothing (pass the root context).
  Returns: the env list items every container of the plugin pod gets from the downward API:
  NODE_NAME (spec.nodeName), NAMESPACE (metadata.namespace), POD_IP (status.podIP).
*/}}
{{- define "compute-domains.downwardEnv" -}}
- name: NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
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
compute-domains.nodeInit.deviceEnv
  Takes: the root context.
  Returns: the env list item that lets node-init's NVML see the GPUs without privilege: with
  the NVIDIA container runtime, NVIDIA_VISIBLE_DEVICES=all injects the GPU device nodes.
*/}}
{{- define "compute-domains.nodeInit.deviceEnv" -}}
- name: NVIDIA_VISIBLE_DEVICES
  value: all
{{- end -}}

{{/*
compute-domains.nodeInit.volumeMounts
  Takes: the root context.
  Returns: the volumeMounts list items of node-init and of the plugin's re-check: the state folder
  (read-write, for the verdict), the host /proc and the driver root (read-only). The volumes are
  declared by the DaemonSet.
*/}}
{{- define "compute-domains.nodeInit.volumeMounts" -}}
{{- $p := include "compute-domains.paths" . | fromYaml -}}
- name: run
  mountPath: {{ $p.runDir }}
- name: host-proc
  mountPath: {{ $p.procRoot }}
  readOnly: true
- name: driver-root
  mountPath: {{ $p.driverRoot }}
  readOnly: true
  # Follows mounts the GPU operator's driver container makes after this pod started.
  mountPropagation: HostToContainer
- name: tmp
  mountPath: /tmp
{{- end -}}

{{/*
compute-domains.hook.name
  Takes: (dict "root" $ "hook" "preflight").
  Returns: the name of a hook's Job, ServiceAccount and RBAC objects: `<fullname>-hook-<hook>`.
*/}}
{{- define "compute-domains.hook.name" -}}
{{- $hook := required "compute-domains.hook.name: argument \"hook\" is missing" .hook -}}
{{ include "compute-domains.componentName" (dict "root" .root "suffix" (printf "hook-%s" $hook)) }}
{{- end -}}

{{/*
compute-domains.hook.annotations
  Takes: (dict "root" $ "events" "pre-install,pre-upgrade" "argo" "PreSync" "weight" 0
  "deletePolicy" "before-hook-creation").
  Returns: the annotations that make an object a hook for Helm and for Argo CD alike (Argo CD
  ignores Helm's hooks once any object carries its own annotation, so both are always set):
  helm.sh/hook, hook-weight and hook-delete-policy; argocd.argoproj.io/hook, hook-delete-policy
  (the same policy in Argo's words) and sync-wave (= the Helm weight); then .Values.hooks.annotations.
*/}}
{{- define "compute-domains.hook.annotations" -}}
{{- $events := required "compute-domains.hook.annotations: argument \"events\" is missing" .events -}}
{{- $argo := required "compute-domains.hook.annotations: argument \"argo\" is missing" .argo -}}
{{- $policy := required "compute-domains.hook.annotations: argument \"deletePolicy\" is missing" .deletePolicy -}}
{{- if not (hasKey . "weight") -}}
{{- fail "compute-domains.hook.annotations: argument \"weight\" is missing" -}}
{{- end -}}
{{- $argoPolicy := list -}}
{{- range splitList "," $policy -}}
{{- $argoPolicy = append $argoPolicy (get (dict "before-hook-creation" "BeforeHookCreation" "hook-succeeded" "HookSucceeded" "hook-failed" "HookFailed") .) -}}
{{- end -}}
helm.sh/hook: {{ $events }}
helm.sh/hook-weight: {{ .weight | quote }}
helm.sh/hook-delete-policy: {{ $policy }}
argocd.argoproj.io/hook: {{ $argo }}
argocd.argoproj.io/hook-delete-policy: {{ join "," $argoPolicy }}
argocd.argoproj.io/sync-wave: {{ .weight | quote }}
{{- with .root.Values.hooks.annotations }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
compute-domains.hook.rbac
  Takes: (dict "root" $ "hook" "verify" "events" "post-install,post-upgrade" "argo" "PostSync"
  "weight" 5 "clusterRules" "<YAML list>" "rules" "<YAML list>"), optionally also
  "otherNamespace" "ns" "otherRules" "<YAML list>".
  Returns: the hook's ServiceAccount, a ClusterRole + ClusterRoleBinding with clusterRules, a
  Role + RoleBinding in the release namespace with rules and one in otherNamespace with
  otherRules, each rendered only when its rules are not empty. They are hooks themselves, at `weight` (below the Job's), deleted before the next
  run and once every hook of the event succeeded (STYLE.md 22), so no grant outlives the hook.
  With "plain" true (hooks.enabled=false) they are ordinary objects of the release instead.
*/}}
{{- define "compute-domains.hook.rbac" -}}
{{- $root := required "compute-domains.hook.rbac: argument \"root\" (the root context) is missing" .root -}}
{{- $name := include "compute-domains.hook.name" . -}}
{{- $labels := include "compute-domains.labels" (dict "root" $root "component" (printf "hook-%s" .hook)) -}}
{{- $annotations := "" -}}
{{- if not .plain -}}
{{- $annotations = include "compute-domains.hook.annotations" (dict "root" $root "events" .events "argo" .argo "weight" .weight "deletePolicy" "before-hook-creation,hook-succeeded") -}}
{{- end -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- $labels | nindent 4 }}
  {{- with $annotations }}
  annotations:
    {{- . | nindent 4 }}
  {{- end }}
automountServiceAccountToken: true
{{- $scopes := list (list "" .clusterRules) (list $root.Release.Namespace .rules) -}}
{{- with .otherNamespace }}
{{- $scopes = append $scopes (list . $.otherRules) -}}
{{- end }}
{{- range $scope := $scopes }}
{{- $namespace := index $scope 0 }}
{{- $rules := index $scope 1 }}
{{- if $rules }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: {{ ternary "Role" "ClusterRole" (ne $namespace "") }}
metadata:
  name: {{ $name }}
  {{- with $namespace }}
  namespace: {{ . }}
  {{- end }}
  labels:
    {{- $labels | nindent 4 }}
  {{- with $annotations }}
  annotations:
    {{- . | nindent 4 }}
  {{- end }}
rules:
  {{- $rules | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: {{ ternary "RoleBinding" "ClusterRoleBinding" (ne $namespace "") }}
metadata:
  name: {{ $name }}
  {{- with $namespace }}
  namespace: {{ . }}
  {{- end }}
  labels:
    {{- $labels | nindent 4 }}
  {{- with $annotations }}
  annotations:
    {{- . | nindent 4 }}
  {{- end }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: {{ ternary "Role" "ClusterRole" (ne $namespace "") }}
  name: {{ $name }}
subjects:
  - kind: ServiceAccount
    name: {{ $name }}
    namespace: {{ $root.Release.Namespace }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
compute-domains.hook.job
  Takes: (dict "root" $ "hook" "preflight" "events" "pre-install,pre-upgrade" "argo" "PreSync"
  "weight" 0 "deletePolicy" "before-hook-creation" "args" (list "--flag=value" ...)).
  Returns: the hook's Job: one pod running `computedomains hooks <hook> --namespace=<release
  namespace> <args>` as the hook's ServiceAccount, never retried
  (backoffLimit 0: a hook that failed says why once, and Helm or Argo CD fails the release),
  bounded by .Values.hooks.activeDeadlineSeconds, not root, read-only root filesystem, no
  capabilities. Its pod carries the chart's standard labels (component `hook-<hook>`).
  deletePolicy `before-hook-creation` keeps a finished Job, and its log, until the next run;
  a failed Job's log is printed by helm itself (helm.sh/hook-output-log-policy: hook-failed), and
  its container's termination message is its last log lines (FallbackToLogsOnError).
  With "plain" true (hooks.enabled=false) it is an ordinary Job of the release instead:
  `<fullname>-<hook>-<chart version>` (a Job's pod template cannot change, so each chart
  version gets its own), retried (backoffLimit 6) while what it needs comes up beside it.
*/}}
{{- define "compute-domains.hook.job" -}}
{{- $root := required "compute-domains.hook.job: argument \"root\" (the root context) is missing" .root -}}
{{- $hook := required "compute-domains.hook.job: argument \"hook\" is missing" .hook -}}
{{- $name := include "compute-domains.hook.name" . -}}
{{- $jobName := $name -}}
{{- if .plain -}}
{{- $jobName = include "compute-domains.componentName" (dict "root" $root "suffix" (printf "%s-%s" $hook ($root.Chart.Version | replace "." "-" | replace "+" "-"))) -}}
{{- end -}}
{{- $labels := include "compute-domains.labels" (dict "root" $root "component" (printf "hook-%s" $hook)) -}}
apiVersion: batch/v1
kind: Job
metadata:
  name: {{ $jobName }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- $labels | nindent 4 }}
  {{- if not .plain }}
  annotations:
    {{- include "compute-domains.hook.annotations" (dict "root" $root "events" .events "argo" .argo "weight" .weight "deletePolicy" .deletePolicy) | nindent 4 }}
    # Helm (3.22 and 4 tested; older ones ignore it) copies a failed hook's log into its output:
    # the refusal's reason and fix reach whoever runs helm, not only `kubectl logs`.
    helm.sh/hook-output-log-policy: hook-failed
  {{- end }}
spec:
  backoffLimit: {{ ternary 6 0 (.plain | default false) }}
  activeDeadlineSeconds: {{ $root.Values.hooks.activeDeadlineSeconds }}
  template:
    metadata:
      labels:
        {{- $labels | nindent 8 }}
    spec:
      serviceAccountName: {{ $name }}
      restartPolicy: Never
      {{- with $root.Values.hooks.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        runAsNonRoot: true
        seccompProfile:
          type: RuntimeDefault
      {{- with $root.Values.hooks.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $root.Values.hooks.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: {{ $hook }}
          image: {{ include "compute-domains.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          # A container that fails says why in its status: its last log lines.
          terminationMessagePolicy: FallbackToLogsOnError
          command: [computedomains]
          args:
            - hooks
            - {{ $hook }}
            - --namespace={{ $root.Release.Namespace }}
            {{- with include "compute-domains.logArgs" $root }}{{ . | nindent 12 }}{{ end }}
            {{- range .args }}
            - {{ . | quote }}
            {{- end }}
          env:
            # Hooks open no GPU; the NVIDIA container runtime must not inject any.
            - name: NVIDIA_VISIBLE_DEVICES
              value: void
          resources:
            {{- toYaml $root.Values.hooks.resources | nindent 12 }}
          securityContext:
            privileged: false
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            runAsNonRoot: true
            {{- if not (kindIs "invalid" $root.Values.hooks.runAsUser) }}
            runAsUser: {{ $root.Values.hooks.runAsUser }}
            runAsGroup: {{ $root.Values.hooks.runAsUser }}
            {{- end }}
            capabilities:
              drop: [ALL]
            seccompProfile:
              type: RuntimeDefault
          volumeMounts:
            - name: tmp
              mountPath: /tmp
      volumes:
        - name: tmp
          emptyDir:
            medium: Memory
            sizeLimit: 16Mi
{{- end -}}

{{/*
compute-domains.hook.nodeSelectorFlag
  Takes: the root context.
  Returns: .Values.kubeletPlugin.nodeSelector as a label selector (`k=v,k2=v2`, sorted; keys
  set to null are left out): the GPU nodes, for the hooks' --gpu-node-selector.
*/}}
{{- define "compute-domains.hook.nodeSelectorFlag" -}}
{{- $terms := list -}}
{{- range $key, $value := .Values.kubeletPlugin.nodeSelector -}}
{{- if not (kindIs "invalid" $value) -}}
{{- $terms = append $terms (printf "%s=%s" $key $value) -}}
{{- end -}}
{{- end -}}
{{- join "," $terms -}}
{{- end -}}

{{/*
compute-domains.hook.preflightRules
  Takes: (dict "crds" (list names) "classes" (list names) "adopt" bool).
  Returns: the ClusterRole rules of the preflight hook (templates/hook-preflight.yaml says why
  each is there).
*/}}
{{- define "compute-domains.hook.preflightRules" -}}
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  resourceNames: {{ toJson .crds }}
  verbs: {{ ternary "[get, patch]" "[get]" .adopt }}
- apiGroups: [resource.k8s.io]
  resources: [deviceclasses]
  resourceNames: {{ toJson .classes }}
  verbs: {{ ternary "[get, patch]" "[get]" .adopt }}
- apiGroups: [resource.k8s.io]
  resources: [resourceslices]
  verbs: [create]
- apiGroups: [""]
  resources: [nodes]
  verbs: [list]
- apiGroups: [""]
  resources: [namespaces]
  resourceNames: [{{ .namespace | quote }}]
  verbs: [get]
- apiGroups: [apps]
  resources: [daemonsets, deployments]
  verbs: [list]
{{- end -}}

{{/*
compute-domains.hook.verifyClusterRules
  Takes: the root context.
  Returns: the verify hook's ClusterRole rules (templates/hook-verify.yaml).
*/}}
{{- define "compute-domains.hook.verifyClusterRules" -}}
- apiGroups: [""]
  resources: [nodes]
  verbs: [list]
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  resourceNames: [computedomains.resource.nvidia.com, computedomaincliques.resource.nvidia.com]
  verbs: [get]
- apiGroups: [resource.k8s.io]
  resources: [deviceclasses]
  resourceNames: [compute-domain-default-channel.nvidia.com, compute-domain-daemon.nvidia.com]
  verbs: [get]
{{- end -}}

{{/*
compute-domains.hook.verifyRules
  Takes: the root context.
  Returns: the verify hook's Role rules in the release namespace (templates/hook-verify.yaml).
*/}}
{{- define "compute-domains.hook.verifyRules" -}}
- apiGroups: [""]
  resources: [pods]
  verbs: [list]
- apiGroups: [apps]
  resources: [daemonsets, deployments]
  verbs: [list]
- apiGroups: [resource.nvidia.com]
  resources: [computedomains]
  verbs: [create]
{{- end -}}

{{/*
compute-domains.hook.migrateClusterRules
  Takes: the root context.
  Returns: the migrate hook's ClusterRole rules (templates/hook-migrate.yaml), as
  docs/migration.md lists them.
*/}}
{{- define "compute-domains.hook.migrateClusterRules" -}}
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  resourceNames: [computedomains.resource.nvidia.com, computedomaincliques.resource.nvidia.com]
  verbs: [get]
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions/status]
  resourceNames: [computedomains.resource.nvidia.com, computedomaincliques.resource.nvidia.com]
  verbs: [update]
- apiGroups: [resource.nvidia.com]
  resources: [computedomains, computedomaincliques]
  verbs: [get, list, update]
- apiGroups: [storagemigration.k8s.io]
  resources: [storageversionmigrations]
  verbs: [get, create, delete]
{{- if .Values.adopt.enabled }}
- apiGroups: [""]
  resources: [nodes]
  verbs: [list]
{{- end }}
{{- end -}}

{{/*
compute-domains.hook.migrateRules
  Takes: the root context.
  Returns: the migrate hook's Role rules in the release namespace (templates/hook-migrate.yaml):
  the snapshot ConfigMaps, and with adoption our IMEX agent pods.
*/}}
{{- define "compute-domains.hook.migrateRules" -}}
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, create, update, delete]
{{- if .Values.adopt.enabled }}
- apiGroups: [""]
  resources: [pods]
  verbs: [list]
{{- end }}
{{- end -}}

{{/*
compute-domains.hook.migrateAdoptRules
  Takes: the root context.
  Returns: the migrate hook's Role rules in the incumbent's namespace (adopt.incumbentNamespace):
  it retires the incumbent's per-domain DaemonSets and ResourceClaimTemplates there.
*/}}
{{- define "compute-domains.hook.migrateAdoptRules" -}}
- apiGroups: [apps]
  resources: [daemonsets]
  verbs: [list, patch, delete]
- apiGroups: [resource.k8s.io]
  resources: [resourceclaimtemplates]
  verbs: [list, patch, delete]
{{- end -}}

{{/*
compute-domains.hook.rollAgentsClusterRules
  Takes: the root context.
  Returns: the roll-agents hook's ClusterRole rules (templates/hook-roll-agents.yaml): which
  domain labels and cliques the nodes carry.
*/}}
{{- define "compute-domains.hook.rollAgentsClusterRules" -}}
- apiGroups: [""]
  resources: [nodes]
  verbs: [list]
{{- end -}}

{{/*
compute-domains.hook.rollAgentsRules
  Takes: the root context.
  Returns: the roll-agents hook's Role rules in the release namespace: the agent DaemonSet
  (read), pods (list, delete: the program deletes only that DaemonSet's outdated pods on idle
  nodes) and the clique objects (which nodes domains hold).
*/}}
{{- define "compute-domains.hook.rollAgentsRules" -}}
- apiGroups: [apps]
  resources: [daemonsets]
  resourceNames: [{{ include "compute-domains.imexAgent.name" . }}]
  verbs: [get]
- apiGroups: [""]
  resources: [pods]
  verbs: [list, delete]
- apiGroups: [resource.nvidia.com]
  resources: [computedomaincliques]
  verbs: [list]
{{- end -}}

{{/*
compute-domains.hook.releaseRecord
  Takes: the root context.
  Returns: the name of Helm's record of this revision (its storage driver's Secret or
  ConfigMap): the uninstall hook checks that Helm runs it.
*/}}
{{- define "compute-domains.hook.releaseRecord" -}}
{{- printf "sh.helm.release.v1.%s.v%d" .Release.Name (int .Release.Revision) -}}
{{- end -}}

{{/*
compute-domains.hook.uninstallClusterRules
  Takes: the root context.
  Returns: the uninstall hook's ClusterRole rules (templates/hook-uninstall.yaml).
*/}}
{{- define "compute-domains.hook.uninstallClusterRules" -}}
- apiGroups: [resource.nvidia.com]
  resources: [computedomains]
  verbs: [list, patch]
- apiGroups: [""]
  resources: [pods]
  verbs: [list]
- apiGroups: [""]
  resources: [nodes]
  verbs: [list, patch]
- apiGroups: [""]
  resources: [nodes/status]
  verbs: [patch]
{{- end -}}

{{/*
compute-domains.hook.uninstallRules
  Takes: the root context.
  Returns: the uninstall hook's Role rules in the release namespace (templates/hook-uninstall.yaml):
  read Helm's record of this revision and its own Job (who runs it), delete only the controller
  Deployment, the plugin and agent DaemonSets and the other hooks' Jobs.
*/}}
{{- define "compute-domains.hook.uninstallRules" -}}
- apiGroups: [""]
  resources: [secrets, configmaps]
  resourceNames: [{{ include "compute-domains.hook.releaseRecord" . }}]
  verbs: [get]
- apiGroups: [batch]
  resources: [jobs]
  resourceNames: [{{ include "compute-domains.hook.name" (dict "root" . "hook" "uninstall") }}]
  verbs: [get]
- apiGroups: [apps]
  resources: [daemonsets, deployments]
  verbs: [list]
- apiGroups: [apps]
  resources: [daemonsets, deployments]
  resourceNames:
    - {{ include "compute-domains.controller.name" . }}
    - {{ include "compute-domains.kubeletPlugin.name" . }}
    - {{ include "compute-domains.imexAgent.name" . }}
  verbs: [delete]
- apiGroups: [batch]
  resources: [jobs]
  resourceNames:
  {{- range $other := list "preflight" "migrate" "roll-agents" "verify" }}
    - {{ include "compute-domains.hook.name" (dict "root" $ "hook" $other) }}
  {{- end }}
  verbs: [delete]
# The controller's placement turn: nobody renews it once the controller is gone.
- apiGroups: [""]
  resources: [configmaps]
  resourceNames: [compute-domains-placement-turn]
  verbs: [delete]
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
