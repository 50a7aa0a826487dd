package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Whole history folders as the gate writes them, through run: the files read, the store
// log applied, one line per key.

// folder writes the given files into a temp folder.
func folder(t *testing.T, files map[string][]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, lines := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func verdicts(t *testing.T, dir string) (map[string]Result, int) {
	t.Helper()
	var out bytes.Buffer
	illegal, err := run(&out, dir, 10*time.Second, "", map[string]uint32{"sem": 3})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Result{}
	dec := json.NewDecoder(&out)
	for dec.More() {
		var r Result
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		got[r.Key] = r
	}
	return got, illegal
}

// Client 1's grant is lost (NO_QUORUM) while client 2 is granted the key later.
var lostGrant = []string{
	`{"c":1,"op":1,"t":100,"ph":"invoke","f":"acquire","key":"k","session":16,"via":"edge"}`,
	`{"c":1,"op":1,"t":200,"ph":"info","f":"acquire","why":"NO_QUORUM"}`,
	`{"c":2,"op":1,"t":300,"ph":"invoke","f":"acquire","key":"k","session":32,"via":"edge"}`,
	`{"c":2,"op":1,"t":310,"ph":"ok","f":"acquire","session":32,"token":281474976710662}`,
	`{"c":2,"op":2,"t":320,"ph":"invoke","f":"write","key":"k","session":32,"token":281474976710662}`,
	`{"c":2,"op":2,"t":330,"ph":"ok","f":"write"}`,
	// The observer's records share the folder; they are not events.
	`{"stream":1,"key":"k","change":"current","revision":2,"held":false}`,
	// A torn last line (the writer killed mid-write).
	`{"c":2,"op":3,"t":3`,
}

func storeLines(lines ...string) []string {
	return append([]string{
		`{"revision":2,"seen":10,"key":"/sys/epoch","delete":false,"create_revision":2,"lease":0,"hold":2,"epoch":1}`,
		`{"revision":3,"seen":20,"key":"/s/10","delete":false,"create_revision":3,"lease":16,"hold":3}`,
		`{"revision":4,"seen":30,"key":"/s/20","delete":false,"create_revision":4,"lease":32,"hold":4}`,
	}, lines...)
}

func TestLostGrantThatDidNothing(t *testing.T) {
	// The store made no record for client 1: only client 2's, at revision 6.
	dir := folder(t, map[string][]string{
		"worker-0.jsonl": lostGrant,
		storeLog: storeLines(
			`{"revision":6,"seen":305,"key":"/l/k","delete":false,"create_revision":6,"lease":32,"hold":6}`,
		),
	})
	got, illegal := verdicts(t, dir)
	if illegal != 0 || got["k"].Verdict != VerdictOk || got["k"].Ops != 2 {
		t.Fatalf("%+v", got)
	}
}

func TestLostGrantThatHeld(t *testing.T) {
	// The store made client 1's record at revision 5 (its answer was lost, the grant was
	// not), and client 2's was written over it at 6: two holders.
	dir := folder(t, map[string][]string{
		"worker-0.jsonl": lostGrant,
		storeLog: storeLines(
			`{"revision":5,"seen":150,"key":"/l/k","delete":false,"create_revision":5,"lease":16,"hold":5}`,
			`{"revision":6,"seen":305,"key":"/l/k","delete":false,"create_revision":5,"lease":32,"hold":6}`,
		),
	})
	got, illegal := verdicts(t, dir)
	if illegal != 1 || got["k"].Lock != VerdictIllegal || got["k"].Fences != VerdictOk {
		t.Fatalf("%+v", got)
	}
	// Client 1's session ended (revision 6, seen at 250) before client 2's grant at 7.
	dir = folder(t, map[string][]string{
		"worker-0.jsonl": lostGrant,
		storeLog: storeLines(
			`{"revision":5,"seen":150,"key":"/l/k","delete":false,"create_revision":5,"lease":16,"hold":5}`,
			`{"revision":6,"seen":250,"key":"/s/10","delete":true,"create_revision":3,"lease":16,"hold":3}`,
			`{"revision":6,"seen":250,"key":"/l/k","delete":true,"create_revision":5,"lease":16,"hold":5}`,
			`{"revision":7,"seen":305,"key":"/l/k","delete":false,"create_revision":7,"lease":32,"hold":7}`,
		),
	})
	lines := strings.Replace(strings.Join(lostGrant, "\n"), "281474976710662", "281474976710663", -1)
	if err := os.WriteFile(filepath.Join(dir, "worker-0.jsonl"), []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	got, illegal = verdicts(t, dir)
	if illegal != 0 || got["k"].Verdict != VerdictOk {
		t.Fatalf("%+v", got)
	}
}

func TestWithoutAStoreLogLostAnswersFollowTheConvention(t *testing.T) {
	// No store log: client 1's lost grant may not have happened (placed last).
	dir := folder(t, map[string][]string{"worker-0.jsonl": lostGrant})
	got, illegal := verdicts(t, dir)
	if illegal != 0 || got["k"].Verdict != VerdictOk || got["k"].Ops != 3 {
		t.Fatalf("%+v", got)
	}
	// ... or it may explain a HELD answer.
	held := append(lostGrant[:2:2],
		`{"c":2,"op":1,"t":300,"ph":"invoke","f":"acquire","key":"k","session":32}`,
		`{"c":2,"op":1,"t":310,"ph":"fail","f":"acquire","why":"HELD"}`)
	dir = folder(t, map[string][]string{"worker-0.jsonl": held})
	if got, illegal = verdicts(t, dir); illegal != 0 {
		t.Fatalf("%+v", got)
	}
	// Without it, that HELD has no holder.
	dir = folder(t, map[string][]string{"worker-0.jsonl": held[2:]})
	if got, illegal = verdicts(t, dir); illegal != 1 {
		t.Fatalf("%+v", got)
	}
}

func TestAdvancePlacedAtItsRevision(t *testing.T) {
	// Client 1 holds under epoch 1; an epoch advance at revision 7 deletes every hold; then
	// client 2 is granted under epoch 2. The advance call is the driver's (no key).
	events := []string{
		`{"c":1,"op":1,"t":100,"ph":"invoke","f":"acquire","key":"k","session":16}`,
		`{"c":1,"op":1,"t":110,"ph":"ok","f":"acquire","token":281474976710661}`,
		`{"c":0,"op":1,"t":200,"ph":"invoke","f":"advance"}`,
		`{"c":0,"op":1,"t":300,"ph":"ok","f":"advance"}`,
		`{"c":2,"op":1,"t":400,"ph":"invoke","f":"acquire","key":"k","session":32}`,
		`{"c":2,"op":1,"t":410,"ph":"ok","f":"acquire","token":562949953421320}`,
	}
	store := storeLines(
		`{"revision":5,"seen":105,"key":"/l/k","delete":false,"create_revision":5,"lease":16,"hold":5}`,
		`{"revision":7,"seen":250,"key":"/sys/epoch","delete":false,"create_revision":2,"lease":0,"hold":7,"epoch":2}`,
		`{"revision":7,"seen":250,"key":"/l/k","delete":true,"create_revision":5,"lease":16,"hold":5}`,
		`{"revision":8,"seen":405,"key":"/l/k","delete":false,"create_revision":8,"lease":32,"hold":8}`,
	)
	dir := folder(t, map[string][]string{"worker-0.jsonl": events, storeLog: store})
	if got, illegal := verdicts(t, dir); illegal != 0 {
		t.Fatalf("%+v", got)
	}
	// Without the advance, client 1 still holds.
	dir = folder(t, map[string][]string{"worker-0.jsonl": append(events[:2:2], events[4:]...), storeLog: store[:4]})
	if got, illegal := verdicts(t, dir); illegal != 1 {
		t.Fatalf("%+v", got)
	}
}
