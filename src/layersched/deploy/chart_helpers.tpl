{{/* The Kubernetes version the objects are for: kubernetesVersion, else the cluster's. */}}
{{- define "layersched.kubeVersion" -}}
{{- $v := toString .Values.kubernetesVersion | default .Capabilities.KubeVersion.Version | trimPrefix "v" -}}
{{- if not (regexMatch "^1\\.[0-9]+(\\.[0-9]+)?([-+].*)?$" $v) -}}
{{- fail (printf "kubernetesVersion %q is not a Kubernetes version: write it like 1.37 or 1.37.2" $v) -}}
{{- end -}}
{{- $v -}}
{{- end -}}

{{/* Its minor, checked against what the chart renders. */}}
{{- define "layersched.minor" -}}
{{- $minor := (semver (include "layersched.kubeVersion" .)).Minor | int -}}
{{- if or (lt $minor @OLDEST@) (gt $minor @NEWEST@) -}}
{{- fail (printf "kubernetesVersion: Kubernetes 1.%d: the chart installs on 1.@OLDEST@ to 1.@NEWEST@; older clusters install with `layersched deploy overlay --kubernetes-version` (docs/deploy.md)" $minor) -}}
{{- end -}}
{{- if and (eq .Values.scheduler "plugin") (lt $minor @PLUGIN@) -}}
{{- fail (printf "scheduler: plugin on Kubernetes 1.%d: the LayerLocality plugin is built for kube-scheduler 1.@PLUGIN@ and newer; use scheduler: extender" $minor) -}}
{{- end -}}
{{- if and (eq .Values.scheduler "plugin") (not (has .Values.strategy (list @PLUGIN_STRATEGIES@))) -}}
{{- fail (printf "strategy: %s with scheduler: plugin: the LayerLocality plugin scores @PLUGIN_STRATEGIES_TEXT@; use scheduler: extender for the others" .Values.strategy) -}}
{{- end -}}
{{- $minor -}}
{{- end -}}

{{/* An image reference: repository@digest, else repository:tag, else the default tag. */}}
{{- define "layersched.reference" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (.image.tag | default .tag) -}}
{{- end -}}
{{- end -}}

{{/* The layersched image (extender and agent); its tag defaults to the chart's appVersion. */}}
{{- define "layersched.image" -}}
{{- include "layersched.reference" (dict "image" .Values.image "tag" .Chart.AppVersion) -}}
{{- end -}}

{{/* kube-scheduler's: kubeScheduler.image when it names a repository; else, with the
plugin, layersched's build for the cluster's minor (kubeScheduler.plugin.images, by digest
once a release wrote it); else upstream's of the cluster's version. A tag "" is the
published build's tag (plugin) or the version's, the newest patch we know of a bare minor. */}}
{{- define "layersched.kubeSchedulerImage" -}}
{{- $v := include "layersched.kubeVersion" . -}}
{{- $sv := semver $v -}}
{{- $patches := dict @PATCHES@ -}}
{{- $given := regexMatch "^1\\.[0-9]+\\.[0-9]+" $v -}}
{{- $patch := ternary (toString $sv.Patch) (get $patches (toString $sv.Minor)) $given -}}
{{- $tag := printf "v1.%d.%s" $sv.Minor $patch -}}
{{- $image := .Values.kubeScheduler.image -}}
{{- if eq .Values.scheduler "plugin" -}}
{{- $minor := printf "1.%d" $sv.Minor -}}
{{- $published := get .Values.kubeScheduler.plugin.images $minor -}}
{{- if $published -}}
{{- $tag = $published.tag -}}
{{- if not $image.repository -}}
{{- $image = dict "repository" .Values.kubeScheduler.plugin.repository "tag" $published.tag "digest" ($published.digest | default "") -}}
{{- end -}}
{{- else if not $image.repository -}}
{{- fail (printf "scheduler: plugin on Kubernetes %s: layersched publishes its kube-scheduler (with the LayerLocality plugin) for %s only (kubeScheduler.plugin.images); set kubeScheduler.image to a build of your own for %s, or use scheduler: extender" $minor (keys .Values.kubeScheduler.plugin.images | sortAlpha | join ", ") $minor) -}}
{{- end -}}
{{- else if not $image.repository -}}
{{- $image = dict "repository" "@UPSTREAM@" "tag" $image.tag "digest" $image.digest -}}
{{- end -}}
{{- include "layersched.reference" (dict "image" $image "tag" $tag) -}}
{{- end -}}
