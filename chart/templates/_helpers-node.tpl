{{/*
Helpers of the node-side pods (the kubelet plugin DaemonSet with its node-init container, and
the IMEX agent DaemonSet): the node paths they mount, their security contexts, and the
arguments, environment and mounts of node-init and the fabric check. The names and labels they
share with the other components come from _helpers.tpl. Every helper is named
`compute-domains.*`, states what it takes and what it returns, and fails the render with a
message when it is called wrongly.
*/}}

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
