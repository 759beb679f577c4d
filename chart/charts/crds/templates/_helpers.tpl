{{/*
Labels of every CRD. The CRDs belong to the whole compute-domains installation, so
app.kubernetes.io/name is the application's name, and the component says which part this is.
*/}}
{{- define "compute-domains-crds.labels" -}}
app.kubernetes.io/name: compute-domains
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: crds
app.kubernetes.io/part-of: compute-domains
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Annotations of every CRD. Argo CD sync wave -2: the CRDs come before the conversion webhook
(wave -1), whose caBundle injection needs them, and before everything else (wave 0).
Deleting a CRD deletes every object of its kind, so with keep=true nothing removes the CRDs
on its own:
- helm.sh/resource-policy: keep: `helm uninstall`, or an upgrade that turns this subchart
  off, leaves the CRDs. Argo CD 2.7 and later also honour it when an Application is deleted.
- argocd.argoproj.io/sync-options Prune=false: Argo CD does not prune the CRDs when they
  drop out of the rendered manifests (crds.enabled=false); the Application then shows them
  OutOfSync instead. Delete=false: deleting the Application leaves them, also on Argo CD
  versions that ignore Helm's annotation.
No ServerSideApply=true: these CRDs are small, so client-side apply's last-applied annotation
stays far below the 256 KiB limit that forces server-side apply on large CRDs, and the apply
mode is the Application owner's choice.
*/}}
{{- define "compute-domains-crds.annotations" -}}
argocd.argoproj.io/sync-wave: "-2"
{{- if .Values.keep }}
helm.sh/resource-policy: keep
argocd.argoproj.io/sync-options: Prune=false,Delete=false
{{- end }}
{{- end }}

{{/*
Name of the conversion webhook's Service, which the ComputeDomain CRD's conversion calls (in
the release namespace, port 443, path /convert). Contract: it depends on .Release only, so the
parent chart includes it with its own context to name the Service it renders, and both agree
whatever the charts' names; at most 63 characters, a valid Service name for any release name
Helm accepts.
*/}}
{{- define "compute-domains-crds.webhookServiceName" -}}
{{- printf "%s-cd-webhook" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end }}
