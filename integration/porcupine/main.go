// Command gate-porcupine checks a release-gate history with Porcupine
// (github.com/anishathalye/porcupine), the checker ADR-23 names, beside the gate's own
// search (integration/gate/src/linearize.rs): each key's operations, and what the store
// log shows happened to its holds, against a sequential model per object of the key.
//
//	history.go  the recorded history: events paired into operations
//	store.go    the store log (store.jsonl): holds, session ends, advances, force releases
//	lock.go     the lock's model: a fenced reader-writer mutex
//	permits.go  a semaphore's key's model: a fenced semaphore of N permits
//	fence.go    the fenced resources' models: the register and the PostgreSQL fence
//	derive.go   one key's history as Porcupine operations
//	check.go    the per-key check and its verdict
//
// Usage: gate-porcupine -dir <history folder> [-timeout 10s] [-key K]
// [-semaphores prefix=N,...]. It prints one JSON object per key, {"key", "verdict":
// ok|illegal|unknown, ...}, and exits 0 if no key is illegal, 1 if one is, 2 if the history
// could not be read or the flags could not be.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// gateSemaphores: the release gate's semaphore class and its permits (GATE_SEM_PREFIX and
// GATE_SEM_PERMITS of integration/src/registry.rs), for a run by hand; the gate passes
// -semaphores itself.
const gateSemaphores = "pay/gate-sem=3"

func main() {
	dir := flag.String("dir", "", "the history folder of a gate round (worker-*.jsonl, driver.jsonl, store.jsonl)")
	timeout := flag.Duration("timeout", 10*time.Second, "search time per object of a key; a key that runs out is unknown")
	only := flag.String("key", "", "check this key only")
	sems := flag.String("semaphores", gateSemaphores, "semaphore classes: prefix=N,... (their keys' locks are semaphores of N permits)")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "gate-porcupine: -dir is required")
		os.Exit(2)
	}
	semaphores, err := parseSemaphores(*sems)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gate-porcupine: -semaphores: %v\n", err)
		os.Exit(2)
	}
	illegal, err := run(os.Stdout, *dir, *timeout, *only, semaphores)
	switch {
	case err != nil:
		fmt.Fprintf(os.Stderr, "gate-porcupine: %v\n", err)
		os.Exit(2)
	case illegal > 0:
		os.Exit(1)
	}
}

// parseSemaphores reads "prefix=N,..." (empty: none); N is 2 or more, as the registry
// requires of a semaphore.
func parseSemaphores(s string) (map[string]uint32, error) {
	out := map[string]uint32{}
	for _, part := range strings.Split(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		prefix, n, ok := strings.Cut(strings.TrimSpace(part), "=")
		permits, err := strconv.ParseUint(n, 10, 32)
		if !ok || prefix == "" || err != nil || permits < 2 {
			return nil, fmt.Errorf("%q is not prefix=N with N at least 2", part)
		}
		out[prefix] = uint32(permits)
	}
	return out, nil
}

// run checks every key of the history in dir (or only the one named) and writes a line
// per key to w; it returns how many keys were illegal. semaphores: the semaphore classes'
// prefixes and permits.
func run(w io.Writer, dir string, timeout time.Duration, only string, semaphores map[string]uint32) (int, error) {
	files, err := historyFiles(dir)
	if err != nil {
		return 0, err
	}
	events, err := readEvents(files)
	if err != nil {
		return 0, err
	}
	truth, err := readTruth(dir)
	if err != nil {
		return 0, err
	}
	keys := deriveAll(operations(events), truth, semaphores)
	names := make([]string, 0, len(keys))
	for k := range keys {
		if only == "" || k == only {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	enc := json.NewEncoder(w)
	illegal := 0
	for _, k := range names {
		r := checkKey(k, keys[k], timeout)
		if r.Verdict == VerdictIllegal {
			illegal++
		}
		if err := enc.Encode(r); err != nil {
			return illegal, err
		}
	}
	return illegal, nil
}
