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
{{- $errors = append $errors "resources (resources.computeDomains.*, resources.gpus.*) is retired: this chart always serves ComputeDomains and never GPUs; remove the key. Container resources are kubeletPlugin.resources and nodeInit.resources" -}}
{{- end -}}

{{- /* Labels we own. */ -}}
{{- range $key, $_ := .Values.commonLabels -}}
{{- if or (hasPrefix "app.kubernetes.io/" $key) (hasPrefix "helm.sh/" $key) -}}
{{- $errors = append $errors (printf "commonLabels.%s: the chart sets app.kubernetes.io/* and helm.sh/* labels itself (tools select our pods by them); use a label key of your own" $key) -}}
{{- end -}}
{{- end -}}

{{- /* Node paths become hostPath volumes: absolute, resolved, no trailing junk. */ -}}
{{- $paths := dict "driverRoot" (list .Values.driverRoot "/run/nvidia/driver") "kubeletPlugin.kubeletDir" (list .Values.kubeletPlugin.kubeletDir "/var/lib/kubelet") -}}
{{- if eq .Values.fabric.backend "fake" -}}
{{- $_ := set $paths "fabric.fakeNvmlFile" (list .Values.fabric.fakeNvmlFile "/etc/compute-domains/fake-nvml.json") -}}
{{- end -}}
{{- range $key, $pair := $paths -}}
{{- $path := index $pair 0 -}}
{{- if or (not (hasPrefix "/" $path)) (contains "/../" (printf "%s/" $path)) (contains "/./" (printf "%s/" $path)) (contains "//" $path) -}}
{{- $errors = append $errors (printf "%s=%s is not an absolute, resolved path on the node: write it like %s" $key $path (index $pair 1)) -}}
{{- end -}}
{{- end -}}
{{- if eq .Values.fabric.backend "fake" -}}
{{- if or (hasSuffix "/" .Values.fabric.fakeNvmlFile) (eq (dir .Values.fabric.fakeNvmlFile) "/") -}}
{{- $errors = append $errors (printf "fabric.fakeNvmlFile=%s must name a file inside a folder of its own (the folder is mounted into node-init), e.g. /etc/compute-domains/fake-nvml.json" .Values.fabric.fakeNvmlFile) -}}
{{- end -}}
{{- end -}}

{{- /* The node selection must leave the plugin on GPU nodes only. */ -}}
{{- if and (empty .Values.kubeletPlugin.nodeSelector) (empty .Values.kubeletPlugin.affinity) -}}
{{- $errors = append $errors "kubeletPlugin.nodeSelector and kubeletPlugin.affinity are both empty: the plugin would run on every node, including nodes without GPUs; select GPU nodes, e.g. kubeletPlugin.nodeSelector={\"nvidia.com/gpu.present\": \"true\"}" -}}
{{- end -}}

{{- /* The resource.k8s.io version must exist (the helper fails itself when none is found). */ -}}
{{- $_ := include "compute-domains.resourceApiVersion" . -}}

{{- if $errors -}}
{{- fail (printf "\n\nInvalid values for the compute-domains chart:\n  - %s\n" (join "\n  - " $errors)) -}}
{{- end -}}
{{- end -}}
