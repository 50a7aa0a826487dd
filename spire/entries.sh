#!/usr/bin/env bash
# Registration entries: which workloads get which SPIFFE IDs. Run against the SPIRE server
# (kubectl exec into it, or with the server's admin socket). The IDs here must match the
# LockGrant documents of the registry exactly: the filter compares the whole SPIFFE ID.
set -euo pipefail
SPIRE_SERVER=${SPIRE_SERVER:-spire-server}
PARENT=${PARENT:-spiffe://example.org/spire/agent/k8s_psat/prod}

# The lock edge (Envoy). Its SVID is the listener certificate (SDS) and the client
# certificate it presents to the arbiters, which admit only this ID (--edge-id).
"$SPIRE_SERVER" entry create \
  -parentID "$PARENT" \
  -spiffeID spiffe://example.org/ns/lock/sa/edge \
  -selector k8s:ns:lock -selector k8s:sa:edge \
  -dns lock-edge.lock.svc

# The arbiters. Their SVID is the certificate of their mTLS listener (files written by
# spiffe-helper: --tls-cert/--tls-key/--tls-bundle); Envoy accepts only this ID upstream.
"$SPIRE_SERVER" entry create \
  -parentID "$PARENT" \
  -spiffeID spiffe://example.org/ns/lock/sa/arbiter \
  -selector k8s:ns:lock -selector k8s:sa:arbiter \
  -dns lock-arbiter.lock.svc

# A sample workload: the payments ledger writer. Its grant (registry):
#   kind: LockGrant
#   spec: {spiffeId: spiffe://example.org/ns/pay/sa/ledger, prefixes: [pay/ledger]}
"$SPIRE_SERVER" entry create \
  -parentID "$PARENT" \
  -spiffeID spiffe://example.org/ns/pay/sa/ledger \
  -selector k8s:ns:pay -selector k8s:sa:ledger
