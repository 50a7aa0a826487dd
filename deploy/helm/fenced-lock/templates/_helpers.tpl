{{/*
An image reference: `repository@digest` when images.<name>.digest is set, else
`repository:tag` (tag empty: the chart's appVersion). With global.requireDigests, a
missing digest fails the render, naming the image.
Call: include "fenced-lock.image" (list $ "arbiter")
*/}}
{{- define "fenced-lock.image" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- $img := index $root.Values.images $name -}}
{{- if not $img -}}
{{- fail (printf "images.%s is not set" $name) -}}
{{- end -}}
{{- $tag := default $root.Chart.AppVersion $img.tag -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else if $root.Values.global.requireDigests -}}
{{- fail (printf "images.%s.digest is required (global.requireDigests is true): pin %s:%s by its sha256 digest" $name $img.repository $tag) -}}
{{- else -}}
{{- printf "%s:%s" $img.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* The name prefix of every component: the release name (`lock` renders lock-arbiter). */}}
{{- define "fenced-lock.prefix" -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels every object carries. Call with the root context. */}}
{{- define "fenced-lock.labels" -}}
app.kubernetes.io/part-of: fenced-lock
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/*
Every container's securityContext: non-root 65532, read-only root, no privilege
escalation, no capabilities.
*/}}
{{- define "fenced-lock.containerSecurity" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  readOnlyRootFilesystem: true
  allowPrivilegeEscalation: false
  capabilities: {drop: [ALL]}
{{- end -}}

{{/* Every pod's securityContext (fsGroup: etcd's data volume is writable by 65532). */}}
{{- define "fenced-lock.podSecurity" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  fsGroup: 65532
  seccompProfile: {type: RuntimeDefault}
{{- with .Values.global.imagePullSecrets }}
imagePullSecrets:
{{- range . }}
- {name: {{ . }}}
{{- end }}
{{- end }}
{{- end -}}

{{/* The first etcd cluster's name: lock-etcd alone, lock-etcd-coord with shards. */}}
{{- define "fenced-lock.etcd.primary" -}}
{{- if .Values.etcd.shards -}}
{{- printf "%s-etcd-coord" (include "fenced-lock.prefix" .) -}}
{{- else -}}
{{- printf "%s-etcd" (include "fenced-lock.prefix" .) -}}
{{- end -}}
{{- end -}}

{{/*
Client URLs of a cluster, comma-separated. Call: include "fenced-lock.etcd.clients"
(list $ "lock-etcd-e1" 3)
*/}}
{{- define "fenced-lock.etcd.clients" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- $members := int (index . 2) -}}
{{- $urls := list -}}
{{- range $i := until $members -}}
{{- $urls = append $urls (printf "https://%s-%d.%s.%s.svc:2379" $name $i $name $root.Release.Namespace) -}}
{{- end -}}
{{- join "," $urls -}}
{{- end -}}

{{/* The first cluster's client URLs (the arbiters' --etcd, every tool's LOCK_ETCD). */}}
{{- define "fenced-lock.etcd.primaryClients" -}}
{{- $members := .Values.etcd.members -}}
{{- include "fenced-lock.etcd.clients" (list . (include "fenced-lock.etcd.primary" .) $members) -}}
{{- end -}}

{{/*
Every etcd cluster as a list of dicts {name, short, members, role}: the first cluster,
then each entity shard. Rendered as YAML; read back with fromYaml.
*/}}
{{- define "fenced-lock.etcd.clusters" -}}
{{- $prefix := include "fenced-lock.prefix" . -}}
clusters:
- {name: {{ include "fenced-lock.etcd.primary" . }}, short: {{ ternary "coord" "" (not (empty .Values.etcd.shards)) | quote }}, members: {{ .Values.etcd.members }}, role: {{ ternary "coord" "single" (not (empty .Values.etcd.shards)) }}}
{{- range .Values.etcd.shards }}
- {name: {{ printf "%s-etcd-%s" $prefix .name }}, short: {{ .name }}, members: {{ default $.Values.etcd.shardMembers .members }}, role: shard}
{{- end }}
{{- end -}}

{{/* The env block pointing a lockctl-like tool at etcd with the certificate mounted at /etc/etcd/client. */}}
{{- define "fenced-lock.etcd.clientEnv" -}}
- {name: LOCK_ETCD_CA, value: /etc/etcd/client/ca.crt}
- {name: LOCK_ETCD_CERT, value: /etc/etcd/client/tls.crt}
- {name: LOCK_ETCD_KEY, value: /etc/etcd/client/tls.key}
{{- end -}}

{{/* Zone confinement: a required node affinity to topology.zones (when any are named). */}}
{{- define "fenced-lock.zoneAffinity" -}}
{{- if .Values.topology.zones -}}
nodeAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    nodeSelectorTerms:
    - matchExpressions:
      - key: topology.kubernetes.io/zone
        operator: In
        values: {{ toJson .Values.topology.zones }}
{{- end }}
{{- end -}}

{{/*
An even spread over the zones, hard or soft by topology.hard. Call: include
"fenced-lock.zoneSpread" (list $ "lock-arbiter")
*/}}
{{- define "fenced-lock.zoneSpread" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
topologySpreadConstraints:
- maxSkew: 1
  topologyKey: topology.kubernetes.io/zone
  {{- if $root.Values.topology.hard }}
  whenUnsatisfiable: DoNotSchedule
  {{- if gt (len $root.Values.topology.zones) 1 }}
  minDomains: {{ len $root.Values.topology.zones }}
  {{- end }}
  {{- else }}
  whenUnsatisfiable: ScheduleAnyway
  {{- end }}
  labelSelector:
    matchLabels: {app.kubernetes.io/name: {{ $name }}}
{{- end -}}

{{/*
Never two on one node (required when topology.hard, else preferred). Call: include
"fenced-lock.hostAntiAffinity" (list $ "lock-arbiter")
*/}}
{{- define "fenced-lock.hostAntiAffinity" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
podAntiAffinity:
{{- if $root.Values.topology.hard }}
  requiredDuringSchedulingIgnoredDuringExecution:
  - labelSelector:
      matchLabels: {app.kubernetes.io/name: {{ $name }}}
    topologyKey: kubernetes.io/hostname
{{- else }}
  preferredDuringSchedulingIgnoredDuringExecution:
  - weight: 100
    podAffinityTerm:
      labelSelector:
        matchLabels: {app.kubernetes.io/name: {{ $name }}}
      topologyKey: kubernetes.io/hostname
{{- end }}
{{- end -}}

{{/* The edge's SPIFFE ID, the one caller the arbiters admit. */}}
{{- define "fenced-lock.edgeId" -}}
{{- if .Values.arbiter.edgeId -}}
{{- .Values.arbiter.edgeId -}}
{{- else -}}
{{- printf "spiffe://%s/ns/%s/sa/%s" .Values.global.trustDomain .Release.Namespace .Values.edge.serviceAccount -}}
{{- end -}}
{{- end -}}

{{/*
lock-registry-sync as a native sidecar (an init container that keeps running): the
registry's resources written to the pod's own folder. Its startup probe holds the pod's
other containers until the folder holds a validated set.
*/}}
{{- define "fenced-lock.registrySync" -}}
{{- if eq .Values.registry.source "resources" }}
initContainers:
- name: registry-sync
  image: {{ include "fenced-lock.image" (list . "registrySync") }}
  imagePullPolicy: {{ .Values.global.imagePullPolicy }}
  restartPolicy: Always
  args:
  - --namespace={{ .Values.registry.resourcesNamespace }}
  - --out=/var/run/lock/registry
  - --admin-listen=0.0.0.0:{{ .Values.registry.syncAdminPort }}
  ports:
  - {name: sync-admin, containerPort: {{ .Values.registry.syncAdminPort }}}
  startupProbe:
    httpGet: {path: /healthz, port: sync-admin}
    periodSeconds: 2
    failureThreshold: 150
  resources:
    requests: {cpu: 20m, memory: 64Mi}
    limits: {memory: 256Mi}
  {{- include "fenced-lock.containerSecurity" . | nindent 2 }}
  volumeMounts:
  - {name: registry, mountPath: /var/run/lock/registry}
{{- end }}
{{- end -}}

{{/* The registry volume: the sidecar's folder, or the ConfigMap. */}}
{{- define "fenced-lock.registryVolume" -}}
- name: registry
{{- if eq .Values.registry.source "resources" }}
  emptyDir: {}
{{- else }}
  configMap: {name: {{ .Values.registry.configMap }}}
{{- end }}
{{- end -}}
