{{/*
compute-domains.imexAgent.podTemplate
  Takes: the root context.
  Returns: the IMEX agent DaemonSet's pod template (metadata and spec), at indent 0. The
  DaemonSet renders it, and its digest (sha256sum | trunc 16) goes on the DaemonSet and to
  preflight, which tells from it whether an upgrade changes the agents' pods (Helm 4's wait).
*/}}
{{- define "compute-domains.imexAgent.podTemplate" -}}
{{- $p := include "compute-domains.paths" . | fromYaml -}}
{{- $name := include "compute-domains.imexAgent.name" . -}}
metadata:
  labels:
    {{- include "compute-domains.imexAgent.labels" . | nindent 4 }}
  {{- with .Values.imexAgent.podAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  serviceAccountName: {{ $name }}
  {{- with .Values.imexAgent.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- include "compute-domains.nodePodSecurityContext" . | nindent 4 }}
  {{- with .Values.imexAgent.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  affinity:
    nodeAffinity:
      # Only nodes in an NVLink clique run IMEX; node-init labels them.
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions:
              - key: nvidia.com/gpu.clique
                operator: Exists
  {{- with .Values.imexAgent.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  resourceClaims:
    # The node's daemon device: the IMEX management device node and the clique.
    - name: daemon
      resourceClaimTemplateName: {{ include "compute-domains.imexAgent.claimTemplateName" . }}
  containers:
    - name: imex-agent
      image: {{ include "compute-domains.image" . }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      # A container that fails says why in its status: its last log lines.
      terminationMessagePolicy: FallbackToLogsOnError
      command: [computedomains]
      args:
        - imex-agent
        {{- with include "compute-domains.logArgs" $ }}{{ . | nindent 8 }}{{ end }}
        - --node-name=$(NODE_NAME)
        - --namespace=$(POD_NAMESPACE)
        - --pod-name=$(POD_NAME)
        - --pod-uid=$(POD_UID)
        - --pod-ip=$(POD_IP)
        - --driver-root={{ $p.driverRoot }}
        - --imex-dir={{ $p.imexDir }}
        - --hosts-file={{ .Values.imexAgent.hostsFile }}
        - --fabric-verdict-file={{ $p.verdictFile }}
        # An unreadable verdict file keeps IMEX as it is for as long as the plugin holds it.
        - --fault-grace-checks={{ .Values.nodeInit.faultGrace.checks }}
        - --fault-grace-seconds={{ .Values.nodeInit.faultGrace.seconds }}
        - --max-nodes-per-clique={{ .Values.maxNodesPerClique }}
        - --heartbeat-interval={{ .Values.imexAgent.heartbeatInterval }}
        - --http-bind=$(POD_IP):{{ .Values.imexAgent.httpPort }}
      env:
        - name: NODE_NAME
          valueFrom:
            fieldRef:
              fieldPath: spec.nodeName
        {{- include "compute-domains.podIdentityEnv" . | nindent 8 }}
        # IMEX needs only the management device its claim brings, no GPU.
        - name: NVIDIA_VISIBLE_DEVICES
          value: void
        {{- with .Values.imexAgent.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      ports:
        - name: http
          containerPort: {{ .Values.imexAgent.httpPort }}
          protocol: TCP
        # nvidia-imex's own ports (SERVER_PORT, IMEX_CMD_PORT), bound on the pod IP; peers
        # connect to them pod to pod. Listed for NetworkPolicies and for people reading.
        - name: imex
          containerPort: 50000
          protocol: TCP
        - name: imex-cmd
          containerPort: 50005
          protocol: TCP
      startupProbe:
        httpGet:
          path: /healthz
          port: http
        periodSeconds: 2
        failureThreshold: 60
        timeoutSeconds: 5
      livenessProbe:
        httpGet:
          path: /healthz
          port: http
        periodSeconds: 10
        failureThreshold: 3
        timeoutSeconds: 5
      # Ready once the agent serves its node, whether IMEX runs or not: IMEX's state goes
      # to the computedomains.io/IMEXReady pod condition, so an idle node is not unready.
      readinessProbe:
        httpGet:
          path: /readyz
          port: http
        periodSeconds: 5
        failureThreshold: 2
        timeoutSeconds: 5
      resources:
        {{- toYaml .Values.imexAgent.resources | nindent 8 }}
        claims:
          - name: daemon
      securityContext:
        {{- include "compute-domains.containerSecurityContext" . | nindent 8 }}
      volumeMounts:
        # The fabric verdict (read only); the IMEX folder below it is mounted writable.
        - name: run
          mountPath: {{ $p.runDir }}
          readOnly: true
        - name: imex
          mountPath: {{ $p.imexDir }}
        # nvidia-imex and nvidia-imex-ctl come from the driver installed on the node.
        - name: driver-root
          mountPath: {{ $p.driverRoot }}
          readOnly: true
          # Follows mounts the GPU operator's driver container makes after this pod started.
          mountPropagation: HostToContainer
        - name: tmp
          mountPath: /tmp
  volumes:
    - name: run
      hostPath:
        path: {{ $p.runDir }}
        type: DirectoryOrCreate
    - name: imex
      hostPath:
        path: {{ $p.imexDir }}
        type: DirectoryOrCreate
    - name: driver-root
      hostPath:
        path: {{ .Values.driverRoot }}
        type: DirectoryOrCreate
    - name: tmp
      emptyDir:
        medium: Memory
        sizeLimit: 16Mi
{{- end }}
