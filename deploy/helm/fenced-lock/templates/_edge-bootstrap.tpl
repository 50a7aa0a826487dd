{{/*
The edge's Envoy bootstrap. envoy/production.yaml is this rendered with the chart's
defaults (release lock, namespace lock): the helm test keeps the two equal.
*/}}
{{- define "fenced-lock.edgeBootstrap" -}}
{{- $ns := .Release.Namespace -}}
{{- $td := printf "spiffe://%s" .Values.global.trustDomain -}}
{{- $edgeSvid := printf "%s/ns/%s/sa/%s" $td $ns .Values.edge.serviceAccount -}}
{{- $arbiterId := printf "%s/ns/%s/sa/%s" $td $ns .Values.arbiter.serviceAccount -}}
{{- $arbiterHost := printf "%s-arbiter.%s.svc.%s" (include "fenced-lock.prefix" .) $ns .Values.global.clusterDomain -}}
# The lock.v1 edge, rendered by the chart (deploy/helm/fenced-lock) for trust domain
# {{ .Values.global.trustDomain }}; envoy/production.yaml is this with the chart's defaults.
#
# - Envoy's SVID and the trust bundle come from {{ if eq .Values.svid.source "spire" }}the SPIRE agent's SDS API over its Unix
#   socket (spire/agent.conf); SPIRE rotates them{{ else }}PEM files of a Secret, through SDS files that
#   watch them (svid.source: secret); whoever writes the Secret rotates them{{ end }}. Envoy applies them to new connections.
# - The lock filter comes from a file-based ECDS resource written by `lockctl grants push`
#   (shipped by your config management); a refused configuration keeps the previous one.
# - Keyed requests ring-hash on x-lock-key over the arbiters (HTTP/2).
# - Edge hardening per Envoy's edge best practices: overload manager, HTTP/2 and buffer
#   limits, header hygiene, timeouts sized for lock waits (up to 300 s) and keepalives.
#
# Arbiters act on x-lock-identity, so they admit only this edge: Envoy reaches them over
# mutual TLS with its SVID, each arbiter checks that the peer certificate's single URI SAN
# is on its --edge-id list ({{ $edgeSvid }}), and Envoy accepts only
# the arbiters' SPIFFE ID. The arbiters run as their own Deployment behind a headless
# Service (ring hash needs one endpoint per pod); they read their SVID and bundle as files
# written by spiffe-helper from the same SPIRE agent and re-read them on rotation.
node:
  id: lock-edge-${HOSTNAME}
  cluster: lock-edge
admin:
  address:
    socket_address: {address: 127.0.0.1, port_value: 9901}
overload_manager:
  refresh_interval: 0.25s
  resource_monitors:
  - name: envoy.resource_monitors.fixed_heap
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.resource_monitors.fixed_heap.v3.FixedHeapConfig
      max_heap_size_bytes: 1073741824
  - name: envoy.resource_monitors.global_downstream_max_connections
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.resource_monitors.downstream_connections.v3.DownstreamConnectionsConfig
      max_active_downstream_connections: 20000
  actions:
  - name: envoy.overload_actions.shrink_heap
    triggers:
    - name: envoy.resource_monitors.fixed_heap
      threshold: {value: 0.95}
  - name: envoy.overload_actions.stop_accepting_requests
    triggers:
    - name: envoy.resource_monitors.fixed_heap
      threshold: {value: 0.98}
layered_runtime:
  layers:
  - name: static_layer_0
    static_layer:
      overload:
        global_downstream_max_connections: 20000
static_resources:
  listeners:
  - name: lock_v1
    address:
      socket_address: {address: 0.0.0.0, port_value: 8443}
    per_connection_buffer_limit_bytes: 32768
    filter_chains:
    - transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          require_client_certificate: true
          common_tls_context:
            alpn_protocols: [h2]
            tls_params: {tls_minimum_protocol_version: TLSv1_2}
            tls_certificate_sds_secret_configs:
            - name: {{ $edgeSvid }}
              {{- include "fenced-lock.edgeSds" (list $ "svid") | nindent 14 }}
            combined_validation_context:
              # Only SVIDs of this trust domain; the filter checks the exact ID.
              default_validation_context:
                match_typed_subject_alt_names:
                - san_type: URI
                  matcher: {prefix: "{{ $td }}/"}
              validation_context_sds_secret_config:
                name: {{ $td }}
                {{- include "fenced-lock.edgeSds" (list $ "bundle") | nindent 16 }}
      filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: lock_v1
          codec_type: HTTP2
          use_remote_address: true
          normalize_path: true
          merge_slashes: true
          # Envoy writes its own XFCC (any client's is dropped) with one URI= per URI SAN of
          # the client certificate: the filter refuses a certificate with more than one.
          forward_client_cert_details: SANITIZE_SET
          set_current_client_cert_details: {uri: true}
          # Waits last up to 300 s; keepalive streams send every TTL/3 (<= 100 s).
          stream_idle_timeout: 330s
          request_timeout: 0s
          common_http_protocol_options:
            idle_timeout: 3600s
            headers_with_underscores_action: REJECT_REQUEST
            max_headers_count: 64
          http2_protocol_options:
            max_concurrent_streams: 100
            initial_stream_window_size: 65536
            initial_connection_window_size: 1048576
          # Topology stays inside: strip the arbiter's name from replies.
          route_config:
            name: lock_routes
            response_headers_to_remove: [x-lock-arbiter]
            virtual_hosts:
            - name: lock
              domains: ["*"]
              routes:
              - match: {prefix: "/lock.v1.Lock/", grpc: {}}
                route:
                  cluster: arbiters
                  timeout: 0s
                  hash_policy:
                  - header: {header_name: x-lock-key}
                  # Only failures that prove the arbiter never saw the request, on the
                  # ring's next host; never a status (a NO_QUORUM Txn may have committed).
                  retry_policy:
                    retry_on: connect-failure,refused-stream,reset-before-request
                    num_retries: 2
                    retry_host_predicate:
                    - name: envoy.retry_host_predicates.previous_hosts
                      typed_config:
                        "@type": type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate
                    host_selection_retry_max_attempts: 3
          http_filters:
          - name: lock_edge
            config_discovery:
              config_source:
                # A ConfigMap swaps its files by renaming a directory: watch the directory.
                path_config_source:
                  path: /etc/lock/ecds/lock-edge.ecds.yaml
                  watched_directory: {path: /etc/lock/ecds}
                resource_api_version: V3
              type_urls: ["type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"]
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  # /ready and /stats/prometheus only, on the pod's address for the kubelet and Prometheus;
  # the admin interface (which can change Envoy) stays on loopback.
  - name: stats
    address:
      socket_address: {address: 0.0.0.0, port_value: {{ $.Values.edge.statsPort }}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: stats
          route_config:
            name: stats
            virtual_hosts:
            - name: stats
              domains: ["*"]
              routes:
              - match: {path: /ready}
                route: {cluster: envoy_admin}
              - match: {path: /stats/prometheus}
                route: {cluster: envoy_admin}
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: arbiters
    type: STRICT_DNS
    connect_timeout: 1s
    per_connection_buffer_limit_bytes: 32768
    lb_policy: RING_HASH
    ring_hash_lb_config: {minimum_ring_size: 1024}
    # grpc.health.v1 (SERVING: store answering with an accepted epoch, not draining): a
    # dead, sealed, quorum-less or draining arbiter leaves the ring after two checks.
    health_checks:
    - timeout: 1s
      interval: 1s
      # Without traffic Envoy would check only every 60 s: an idle edge must still
      # know which arbiters serve before the first request arrives.
      no_traffic_interval: 1s
      unhealthy_threshold: 2
      healthy_threshold: 1
      grpc_health_check: {service_name: lock.v1.Lock}
    outlier_detection:
      consecutive_local_origin_failure: 2
      split_external_local_origin_errors: true
      interval: 1s
      base_ejection_time: 5s
      max_ejection_percent: 50
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        common_tls_context:
          alpn_protocols: [h2]
          # Envoy's client defaults to at most TLS 1.2: a minimum of 1.3 alone leaves no
          # version (NO_SUPPORTED_VERSIONS_ENABLED; the rehearsal caught it).
          tls_params: {tls_minimum_protocol_version: TLSv1_3, tls_maximum_protocol_version: TLSv1_3}
          tls_certificate_sds_secret_configs:
          - name: {{ $edgeSvid }}
            {{- include "fenced-lock.edgeSds" (list $ "svid") | nindent 12 }}
          combined_validation_context:
            default_validation_context:
              match_typed_subject_alt_names:
              - san_type: URI
                matcher: {exact: "{{ $arbiterId }}"}
            validation_context_sds_secret_config:
              name: {{ $td }}
              {{- include "fenced-lock.edgeSds" (list $ "bundle") | nindent 14 }}
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config:
          http2_protocol_options: {max_concurrent_streams: 1000}
    load_assignment:
      cluster_name: arbiters
      endpoints:
      - lb_endpoints:
        - endpoint: {address: {socket_address: {address: {{ $arbiterHost }}, port_value: 7400}}}
  - name: envoy_admin
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: envoy_admin
      endpoints:
      - lb_endpoints:
        - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 9901}}}
{{- if eq $.Values.svid.source "spire" }}
  - name: spire_agent
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config:
          http2_protocol_options: {}
    load_assignment:
      cluster_name: spire_agent
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              pipe: {path: /run/spire/sockets/agent.sock}
{{- end }}
{{- end -}}

{{/* One SDS source ("svid" or "bundle"): the SPIRE agent, or a watched file. */}}
{{- define "fenced-lock.edgeSds" -}}
{{- $ := index . 0 -}}
{{- $what := index . 1 -}}
sds_config:
  resource_api_version: V3
{{- if eq $.Values.svid.source "spire" }}
  api_config_source:
    api_type: GRPC
    transport_api_version: V3
    grpc_services:
    - envoy_grpc: {cluster_name: spire_agent}
{{- else }}
  path_config_source:
    path: /etc/envoy/sds-{{ $what }}.yaml
{{- end }}
{{- end -}}

{{/* The SDS files of svid.source secret: the Secret's PEM files, re-read on change. */}}
{{- define "fenced-lock.edgeSdsFiles" -}}
{{- $td := printf "spiffe://%s" .Values.global.trustDomain -}}
sds-svid.yaml: |
  resources:
  - "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret
    name: {{ printf "%s/ns/%s/sa/%s" $td .Release.Namespace .Values.edge.serviceAccount }}
    tls_certificate:
      certificate_chain: {filename: /run/svid/svid.pem}
      private_key: {filename: /run/svid/svid.key}
      watched_directory: {path: /run/svid}
sds-bundle.yaml: |
  resources:
  - "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret
    name: {{ $td }}
    validation_context:
      trusted_ca: {filename: /run/svid/bundle.pem}
      watched_directory: {path: /run/svid}
{{- end -}}
