#!/usr/bin/env bash
# `make images`: an OCI image for every binary a manifest runs, built from scratch with
# umoci (no base image can be pulled and no container daemon runs), into one OCI layout.
#
#   build-images.sh [--profile release|debug] [--out DIR] [--only a,b] [--fixtures] [--push PREFIX]
#
# Each image holds one binary at /usr/local/bin, exactly the shared libraries `ldd` says it
# loads (at the paths the dynamic linker looks for them), /etc/passwd and /etc/group naming
# the non-root user 65532, /etc/nsswitch.conf, the CA bundle, and an empty /tmp. Nothing else:
# no shell, no package manager. It runs as 65532:65532 and writes nothing to its root, so a
# read-only root filesystem works. OCI labels name the source, the revision and the version.
#
# Reproducible: every file's time is the commit's time (SOURCE_DATE_EPOCH), owners are 0:0,
# the image has no history and its `created` is the commit's time, so one commit built twice
# on one machine gives the same digests (tests/images.rs builds twice and compares).
#
# The filter is a wasm OCI artifact in the layout Istio's WasmPlugin (`oci://`) and Envoy
# Gateway's EnvoyExtensionPolicy (`image:`) pull: one layer holding /plugin.wasm (their
# "compat" image variant). The same image mounts as a Kubernetes image volume.
#
# --fixtures adds etcd and Envoy images made the same way from the binaries the tests use
# (.deps/bin): the chart's rehearsal runs them. They are test fixtures, not product.
#
# Writes DIR/oci (the layout; tags NAME:VERSION), DIR/digests.txt (NAME VERSION DIGEST) and
# DIR/values-digests.yaml (the chart's `images.<name>.digest` values; the fixtures' in
# DIR/values-fixtures.yaml), and prints each digest.
# --push PREFIX copies each product image to PREFIX/NAME:VERSION with skopeo.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PROFILE=release
OUT="$ROOT/target/images"
ONLY=""
FIXTURES=""
PUSH=""
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) PROFILE="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    --fixtures) FIXTURES=1; shift ;;
    --push) PUSH="$2"; shift 2 ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "build-images.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

for tool in umoci ldd strip; do
  command -v "$tool" >/dev/null 2>&1 || {
    echo "build-images.sh: $tool not found: run integration/scripts/install-deps.sh" >&2; exit 1; }
done

VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -n1)
REVISION=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
# The commit's time, unless the caller fixes another (the reproducible-builds convention).
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || echo 0)}
CREATED=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
SOURCE_URL="https://github.com/fenced-lock/fenced-lock"
BIN_DIR="$ROOT/target/$PROFILE"
WASM="$ROOT/target/wasm32-wasip1/$PROFILE/lock_filter.wasm"
LAYOUT="$OUT/oci"

# name | file the image runs (or carries) | what it is
PRODUCT=(
  "fenced-lock-arbiter|$BIN_DIR/arbiter|the arbiter"
  "fenced-lock-admin|$BIN_DIR/lock-admin|lock-admin: force release and the explorer"
  "fenced-lock-audit|$BIN_DIR/lock-audit|the audit tailer and exporter"
  "fenced-lock-webhook|$BIN_DIR/lock-webhook|the registry's admission webhook"
  "fenced-lock-registry-sync|$BIN_DIR/lock-registry-sync|applied LockClass/LockGrant/Namespace/PauseTestResult resources to the registry folder the arbiters read"
  "fenced-lock-lockctl|$BIN_DIR/lockctl|the operations image for Jobs: epoch init, roles, defrag, register"
  "fenced-lock-pause-test|$BIN_DIR/pause-test|the pause-test kit"
  "fenced-lock-filter|$WASM|the edge filter (wasm OCI artifact)"
)
FIXTURE=(
  "fenced-lock-test-etcd|$ROOT/.deps/bin/etcd|test fixture: etcd as the tests run it"
  "fenced-lock-test-envoy|$ROOT/.deps/bin/envoy|test fixture: Envoy as the tests run it"
)
images=("${PRODUCT[@]}")
[ -n "$FIXTURES" ] && images+=("${FIXTURE[@]}")

wanted() {
  [ -z "$ONLY" ] && return 0
  [[ ",$ONLY," == *",$1,"* ]]
}

mkdir -p "$OUT"
rm -rf "$LAYOUT"
mkdir -p "$LAYOUT"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Copy FILE into ROOTFS at the same path, resolving links (the image has no link farm).
place() {
  local file="$1" rootfs="$2"
  mkdir -p "$rootfs$(dirname "$file")"
  cp -L "$file" "$rootfs$file"
  chmod 0755 "$rootfs$file"
}

# The shared objects ldd says BIN loads: each resolved path, and the loader itself.
libraries() {
  ldd "$1" 2>/dev/null | awk '
    /=> \// { print $3; next }
    /^\t\// { print $1 }'
}

base_files() {
  local rootfs="$1"
  mkdir -p "$rootfs/etc/ssl/certs" "$rootfs/tmp"
  chmod 1777 "$rootfs/tmp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' \
    >"$rootfs/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
  # Host names through /etc/hosts (Kubernetes writes it) and DNS; glibc >= 2.34 has both
  # lookups built in, so no libnss_* module is needed.
  printf 'hosts: files dns\n' >"$rootfs/etc/nsswitch.conf"
  if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
  fi
}

: >"$OUT/digests.txt"
{
  echo "# The test fixtures' images (etcd, Envoy), for the rehearsal: build-images.sh --fixtures."
  echo "images:"
} >"$OUT/values-fixtures.yaml"
{
  echo "# Written by integration/scripts/build-images.sh (make images) at $REVISION ($PROFILE)."
  echo "# Pins every image by digest: helm install ... -f $OUT/values-digests.yaml"
  echo "images:"
} >"$OUT/values-digests.yaml"

for entry in "${images[@]}"; do
  IFS='|' read -r name file what <<<"$entry"
  wanted "$name" || continue
  [ -f "$file" ] || { echo "build-images.sh: $file not found (build it first: make images does)" >&2; exit 1; }
  # One layout per image (an OCI layout's tags are plain names, so one image each keeps
  # NAME:VERSION unambiguous): $OUT/oci/NAME, tag VERSION.
  image="$LAYOUT/$name"
  bundle="$work/$name"
  umoci init --layout "$image"
  umoci new --image "$image:build"
  umoci unpack --image "$image:build" "$bundle" >/dev/null
  rootfs="$bundle/rootfs"
  entrypoint=()
  if [ "$name" = fenced-lock-filter ]; then
    cp "$file" "$rootfs/plugin.wasm"
    chmod 0644 "$rootfs/plugin.wasm"
  else
    base_files "$rootfs"
    target="/usr/local/bin/$(basename "$file")"
    mkdir -p "$rootfs/usr/local/bin"
    # Debug symbols are not shipped; strip is deterministic for one input.
    strip --strip-debug -o "$rootfs$target" "$(readlink -f "$file")"
    chmod 0755 "$rootfs$target"
    while read -r lib; do
      [ -n "$lib" ] && place "$lib" "$rootfs"
    done < <(libraries "$(readlink -f "$file")")
    entrypoint=(--config.entrypoint "$target")
  fi
  # Every time is the commit's; the owner of every file is root (the process is not).
  find "$rootfs" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
  umoci repack --history.created "$CREATED" --history.created_by "integration/scripts/build-images.sh" \
    --history.comment "$what" --image "$image:build" "$bundle" >/dev/null
  config=(--no-history --image "$image:build" --created "$CREATED" --os linux --architecture amd64
    --config.label "org.opencontainers.image.source=$SOURCE_URL"
    --config.label "org.opencontainers.image.revision=$REVISION"
    --config.label "org.opencontainers.image.version=$VERSION"
    --config.label "org.opencontainers.image.title=$name"
    --config.label "org.opencontainers.image.description=$what"
    --manifest.annotation "org.opencontainers.image.source=$SOURCE_URL"
    --manifest.annotation "org.opencontainers.image.revision=$REVISION"
    --manifest.annotation "org.opencontainers.image.version=$VERSION"
    --manifest.annotation "org.opencontainers.image.created=$CREATED")
  if [ "$name" != fenced-lock-filter ]; then
    config+=(--config.user 65532:65532 --config.workingdir / "${entrypoint[@]}"
      --config.env "PATH=/usr/local/bin")
  fi
  umoci config "${config[@]}" --tag "$VERSION"
  umoci rm --image "$image:build"
  umoci gc --layout "$image"
  rm -rf "$bundle"
  digest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' "$image/index.json")
  echo "$name $VERSION $digest" >>"$OUT/digests.txt"
  # The chart's value for this image: images.<key> (fixtures: etcd and envoy, in a file of
  # their own, since a real install runs upstream etcd and Envoy images).
  case "$name" in
    fenced-lock-pause-test) key=pauseTest ;;
    fenced-lock-registry-sync) key=registrySync ;;
    fenced-lock-test-*) key=${name#fenced-lock-test-} ;;
    *) key=${name#fenced-lock-} ;;
  esac
  values="$OUT/values-digests.yaml"
  [[ "$name" == fenced-lock-test-* ]] && values="$OUT/values-fixtures.yaml"
  {
    printf '  %s:\n' "$key"
    if [ -n "$PUSH" ] || [[ "$name" == fenced-lock-test-* ]]; then
      printf '    repository: "%s/%s"\n' "${PUSH:-fenced-lock.test}" "$name"
    fi
    printf '    tag: "%s"\n    digest: "%s"\n' "$VERSION" "$digest"
  } >>"$values"
  echo "$name:$VERSION $digest"
  if [ -n "$PUSH" ] && [[ "$name" != fenced-lock-test-* ]]; then
    skopeo copy "oci:$image:$VERSION" "docker://$PUSH/$name:$VERSION"
  fi
done
