#!/usr/bin/env bash
# `make profile`: where the arbiter's CPU goes. Runs the side-by-side bench's uncontended
# cells at one concurrency on the profiling build (the release build with line tables,
# Cargo.toml [profile.profiling]) and records the arbiter with perf (cpu-clock: this machine
# has no hardware counters) during the "arbiter direct (mTLS)" cell. Writes the top
# consumers by own time and by shared object under bench-results/profile/,
# and the arbiter's CPU and context switches per RPC over the same window (is the cost per
# wake-up or per byte?). PROFILE_CONCURRENCY=1 profiles the concurrency-1 cell instead.
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
# The stack's arbiter (the plaintext baseline's arbiter also runs, idle in this cell).
pid=$(pgrep -f "target/profiling/arbiter .*--id arbiter-0( |$)" | head -1)
data="$out/arbiter-c$CONCURRENCY.perf.data"
# Context switches of every arbiter thread, and its CPU ticks, at the window's two ends.
switches() { cat /proc/"$pid"/task/*/status 2>/dev/null | awk '/ctxt_switches/ {n += $2} END {print n}'; }
ticks() { awk '{print $14 + $15}' /proc/"$pid"/stat; }
s0=$(switches); t0=$(ticks)
perf record -e cpu-clock -F 999 -g -p "$pid" -o "$data" -- sleep 5 >/dev/null 2>&1
s1=$(switches); t1=$(ticks)
wait "$bench" || true
# The cell's throughput, as the bench reported it (acquire+release: two RPCs per op).
# Its line: "arbiter direct (mTLS)   c=64   7247 ops/s  p50 ...".
ops=$(grep -E '^arbiter direct \(mTLS\) +c=' "$log" | head -1 | sed -E 's/.*c=[0-9]+ +([0-9]+) ops\/s.*/\1/' || true)
hz=$(getconf CLK_TCK)
{
  echo "# arbiter direct (mTLS), concurrency $CONCURRENCY: perf record -e cpu-clock -F 999 -g, 5 s"
  echo "# command: make profile (integration/scripts/profile-arbiter.sh)"
  echo
  echo "## per RPC over the window (the cell: ${ops:-?} acquire+release/s, two RPCs each; perf's own cost included)"
  if [ -n "${ops:-}" ] && [ "$ops" -gt 0 ]; then
    awk -v s="$((s1 - s0))" -v t="$((t1 - t0))" -v hz="$hz" -v ops="$ops" 'BEGIN {
      rpcs = ops * 2 * 5
      printf "    context switches per RPC: %.1f\n", s / rpcs
      printf "    CPU µs per RPC: %.0f\n", t / hz * 1e6 / rpcs
    }'
  fi
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
