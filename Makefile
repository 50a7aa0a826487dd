# The two commands a newcomer needs: `make run` and `make test`. Both install what is
# missing first (integration/scripts/install-deps.sh, idempotent).

SHELL := /bin/bash
CARGO ?= cargo
RUN_DIR := .run
WASM := target/wasm32-wasip1/release/lock_filter.wasm

.DEFAULT_GOAL := help
.PHONY: help deps build wasm run stop test lint unit e2e e2e-kube gate soak bench profile heap-profile fuzz docs docs-screenshots images clean

# `make soak`: minutes of gate rounds.
SOAK_MINUTES ?= 65
# `make fuzz`: seconds per fuzz target.
FUZZ_SECONDS ?= 60
# `make heap-profile`: queued waiters in each of its two runs.
HEAP_WAITERS ?= 2000
# `make gate`: how long the workers run under faults, and extra `gate run` flags.
GATE_SECONDS ?= 120
GATE_ARGS ?=
# `make run`: entity shards beside the coord cluster (0: one etcd cluster).
SHARDS ?= 0
# The etcd line the tests, the gate and the bench run: 3.5 (Debian's) or 3.6 (built from the
# Go module proxy by install-deps.sh). `make gate ETCD=3.6`.
ETCD ?= 3.5
export LOCK_ETCD_LINE := $(ETCD)
# `make images`: a registry prefix to copy the images to (skopeo), e.g. registry.example/lock.
PUSH ?=

help: ## Show the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

deps: ## Install protoc, the wasm target, etcd (trixie) and Envoy 1.40.0 (idempotent)
	@bash integration/scripts/install-deps.sh

wasm: deps ## Build the edge filter (lock_filter.wasm; the debug build is the boundary tests' switchable one)
	$(CARGO) build -p lock-filter --target wasm32-wasip1 --release
	$(CARGO) build -p lock-filter --target wasm32-wasip1

build: deps wasm ## Build every binary, the examples and the filter
	$(CARGO) build --workspace --bins --examples

run: build stop ## Bring up etcd, two arbiters and Envoy with the filter; print how to take a lock (SHARDS=2: coord + 2 entity clusters)
	@mkdir -p $(RUN_DIR)
	@rm -f $(RUN_DIR)/stack/ready
	@setsid nohup target/debug/devstack --dir $(RUN_DIR)/stack --shards $(SHARDS) >$(RUN_DIR)/devstack.log 2>&1 < /dev/null & echo $$! > $(RUN_DIR)/devstack.pid
	@for i in $$(seq 1 120); do \
	  if [ -f $(RUN_DIR)/stack/ready ]; then cat $(RUN_DIR)/stack/ready; exit 0; fi; \
	  if ! kill -0 $$(cat $(RUN_DIR)/devstack.pid) 2>/dev/null; then \
	    echo "the stack failed to start:"; tail -n 40 $(RUN_DIR)/devstack.log; exit 1; fi; \
	  sleep 0.5; \
	done; echo "the stack did not become ready in 60 s; see $(RUN_DIR)/devstack.log"; exit 1

stop: ## Stop the stack started by `make run`
	@if [ -f $(RUN_DIR)/devstack.pid ]; then \
	  pid=$$(cat $(RUN_DIR)/devstack.pid); \
	  kill -TERM -- -$$pid 2>/dev/null || true; \
	  for i in $$(seq 1 40); do kill -0 $$pid 2>/dev/null || break; sleep 0.25; done; \
	  kill -KILL -- -$$pid 2>/dev/null || true; \
	  rm -f $(RUN_DIR)/devstack.pid; echo "stack stopped"; \
	fi

lint: deps ## cargo fmt --check and clippy -D warnings (native and wasm)
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p lock-filter --target wasm32-wasip1 -- -D warnings

unit: deps ## Unit and property tests (no processes)
	$(CARGO) test --workspace --lib --bins

e2e: build ## End-to-end tests against real etcd, arbiters and Envoy
	$(CARGO) test -p lock-integration -p lock-gate -p lock-pause-test --tests

e2e-kube: build ## Against a real kube-apiserver (built once per machine, ~6-12 min): the CRDs, the webhook, lock-registry-sync (applied grants reach the arbiters and Envoy)
	@bash integration/scripts/install-deps.sh kube
	$(CARGO) test -p lock-integration --test kube_sync -- --ignored

test: deps lint build ## Everything: lint, unit, property and end-to-end tests, the client conformance suite (ETCD=3.6: on etcd 3.6)
	$(CARGO) test --workspace --no-fail-fast

gate: build ## Release gate: faults on 3 etcd members, 2 arbiters, Envoy; then shard moves on coord + entity clusters; histories checked (GATE_SECONDS=120, ETCD=3.6)
	target/debug/gate run --seconds $(GATE_SECONDS) $(GATE_ARGS)
	target/debug/gate shards

soak: build ## The gate for SOAK_MINUTES (65: rounds must fit inside it, about an hour of them), round after round on one long-lived stack (arbiter RSS and etcd size per round); one line per round in soak.log
	target/debug/gate soak --minutes $(SOAK_MINUTES) --long-lived --log soak.log

bench: deps ## Side-by-side benchmark (release build): writes bench-results/latest.md
	$(CARGO) build --release -p lock-filter -p lock-noop-filter --target wasm32-wasip1
	$(CARGO) build --release --workspace
	target/release/bench --out bench-results

profile: deps ## The arbiter's CPU by function and context switches per RPC during a bench cell (perf; PROFILE_CONCURRENCY=64): bench-results/profile/
	@bash integration/scripts/install-deps.sh perf
	$(CARGO) build --release -p lock-filter --target wasm32-wasip1
	$(CARGO) build --profile profiling -p lock-arbiter -p lock-bench -p lockctl -p lock-integration
	bash integration/scripts/profile-arbiter.sh

heap-profile: deps ## The arbiter's heap by allocation site with HEAP_WAITERS queued (2000), all heads and ten per key (dhat)
	$(CARGO) build --release -p lock-filter --target wasm32-wasip1
	$(CARGO) build --release --target-dir target/dhat -p lock-arbiter --features dhat-heap
	$(CARGO) build --release --target-dir target/dhat -p lock-bench -p lockctl
	mkdir -p bench-results/heap
	for k in 1 10; do \
	  LOCK_DHAT_FILE=$(CURDIR)/bench-results/heap/waiters-per-key-$$k.json \
	  LOCK_FILTER_WASM=$(CURDIR)/target/wasm32-wasip1/release/lock_filter.wasm \
	  target/dhat/release/bench --out bench-results/heap --only memory --memory-holds 5000 \
	    --memory-waiters $(HEAP_WAITERS) --memory-waiters-per-key $$k || exit 1; \
	  python3 integration/scripts/dhat_top.py bench-results/heap/waiters-per-key-$$k.json eb 25 \
	    > bench-results/heap/waiters-per-key-$$k.txt; done
	@echo "heap by site at the waiters' steady state: bench-results/heap/*.txt (the peak: dhat_top.py FILE gb)"

fuzz: ## libFuzzer on the filter's request decoding and config parsing (FUZZ_SECONDS=60 per target)
	@bash integration/scripts/install-deps.sh fuzz
	cd filter/fuzz && for t in request_body filter_config; do \
	  $(CARGO) +nightly fuzz run $$t -- -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 || exit 1; done

docs: deps ## The manual: regenerate its reference pages (and deploy/kubernetes from the chart), build the book into target/book
	$(CARGO) run -q -p lock-integration --bin docsgen -- write
	.deps/bin/mdbook build docs
	@echo "the book: target/book/index.html"

# No background networking: this machine's network is closed, and Chromium would try.
CHROMIUM_SHOT := chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync --window-size=1280,1600

docs-screenshots: docs ## Headless-Chromium screenshots of the book's front page and the errors page (docs/screenshots/, committed)
	mkdir -p docs/screenshots
	$(CHROMIUM_SHOT) --screenshot=docs/screenshots/front-page.png file://$(CURDIR)/target/book/index.html
	$(CHROMIUM_SHOT) --screenshot=docs/screenshots/errors-page.png file://$(CURDIR)/target/book/reference/errors.html

images: deps ## OCI images from scratch for every binary the chart runs, and the filter as a wasm OCI artifact (release, reproducible): target/images, digests printed; PUSH=prefix copies them
	$(CARGO) build --release -p lock-filter --target wasm32-wasip1
	$(CARGO) build --release -p lock-arbiter -p lock-force -p lock-audit -p lock-kube -p lockctl -p lock-pause-test --bins
	bash integration/scripts/build-images.sh --profile release --out target/images $(if $(PUSH),--push $(PUSH))

clean: stop ## Remove build output and the run folder (keeps .deps)
	$(CARGO) clean
	rm -rf $(RUN_DIR)
