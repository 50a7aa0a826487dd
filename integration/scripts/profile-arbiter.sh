#!/usr/bin/env bash
# `make profile`: where the arbiter's CPU goes. Runs the side-by-side bench's uncontended
# cells at one concurrency on the profiling build (the release build with line tables,
# Cargo.toml [profile.profiling]) and records the arbiter with perf (cpu-clock: this machine
# has no hardware counters) during the "arbiter direct (mTLS)" cell. Writes the top
# consumers by own time and by inclusive time under bench-results/profile/.
set -euo pipefail
cd "$(dirname "$0")/../.."
CONCURRENCY="${PROFILE_CONCURRENCY:-64}"
SECONDS_PER_CELL=8
out=bench-results/profile
mkdir -p "$out"
log=$(mktemp)
target/profiling/bench --only uncontended --concurrency "$CONCURRENCY" --seconds "$SECONDS_PER_CELL" \
  --out "$(mktemp -d)" >"$log" 2>&1 &
bench=$!
# The arbiter-direct cell starts when the v3lock cell has reported (bounded: 3 minutes).
for _ in $(seq 1 360); do
  grep -q "etcd v3lock" "$log" && break
  kill -0 "$bench" 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.5
done
sleep 1.5
pid=$(pgrep -f "target/profiling/arbiter" | head -1)
data="$out/arbiter-c$CONCURRENCY.perf.data"
perf record -e cpu-clock -F 999 -g -p "$pid" -o "$data" -- sleep 5 >/dev/null 2>&1
wait "$bench" || true
{
  echo "# arbiter direct (mTLS), concurrency $CONCURRENCY: perf record -e cpu-clock -F 999 -g, 5 s"
  echo "# command: make profile (integration/scripts/profile-arbiter.sh)"
  echo
  echo "## by own time"
  perf report -i "$data" --stdio --no-children --sort sym -g none --percent-limit 0.7 2>/dev/null \
    | grep -E '^ +[0-9]' | cut -c1-160
  echo
  echo "## by shared object"
  perf report -i "$data" --stdio --no-children --sort dso -g none 2>/dev/null \
    | grep -E '^ +[0-9]' | head -8
} >"$out/arbiter-c$CONCURRENCY.txt"
rm -f "$data" "$log"
echo "written: $out/arbiter-c$CONCURRENCY.txt"
