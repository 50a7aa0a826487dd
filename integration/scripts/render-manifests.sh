#!/usr/bin/env bash
# Renders deploy/kubernetes from the Helm chart deploy/helm/fenced-lock: `helm template`
# with release `lock` in namespace `lock` and the production values
# (ci/production-values.yaml: the layout the records size, a coord cluster of five, entity
# shards e1 and e2, nine arbiters, six Envoys), split one file per component as the
# chart's templates name them (a `# file:` line sends a document elsewhere: tiers/,
# mesh/). The Istio WasmPlugin example (mesh/istio-wasmplugin.yaml) comes from
# ci/istio-values.yaml; the CRDs (crds/) are the chart's, copied byte for byte (they are
# `lockctl registry crds` output). registry/ (example CRs) and the Envoy Gateway example
# are written by hand and left alone.
#
#   integration/scripts/render-manifests.sh [OUT_DIR]    (default: deploy/kubernetes)
#
# integration/tests/helm.rs renders into a temp folder and fails when the committed files
# differ. helm: $HELM, else .deps/bin/helm (integration/scripts/install-deps.sh).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CHART="$ROOT/deploy/helm/fenced-lock"
OUT=${1:-"$ROOT/deploy/kubernetes"}
HELM=${HELM:-"$ROOT/.deps/bin/helm"}
[ -x "$HELM" ] || { echo "render-manifests: $HELM missing: run integration/scripts/install-deps.sh" >&2; exit 1; }

# The first line of every generated file; also how a stale generated file is recognised.
MARK="# Generated from the Helm chart deploy/helm/fenced-lock by integration/scripts/render-manifests.sh;"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

template() { # VALUES_FILE [helm flags...]
  local values=$1
  shift
  "$HELM" template lock "$CHART" --namespace lock --kube-version 1.37.0 \
    -f "$CHART/ci/$values" "$@"
}

# split ONLY_PREFIX VALUES: helm's documents into $tmp/out/<file>, in helm's order.
split() {
  local only=$1 values=$2
  awk -v out="$tmp/out" -v only="$only" -v mark="$MARK" -v values="$values" '
    function flush(   dest, text, n, i, lines, last) {
      if (doc == "") return
      dest = file != "" ? file : source
      if (dest == "" || (only != "" && index(dest, only) != 1)) { doc = ""; file = ""; source = ""; return }
      n = split(doc, lines, "\n")
      last = n
      while (last > 0 && lines[last] ~ /^[ \t]*$/) last--
      first = 1
      while (first <= last && lines[first] ~ /^[ \t]*$/) first++
      if (first > last) { doc = ""; file = ""; source = ""; return }
      path = out "/" dest
      if (!(path in seen)) {
        seen[path] = 1
        system("mkdir -p \"$(dirname \"" path "\")\"")
        printf "%s\n# (helm template lock deploy/helm/fenced-lock -n lock -f ci/%s); edit the chart, not this file.\n", mark, values > path
      } else {
        print "---" >> path
      }
      for (i = first; i <= last; i++) print lines[i] >> path
      close(path)
      doc = ""; file = ""; source = ""
    }
    /^---[ \t]*$/ { flush(); next }
    /^# Source: / { s = $3; sub(/^[^\/]*\/templates\//, "", s); source = s }
    /^# file: /   { file = $3; next }
    { doc = doc $0 "\n" }
    END { flush() }
  '
}

mkdir -p "$tmp/out"
template production-values.yaml --set namespace.create=true > "$tmp/production.yaml"
split "" production-values.yaml < "$tmp/production.yaml"
template istio-values.yaml > "$tmp/istio.yaml"
split "mesh/" istio-values.yaml < "$tmp/istio.yaml"
mkdir -p "$tmp/out/crds"
cp "$CHART"/crds/*.yaml "$tmp/out/crds/"

# Remove generated files the chart no longer renders, then write the new set.
mkdir -p "$OUT"
while IFS= read -r -d '' f; do
  rel=${f#"$OUT"/}
  if [ "$(head -n1 "$f")" = "$MARK" ] && [ ! -e "$tmp/out/$rel" ]; then
    rm -f "$f"
    echo "removed $rel"
  fi
done < <(find "$OUT" -name '*.yaml' -type f -print0)
(cd "$tmp/out" && find . -type f | sort) | while IFS= read -r rel; do
  rel=${rel#./}
  mkdir -p "$(dirname "$OUT/$rel")"
  cp "$tmp/out/$rel" "$OUT/$rel"
  echo "wrote $rel"
done
