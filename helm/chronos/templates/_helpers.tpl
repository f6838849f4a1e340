{{/*
Names and labels.
*/}}
{{- define "chronos.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name, at most 63 characters (DNS label). Suffixed names (-migrate) are cut to
fit as well.
*/}}
{{- define "chronos.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "chronos.migrationName" -}}
{{- printf "%s-migrate" (include "chronos.fullname" . | trunc 55 | trimSuffix "-") }}
{{- end }}

{{- define "chronos.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "chronos.labels" -}}
helm.sh/chart: {{ include "chronos.chart" . }}
app.kubernetes.io/name: {{ include "chronos.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: chronos
{{- end }}

{{/*
Selector of the Chronos nodes. The component label keeps the migration Job's pods out of the
Deployment, Service and PodDisruptionBudget selectors.
*/}}
{{- define "chronos.selectorLabels" -}}
app.kubernetes.io/name: {{ include "chronos.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: node
{{- end }}

{{- define "chronos.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "chronos.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "chronos.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/*
The Secret the pods read: the user's existingSecret or the one this chart creates.
*/}}
{{- define "chronos.secretName" -}}
{{- .Values.secrets.existingSecret | default (include "chronos.fullname" .) }}
{{- end }}

{{/*
A value as the string Chronos will parse. Helm hands numbers to templates as float64, which
toString prints in exponent notation (1000000 -> "1e+06"); whole numbers are printed as integers.
*/}}
{{- define "chronos.str" -}}
{{- if kindIs "invalid" . -}}
{{- else if kindIs "float64" . -}}
{{- if eq . (floor .) }}{{ printf "%.0f" . }}{{ else }}{{ . }}{{ end -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end }}

{{/*
The effective value of a Chronos setting: config.<ENV> if given, else Chronos' own default.
Usage: include "chronos.setting" (list $ "CHRONOS_INPUT_TOPIC")
*/}}
{{- define "chronos.setting" -}}
{{- $root := index . 0 -}}
{{- $key := index . 1 -}}
{{- $defaults := dict
      "CHRONOS_INPUT_TOPIC" "chronos-input"
      "CHRONOS_OUTPUT_TOPIC" "chronos-output"
      "CHRONOS_CONSUMER_GROUP" "chronos"
      "CHRONOS_SHUTDOWN_TIMEOUT_MS" "10000"
      "CHRONOS_HTTP_PORT" "8080"
      "CHRONOS_KAFKA_BOOTSTRAP_SERVERS" "" -}}
{{- $v := index ($root.Values.config | default dict) $key -}}
{{- if kindIs "invalid" $v -}}
{{- index $defaults $key -}}
{{- else -}}
{{- include "chronos.str" $v -}}
{{- end -}}
{{- end }}

{{- define "chronos.httpPort" -}}
{{- include "chronos.setting" (list . "CHRONOS_HTTP_PORT") | int -}}
{{- end }}

{{/*
Settings of chronos/settings.py (CHRONOS_<NAME>). Chronos refuses to start with an unknown
CHRONOS_* variable, so the chart refuses to render one.
*/}}
{{- define "chronos.knownSettings" -}}
CHRONOS_DATABASE_URL CHRONOS_SHARD_MAP CHRONOS_KAFKA_BOOTSTRAP_SERVERS CHRONOS_KAFKA_OAUTH_PROVIDER CHRONOS_INPUT_TOPIC CHRONOS_OUTPUT_TOPIC
CHRONOS_DEAD_LETTER_TOPIC CHRONOS_CONSUMER_GROUP CHRONOS_GROUP_INSTANCE_ID CHRONOS_GROUP_PROTOCOL CHRONOS_NODE_ID CHRONOS_TIMING_ADVANCE_MS
CHRONOS_HOLD_TIME_MS CHRONOS_POLL_INTERVAL_MS CHRONOS_FAILURE_DETECTION_INTERVAL_MS CHRONOS_LIVENESS_WINDOW_MS
CHRONOS_LOOKAHEAD_MS CHRONOS_DELIVERY_TIMEOUT_MS CHRONOS_CONSUME_BATCH_SIZE CHRONOS_TENANT_METRICS_TOP
CHRONOS_CLAIM_BATCH_SIZE CHRONOS_MAX_IN_FLIGHT CHRONOS_MAX_IN_FLIGHT_BYTES CHRONOS_MAX_DELAY_MS
CHRONOS_MAX_PUBLISH_ATTEMPTS CHRONOS_MAX_LATENESS_MS CHRONOS_CATCHUP_RATE CHRONOS_CATCHUP_AFTER_MS CHRONOS_EXPIRED_ACTION CHRONOS_AUDIT_TOPIC CHRONOS_DEAD_LETTER_TIMEOUT_MS
CHRONOS_SHUTDOWN_TIMEOUT_MS
CHRONOS_STATEMENT_TIMEOUT_MS CHRONOS_VACUUM_INTERVAL_MS CHRONOS_DATABASE_TCP_TIMEOUT_MS CHRONOS_DATABASE_SYNCHRONOUS_COMMIT
CHRONOS_MIGRATION_DATABASE_URL CHRONOS_LIVENESS_TIMEOUT_MS CHRONOS_INTAKE_PROCESS CHRONOS_INTAKE_NICENESS CHRONOS_HEADER_PROBE CHRONOS_HTTP_HOST
CHRONOS_HTTP_PORT CHRONOS_ADMIN_PORT CHRONOS_ADMIN_TOKEN CHRONOS_ADMIN_READ_TOKEN CHRONOS_CANCEL_TTL_MS CHRONOS_HISTORY_TTL CHRONOS_HISTORY_FIRED CHRONOS_ALLOWED_TOPICS
CHRONOS_TENANT_FROM_KEY CHRONOS_RELAY_ID_HEADER CHRONOS_RELAY_DEADLINE_HEADER
CHRONOS_LOG_LEVEL CHRONOS_LOG_FORMAT
{{- end }}

{{/* Settings that are secret (Option(..., secret=True)). */}}
{{- define "chronos.secretSettings" -}}
CHRONOS_DATABASE_URL CHRONOS_ADMIN_TOKEN CHRONOS_ADMIN_READ_TOKEN CHRONOS_MIGRATION_DATABASE_URL
{{- end }}

{{/* librdkafka pass-through prefixes. */}}
{{- define "chronos.passthroughPattern" -}}
^CHRONOS_(KAFKA|CONSUMER|PRODUCER)__[A-Z0-9_]+$
{{- end }}

{{/* Pass-through properties that carry credentials (sasl.password, ssl.key.password, ...). */}}
{{- define "chronos.credentialPattern" -}}
(PASSWORD|SECRET|JAAS|SASL_USERNAME|_KEY_PEM|_TOKEN$)
{{- end }}

{{/*
The data of the Secret the chart creates, as YAML (key: plain value). Empty when existingSecret
is used.
*/}}
{{- define "chronos.secretData" -}}
{{- $s := .Values.secrets -}}
{{- $data := dict -}}
{{- if not $s.existingSecret -}}
{{- range $key, $value := dict
      "CHRONOS_DATABASE_URL" $s.databaseUrl
      "CHRONOS_ADMIN_TOKEN" $s.adminToken
      "CHRONOS_ADMIN_READ_TOKEN" $s.adminReadToken
      "CHRONOS_KAFKA__SASL_USERNAME" $s.kafkaSaslUsername
      "CHRONOS_KAFKA__SASL_PASSWORD" $s.kafkaSaslPassword }}
{{- if $value }}{{ $_ := set $data $key (include "chronos.str" $value) }}{{ end }}
{{- end }}
{{- range $key, $value := ($s.extra | default dict) }}
{{- if hasKey $data $key }}
{{- fail (printf "secrets.extra.%s duplicates a dedicated secrets.* value" $key) }}
{{- end }}
{{- $_ := set $data $key (include "chronos.str" $value) }}
{{- end }}
{{- end -}}
{{- if $data }}{{ toYaml $data }}{{ end -}}
{{- end }}

{{/*
Change detector of the chart-created Secret for the pod template, so that changed credentials
roll the pods. A plain sha256 of the Secret would let anyone who can read pod specs test password
guesses offline at hash speed; derivePassword runs scrypt first, which makes guessing slow.
*/}}
{{- define "chronos.secretFingerprint" -}}
{{- derivePassword 1 "maximum" (include "chronos.secretData" .) "chronos" (include "chronos.fullname" .) -}}
{{- end }}

{{/*
Render-time checks. Included by every template that depends on them, so `helm template`,
`helm install` and `helm lint` all fail early with a message naming the value to fix.
*/}}
{{- define "chronos.validate" -}}
{{- $known := include "chronos.knownSettings" . | splitList "\n" | join " " | splitList " " -}}
{{- $secret := include "chronos.secretSettings" . | splitList " " -}}
{{- $passthrough := include "chronos.passthroughPattern" . -}}
{{- $credential := include "chronos.credentialPattern" . -}}
{{- range $key, $value := (.Values.config | default dict) }}
{{- if eq $key "CHRONOS_ADMIN_PORT" }}
{{- fail "config.CHRONOS_ADMIN_PORT must not be set: set admin.separatePort=true and admin.port, which the container port, the Service and the NetworkPolicy follow" }}
{{- else if has $key $secret }}
{{- fail (printf "config.%s is a secret: set it through secrets.* or secrets.existingSecret, never in config (it would land in a ConfigMap)" $key) }}
{{- else if eq $key "CHRONOS_NODE_ID" }}
{{- fail "config.CHRONOS_NODE_ID must not be set: every Chronos process needs its own node id, and each pod draws a random one" }}
{{- else if has $key $known }}
{{- else if regexMatch $passthrough $key }}
{{- if regexMatch $credential $key }}
{{- fail (printf "config.%s looks like a credential: put it in secrets.extra (or secrets.existingSecret), not in the ConfigMap" $key) }}
{{- end }}
{{- else }}
{{- fail (printf "config.%s is not a Chronos setting (known: %s, and CHRONOS_KAFKA__*, CHRONOS_CONSUMER__*, CHRONOS_PRODUCER__* pass-through properties)" $key (join ", " $known)) }}
{{- end }}
{{- end }}
{{- range $key, $value := (.Values.secrets.extra | default dict) }}
{{- if not (or (has $key $secret) (regexMatch $passthrough $key)) }}
{{- fail (printf "secrets.extra.%s is not a secret Chronos setting (allowed: %s and CHRONOS_KAFKA__*, CHRONOS_CONSUMER__*, CHRONOS_PRODUCER__*)" $key (join ", " $secret)) }}
{{- end }}
{{- end }}
{{- if not (include "chronos.setting" (list . "CHRONOS_KAFKA_BOOTSTRAP_SERVERS")) }}
{{- fail "config.CHRONOS_KAFKA_BOOTSTRAP_SERVERS is required (host:port[,host:port...] of the Kafka brokers)" }}
{{- end }}
{{- $s := .Values.secrets }}
{{- if $s.existingSecret }}
{{- if or $s.databaseUrl $s.adminToken $s.adminReadToken $s.kafkaSaslUsername $s.kafkaSaslPassword $s.extra }}
{{- fail "secrets.existingSecret is set: leave secrets.databaseUrl, adminToken, adminReadToken, kafkaSasl* and extra empty (put those keys into the existing Secret)" }}
{{- end }}
{{- else if not $s.databaseUrl }}
{{- fail "secrets.databaseUrl is required (postgresql://user:password@host:5432/db), or name a Secret holding CHRONOS_DATABASE_URL in secrets.existingSecret" }}
{{- else if not (regexMatch "^(postgresql|postgres|postgresql\\+psycopg)://" $s.databaseUrl) }}
{{- fail "secrets.databaseUrl must be a postgresql:// URL" }}
{{- end }}
{{- $port := include "chronos.setting" (list . "CHRONOS_HTTP_PORT") }}
{{- if not (regexMatch "^[0-9]+$" $port) }}
{{- fail (printf "config.CHRONOS_HTTP_PORT=%q is not a port number" $port) }}
{{- end }}
{{- if or (lt (int $port) 1) (gt (int $port) 65535) }}
{{- fail "config.CHRONOS_HTTP_PORT must be between 1 and 65535 on Kubernetes: probes, metrics and the Service need the HTTP server" }}
{{- end }}
{{- $drainMs := include "chronos.setting" (list . "CHRONOS_SHUTDOWN_TIMEOUT_MS") }}
{{- if not (regexMatch "^[0-9]+$" $drainMs) }}
{{- fail (printf "config.CHRONOS_SHUTDOWN_TIMEOUT_MS=%q is not a whole number of milliseconds" $drainMs) }}
{{- end }}
{{- $drainSeconds := div (add (int64 $drainMs) 999) 1000 }}
{{- $needed := add $drainSeconds (int64 .Values.shutdownMarginSeconds) }}
{{- if lt (int64 .Values.terminationGracePeriodSeconds) $needed }}
{{- fail (printf "terminationGracePeriodSeconds=%v is too short: the graceful drain may take CHRONOS_SHUTDOWN_TIMEOUT_MS=%s ms, so it must be at least %d s (drain + shutdownMarginSeconds=%v)" .Values.terminationGracePeriodSeconds $drainMs $needed .Values.shutdownMarginSeconds) }}
{{- end }}
{{- if and .Values.autoscaling.hpa.enabled .Values.autoscaling.keda.enabled }}
{{- fail "autoscaling.hpa and autoscaling.keda are mutually exclusive (KEDA creates its own HorizontalPodAutoscaler)" }}
{{- end }}
{{- if .Values.admin.separatePort }}
{{- if eq (int .Values.admin.port) (int $port) }}
{{- fail (printf "admin.port=%v must differ from CHRONOS_HTTP_PORT (%s), which keeps health and metrics" .Values.admin.port $port) }}
{{- end }}
{{- end }}
{{- include "chronos.validateExtras" (list . $known $secret $passthrough $credential) }}
{{- $pdb := .Values.podDisruptionBudget }}
{{- if and $pdb.enabled (not (kindIs "invalid" $pdb.minAvailable)) (ne (toString $pdb.minAvailable) "") (not (kindIs "invalid" $pdb.maxUnavailable)) (ne (toString $pdb.maxUnavailable) "") }}
{{- fail "podDisruptionBudget: set minAvailable or maxUnavailable, not both" }}
{{- end }}
{{- end }}

{{/*
Checks of the escape hatches (extraEnv, extraVolumes, sidecars, initContainers): a CHRONOS_*
variable is a setting Chronos knows, given once, and a secret one by reference only; nothing takes
a name the chart uses itself.
*/}}
{{- define "chronos.validateExtras" -}}
{{- $root := index . 0 -}}
{{- $known := index . 1 -}}
{{- $secret := index . 2 -}}
{{- $passthrough := index . 3 -}}
{{- $credential := index . 4 -}}
{{- $config := $root.Values.config | default dict -}}
{{- /* Settings the chart reads from config to render (ports, drain, the KEDA trigger's). */ -}}
{{- $rendered := list "CHRONOS_HTTP_PORT" "CHRONOS_ADMIN_PORT" "CHRONOS_SHUTDOWN_TIMEOUT_MS" "CHRONOS_INPUT_TOPIC" "CHRONOS_CONSUMER_GROUP" "CHRONOS_KAFKA_BOOTSTRAP_SERVERS" -}}
{{- $chartEnv := list "PGSSLROOTCERT" "CHRONOS_GROUP_INSTANCE_ID" "CHRONOS_KAFKA__SSL_CA_LOCATION" "CHRONOS_KAFKA__SSL_CERTIFICATE_LOCATION" "CHRONOS_KAFKA__SSL_KEY_LOCATION" -}}
{{- range $env := ($root.Values.extraEnv | default list) }}
{{- $name := $env.name }}
{{- if has $name $chartEnv }}
{{- fail (printf "extraEnv: %s is set by the chart (staticMembership, postgresCA, kafkaTLS): use those values" $name) }}
{{- else if not (hasPrefix "CHRONOS_" $name) }}
{{- else if eq $name "CHRONOS_NODE_ID" }}
{{- fail "extraEnv: CHRONOS_NODE_ID must not be set: every Chronos process needs its own node id, and each pod draws a random one" }}
{{- else if not (or (has $name $known) (regexMatch $passthrough $name)) }}
{{- fail (printf "extraEnv: %s is not a Chronos setting (known: %s, and CHRONOS_KAFKA__*, CHRONOS_CONSUMER__*, CHRONOS_PRODUCER__* pass-through properties); other names than CHRONOS_* are free" $name (join ", " $known)) }}
{{- else if has $name $rendered }}
{{- fail (printf "extraEnv: %s belongs in config: the chart reads it to render the pods, Service or autoscaler" $name) }}
{{- else if hasKey $config $name }}
{{- fail (printf "extraEnv: %s is given in config too: set it in one place" $name) }}
{{- else if and (hasKey $env "value") (or (has $name $secret) (regexMatch $credential $name)) }}
{{- fail (printf "extraEnv: %s is a secret: give it with valueFrom.secretKeyRef (or in secrets.*), never as a value in the pod spec" $name) }}
{{- end }}
{{- end }}
{{- range $volume := ($root.Values.extraVolumes | default list) }}
{{- if has $volume.name (list "tmp" "postgres-ca" "kafka-tls") }}
{{- fail (printf "extraVolumes: the name %s is the chart's own volume: choose another" $volume.name) }}
{{- end }}
{{- end }}
{{- range $container := ($root.Values.sidecars | default list) }}
{{- if eq $container.name "chronos" }}
{{- fail "sidecars: the name chronos is the node's container: choose another" }}
{{- end }}
{{- end }}
{{- range $container := ($root.Values.initContainers | default list) }}
{{- if eq $container.name "preflight" }}
{{- fail "initContainers: the name preflight is the chart's (preflight.enabled): choose another" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The KEDA lag trigger's SASL mode and TLS switch: the values given, or with "auto" the nodes' own
(config's CHRONOS_KAFKA__SECURITY_PROTOCOL and CHRONOS_KAFKA__SASL_MECHANISMS).
*/}}
{{- define "chronos.keda.sasl" -}}
{{- $mode := .Values.autoscaling.keda.kafka.sasl -}}
{{- if ne $mode "auto" -}}
{{- $mode -}}
{{- else -}}
{{- $config := .Values.config | default dict -}}
{{- $protocol := index $config "CHRONOS_KAFKA__SECURITY_PROTOCOL" | default "" | toString | upper -}}
{{- if hasPrefix "SASL_" $protocol -}}
{{- $mechanism := index $config "CHRONOS_KAFKA__SASL_MECHANISMS" | default (index $config "CHRONOS_KAFKA__SASL_MECHANISM") | default "GSSAPI" | toString | upper -}}
{{- $modes := dict "PLAIN" "plaintext" "SCRAM-SHA-256" "scram_sha256" "SCRAM-SHA-512" "scram_sha512" -}}
{{- if not (hasKey $modes $mechanism) -}}
{{- fail (printf "autoscaling.keda.kafka.sasl=auto: the nodes' SASL mechanism %s (CHRONOS_KAFKA__SASL_MECHANISMS) has no KEDA mode the chart can configure: set autoscaling.keda.kafka.sasl and authenticationRef (a TriggerAuthentication of your own), or scale with autoscaling.keda.prometheus on sum(chronos_consumer_lag_messages) instead" $mechanism) -}}
{{- end -}}
{{- index $modes $mechanism -}}
{{- else -}}
none
{{- end -}}
{{- end -}}
{{- end }}

{{- define "chronos.keda.tls" -}}
{{- $mode := .Values.autoscaling.keda.kafka.tls -}}
{{- if ne $mode "auto" -}}
{{- $mode -}}
{{- else -}}
{{- $protocol := index (.Values.config | default dict) "CHRONOS_KAFKA__SECURITY_PROTOCOL" | default "" | toString | upper -}}
{{- if has $protocol (list "SSL" "SASL_SSL") }}enable{{ else }}disable{{ end -}}
{{- end -}}
{{- end }}

{{/*
The writable /tmp of the Deployment's and the migration Job's pods (their root filesystem is
read-only).
*/}}
{{- define "chronos.tmpVolume" -}}
- name: tmp
  emptyDir:
    {{- with .Values.tmpVolume.sizeLimit }}
    sizeLimit: {{ . }}
    {{- end }}
{{- end }}

{{/* An int-or-string field: 1 stays a number, "50%" becomes a quoted string. */}}
{{- define "chronos.intOrString" -}}
{{- if regexMatch "^[0-9]+$" . }}{{ . }}{{ else }}{{ . | quote }}{{ end -}}
{{- end }}

{{/* The Postgres CA bundle: a volume, its mount and PGSSLROOTCERT (postgresCA). */}}
{{- define "chronos.postgresCA.enabled" -}}
{{- $ca := .Values.postgresCA | default dict -}}
{{- if and $ca.secretName $ca.configMapName -}}
{{- fail "postgresCA: set secretName or configMapName, not both" -}}
{{- end -}}
{{- if or $ca.secretName $ca.configMapName }}true{{ end -}}
{{- end }}

{{- define "chronos.postgresCA.volume" -}}
{{- $ca := .Values.postgresCA -}}
- name: postgres-ca
  {{- if $ca.secretName }}
  secret:
    secretName: {{ $ca.secretName }}
    items:
      - key: {{ $ca.key }}
        path: {{ $ca.key }}
  {{- else }}
  configMap:
    name: {{ $ca.configMapName }}
    items:
      - key: {{ $ca.key }}
        path: {{ $ca.key }}
  {{- end }}
{{- end }}

{{- define "chronos.postgresCA.mount" -}}
- name: postgres-ca
  mountPath: {{ .Values.postgresCA.mountPath }}
  readOnly: true
{{- end }}

{{- define "chronos.postgresCA.env" -}}
- name: PGSSLROOTCERT
  value: {{ printf "%s/%s" .Values.postgresCA.mountPath .Values.postgresCA.key | quote }}
{{- end }}

{{/* Kafka TLS files (kafkaTLS): a volume of one Secret, its mount and the librdkafka
settings pointing at the files. */}}
{{- define "chronos.kafkaTLS.enabled" -}}
{{- $tls := .Values.kafkaTLS | default dict -}}
{{- if and $tls.certificateKey (not $tls.keyKey) -}}
{{- fail "kafkaTLS: certificateKey needs keyKey (the client certificate's private key)" -}}
{{- end -}}
{{- if and $tls.keyKey (not $tls.certificateKey) -}}
{{- fail "kafkaTLS: keyKey needs certificateKey" -}}
{{- end -}}
{{- if $tls.secretName }}true{{ end -}}
{{- end }}

{{- define "chronos.kafkaTLS.volume" -}}
{{- $tls := .Values.kafkaTLS -}}
- name: kafka-tls
  secret:
    secretName: {{ $tls.secretName }}
    items:
      {{- range $key := list $tls.caKey $tls.certificateKey $tls.keyKey }}
      {{- if $key }}
      - key: {{ $key }}
        path: {{ $key }}
      {{- end }}
      {{- end }}
{{- end }}

{{- define "chronos.kafkaTLS.mount" -}}
- name: kafka-tls
  mountPath: {{ .Values.kafkaTLS.mountPath }}
  readOnly: true
{{- end }}

{{- define "chronos.kafkaTLS.env" -}}
{{- $tls := .Values.kafkaTLS -}}
{{- if $tls.caKey }}
- name: CHRONOS_KAFKA__SSL_CA_LOCATION
  value: {{ printf "%s/%s" $tls.mountPath $tls.caKey | quote }}
{{- end }}
{{- if $tls.certificateKey }}
- name: CHRONOS_KAFKA__SSL_CERTIFICATE_LOCATION
  value: {{ printf "%s/%s" $tls.mountPath $tls.certificateKey | quote }}
- name: CHRONOS_KAFKA__SSL_KEY_LOCATION
  value: {{ printf "%s/%s" $tls.mountPath $tls.keyKey | quote }}
{{- end }}
{{- end }}
