{{/*
compute-domains.validate
  Takes: the root context.
  Returns: nothing. Fails the render with a message that names the value and the fix when a
  retired value is set or values contradict each other. The schema checks types and names
  first; these are the checks it cannot express.
*/}}
{{- define "compute-domains.validate" -}}
{{- $errors := list -}}

{{- /* Retired values (names the NVIDIA DRA driver chart uses; people migrate with them). */ -}}
{{- if hasKey .Values "nvidiaDriverRoot" -}}
{{- $errors = append $errors (printf "nvidiaDriverRoot is retired: set driverRoot=%v instead (same meaning: where the driver is installed on the node)" .Values.nvidiaDriverRoot) -}}
{{- end -}}
{{- if hasKey .Values "resources" -}}
{{- $errors = append $errors "resources (resources.computeDomains.*, resources.gpus.*) is retired: this chart always serves ComputeDomains and never GPUs; remove the key. Container resources are kubeletPlugin.resources, nodeInit.resources, controller.resources and imexAgent.resources" -}}
{{- end -}}
{{- /* Retired values of this chart. */ -}}
{{- if hasKey .Values "fabric" -}}
{{- $errors = append $errors "fabric (fabric.backend, fabric.fakeNvmlFile) is retired: node-init always asks NVML, the libnvidia-ml.so.1 under driverRoot (the simulated cluster puts a fake one into each node's driver root); remove the key, and set driverRoot if the driver is not installed under /" -}}
{{- end -}}

{{- /* Labels we own. */ -}}
{{- range $key, $_ := .Values.commonLabels -}}
{{- if or (hasPrefix "app.kubernetes.io/" $key) (hasPrefix "helm.sh/" $key) -}}
{{- $errors = append $errors (printf "commonLabels.%s: the chart sets app.kubernetes.io/* and helm.sh/* labels itself (tools select our pods by them); use a label key of your own" $key) -}}
{{- end -}}
{{- end -}}

{{- /* Node paths become hostPath volumes: absolute, resolved, no trailing junk. */ -}}
{{- $paths := dict "driverRoot" (list .Values.driverRoot "/run/nvidia/driver") "kubeletPlugin.kubeletDir" (list .Values.kubeletPlugin.kubeletDir "/var/lib/kubelet") -}}
{{- range $key, $pair := $paths -}}
{{- $path := index $pair 0 -}}
{{- if or (not (hasPrefix "/" $path)) (contains "/../" (printf "%s/" $path)) (contains "/./" (printf "%s/" $path)) (contains "//" $path) -}}
{{- $errors = append $errors (printf "%s=%s is not an absolute, resolved path on the node: write it like %s" $key $path (index $pair 1)) -}}
{{- end -}}
{{- end -}}

{{- /* The node selection must leave the plugin on GPU nodes only. */ -}}
{{- if and (empty .Values.kubeletPlugin.nodeSelector) (empty .Values.kubeletPlugin.affinity) -}}
{{- $errors = append $errors "kubeletPlugin.nodeSelector and kubeletPlugin.affinity are both empty: the plugin would run on every node, including nodes without GPUs; select GPU nodes, e.g. kubeletPlugin.nodeSelector={\"nvidia.com/gpu.present\": \"true\"}" -}}
{{- end -}}

{{- /* The IMEX agent: Guaranteed QoS, and a hosts file it can write. */ -}}
{{- if .Values.imexAgent.enabled -}}
{{- $res := .Values.imexAgent.resources -}}
{{- $limits := $res.limits | default dict -}}
{{- $requests := $res.requests | default dict -}}
{{- range $kind := list "cpu" "memory" -}}
{{- if not (hasKey $limits $kind) -}}
{{- $errors = append $errors (printf "imexAgent.resources.limits.%s is not set: the IMEX agent must be in the Guaranteed QoS class (requests equal to limits for cpu and memory), so that it is the last pod the kubelet evicts under pressure; set both, e.g. imexAgent.resources.limits.%s=%s and the same request" $kind $kind (ternary "200m" "384Mi" (eq $kind "cpu"))) -}}
{{- else if and (hasKey $requests $kind) (ne (toString (index $requests $kind)) (toString (index $limits $kind))) -}}
{{- $errors = append $errors (printf "imexAgent.resources.requests.%s=%v differs from imexAgent.resources.limits.%s=%v: the IMEX agent must be in the Guaranteed QoS class (requests equal to limits), so that it is the last pod the kubelet evicts; make them equal" $kind (index $requests $kind) $kind (index $limits $kind)) -}}
{{- end -}}
{{- end -}}
{{- $hosts := .Values.imexAgent.hostsFile -}}
{{- $imexDir := (include "compute-domains.paths" . | fromYaml).imexDir -}}
{{- if not (or (eq $hosts "/etc/hosts") (and (hasPrefix (printf "%s/" $imexDir) $hosts) (not (contains "/../" (printf "%s/" $hosts))) (not (hasSuffix "/" $hosts)))) -}}
{{- $errors = append $errors (printf "imexAgent.hostsFile=%s is neither the pod's own /etc/hosts (what real IMEX resolves peer names through) nor a file in the node's IMEX folder %s/ (where a test double may read it); everything else is the container's read-only root filesystem. Use /etc/hosts" $hosts $imexDir) -}}
{{- end -}}
{{- /* The plugin takes a status without a heartbeat for this long as a dead agent's. */ -}}
{{- if gt (mulf 2 .Values.imexAgent.heartbeatInterval) (float64 .Values.kubeletPlugin.imexStatusMaxAge) -}}
{{- $errors = append $errors (printf "imexAgent.heartbeatInterval=%v is more than half of kubeletPlugin.imexStatusMaxAge=%v: one late heartbeat would make a live IMEX agent look dead and stop prepares on its node; raise kubeletPlugin.imexStatusMaxAge to at least %v" .Values.imexAgent.heartbeatInterval .Values.kubeletPlugin.imexStatusMaxAge (mulf 2 .Values.imexAgent.heartbeatInterval)) -}}
{{- end -}}
{{- end -}}

{{- /* verify judges after verify.timeoutSeconds; Kubernetes stops a hook at its deadline. */ -}}
{{- if and .Values.hooks.enabled .Values.verify.enabled (ge (float64 .Values.verify.timeoutSeconds) (float64 .Values.hooks.activeDeadlineSeconds)) -}}
{{- $errors = append $errors (printf "verify.timeoutSeconds=%v is not below hooks.activeDeadlineSeconds=%v: Kubernetes would stop the verify hook before it reports what it waited for; raise hooks.activeDeadlineSeconds (e.g. to %v) or lower verify.timeoutSeconds, and give helm a --timeout longer than both" .Values.verify.timeoutSeconds .Values.hooks.activeDeadlineSeconds (add (int .Values.verify.timeoutSeconds) 300)) -}}
{{- end -}}
{{- /* A webhook replica serves a rotated Secret only at its next check, up to resyncInterval
later; each rotation step waits rotationGrace, which must outlast that and a round (60 s, the
webhook's own check: tlspolicy.ROUND_MARGIN). */ -}}
{{- if and .Values.webhook.enabled (not .Values.webhook.certManager.enabled) -}}
{{- $grace := toString .Values.webhook.tls.rotationGrace -}}
{{- $unit := regexFind "[smhd]$" $grace -}}
{{- $graceSeconds := mulf (float64 (trimSuffix $unit $grace)) (index (dict "s" 1 "m" 60 "h" 3600 "d" 86400) $unit) -}}
{{- $least := addf (float64 .Values.webhook.resyncInterval) 60 -}}
{{- if le $graceSeconds $least -}}
{{- $errors = append $errors (printf "webhook.tls.rotationGrace=%s does not exceed webhook.resyncInterval=%v by more than 60 seconds: a webhook replica serves a rotated certificate (and puts a missing CA back into the caBundles) only at its next check of the Secret, up to resyncInterval later, so a CA rotation step could serve a certificate some API server does not trust yet, or drop a CA still in use; raise webhook.tls.rotationGrace above %vs or lower webhook.resyncInterval" $grace .Values.webhook.resyncInterval $least) -}}
{{- end -}}
{{- end -}}
{{- if hasKey (.Values.webhook.podDisruptionBudget | default dict) "minAvailable" -}}
{{- $errors = append $errors "webhook.podDisruptionBudget.minAvailable is retired: with one replica it blocked every drain; set webhook.podDisruptionBudget.maxUnavailable (default 1) instead" -}}
{{- end -}}

{{- /* Optional objects that would come out empty. */ -}}
{{- if .Values.criticalPodsQuota.enabled -}}
{{- $classes := list .Values.kubeletPlugin.priorityClassName -}}
{{- if .Values.controller.enabled }}{{ $classes = append $classes .Values.controller.priorityClassName }}{{ end -}}
{{- if .Values.imexAgent.enabled }}{{ $classes = append $classes .Values.imexAgent.priorityClassName }}{{ end -}}
{{- if not ($classes | compact) -}}
{{- $errors = append $errors "criticalPodsQuota.enabled=true, but no component has a priorityClassName, so the quota would admit nothing: set one (e.g. kubeletPlugin.priorityClassName=system-node-critical) or set criticalPodsQuota.enabled=false" -}}
{{- end -}}
{{- end -}}

{{- /* The resource.k8s.io version must exist (the helper fails itself when none is found). */ -}}
{{- $_ := include "compute-domains.resourceApiVersion" . -}}

{{- if $errors -}}
{{- fail (printf "\n\nInvalid values for the compute-domains chart:\n  - %s\n" (join "\n  - " $errors)) -}}
{{- end -}}
{{- end -}}
