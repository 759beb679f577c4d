{{/*
Helpers of the hook Jobs (hook-*.yaml): the names, annotations, Job and RBAC objects every hook
renders, and the rules each hook's roles grant. The names and labels they share with the
components come from _helpers.tpl. Every helper is named `compute-domains.*`, states what it
takes and what it returns, and fails the render with a message when it is called wrongly.
*/}}

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
