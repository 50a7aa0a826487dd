package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// The recorded history as the gate writes it (integration/gate/src/history.rs): one JSON
// line per event, an invoke line and, if the operation finished, an ok, fail or info line
// with the same (client, op id). Times are CLOCK_MONOTONIC nanoseconds, one clock for every
// worker process.

// Phase of an event, and of an operation's completion.
type Phase int

const (
	Invoke Phase = iota
	// Ok: it definitely happened.
	Ok
	// Fail: it definitely did not happen (a refusal with a reason).
	Fail
	// Info: it may or may not have happened.
	Info
)

var phases = map[string]Phase{"invoke": Invoke, "ok": Ok, "fail": Fail, "info": Info}

// The operation kinds the gate records ("f"). A line with any other kind is skipped, as
// the gate's reader skips it.
const (
	KindOpen      = "open"
	KindAcquire   = "acquire"
	KindRelease   = "release"
	KindKeepAlive = "keepalive"
	KindWrite     = "write"
	KindRead      = "read"
	KindPgWrite   = "pgwrite"
	KindAdvance   = "advance"
	KindForce     = "force"
	KindAttack    = "attack"
)

var kinds = map[string]bool{
	KindOpen: true, KindAcquire: true, KindRelease: true, KindKeepAlive: true,
	KindWrite: true, KindRead: true, KindPgWrite: true, KindAdvance: true,
	KindForce: true, KindAttack: true,
}

// event is one line. Pointers tell a field that is absent from a zero.
type event struct {
	C       *uint32 `json:"c"`
	Op      *uint64 `json:"op"`
	T       *uint64 `json:"t"`
	Ph      *string `json:"ph"`
	F       *string `json:"f"`
	Key     *string `json:"key"`
	Session *int64  `json:"session"`
	Token   *uint64 `json:"token"`
	Why     *string `json:"why"`
	Rev     *int64  `json:"rev"`
	Set     *uint64 `json:"set"`
	Shared  bool    `json:"shared"`
	// Permit: a semaphore's permit, on an acquire's ok (the one granted) and on a release
	// or write (the one its token was granted).
	Permit *uint32 `json:"permit"`
}

// valid: the fields every event has, with values the gate knows. (Other lines in the
// history folder, the observer's, have none of them.)
func (e *event) valid() bool {
	if e.C == nil || e.Op == nil || e.T == nil || e.Ph == nil || e.F == nil {
		return false
	}
	_, ok := phases[*e.Ph]
	return ok && kinds[*e.F]
}

// Op is one operation: its invocation and, if recorded, its completion.
type Op struct {
	Client  uint32
	Kind    string
	Key     *string
	Session *int64
	// For acquires the token granted; otherwise the token used.
	Token   *uint64
	Invoked uint64
	// Done: a completion was recorded, at DoneAt, with Phase.
	Done   bool
	DoneAt uint64
	Phase  Phase
	Why    *string
	Shared bool
	Set    *uint64
	// Permit: the semaphore permit granted, released or written under.
	Permit *uint32
}

func (o *Op) ok() bool     { return o.Done && o.Phase == Ok }
func (o *Op) failed() bool { return o.Done && o.Phase == Fail }

// unknown: info, or no completion at all.
func (o *Op) unknown() bool { return !o.Done || o.Phase == Info }

func (o *Op) why() string {
	if o.Why == nil {
		return ""
	}
	return *o.Why
}

func (o *Op) sessionIs(s int64) bool { return o.Session != nil && *o.Session == s }
func (o *Op) tokenIs(t uint64) bool  { return o.Token != nil && *o.Token == t }

// readEvents reads the events of the given files, ordered by time (stable: a file's own
// order holds at equal times). Lines that are not events (a torn last line, the
// observer's records) are skipped.
func readEvents(paths []string) ([]event, error) {
	var out []event
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
		for sc.Scan() {
			var e event
			if json.Unmarshal(sc.Bytes(), &e) == nil && e.valid() {
				out = append(out, e)
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return *out[i].T < *out[j].T })
	return out, nil
}

// operations pairs invocations with completions, in invocation order.
func operations(events []event) []*Op {
	type id struct {
		c  uint32
		op uint64
	}
	open := map[id]*Op{}
	var ops []*Op
	for i := range events {
		e := &events[i]
		k := id{*e.C, *e.Op}
		ph := phases[*e.Ph]
		if ph == Invoke {
			o := &Op{
				Client: *e.C, Kind: *e.F, Key: e.Key, Session: e.Session, Token: e.Token,
				Invoked: *e.T, Shared: e.Shared, Set: e.Set, Permit: e.Permit,
			}
			open[k] = o
			ops = append(ops, o)
			continue
		}
		o, found := open[k]
		if !found {
			continue
		}
		delete(open, k)
		o.Done, o.DoneAt, o.Phase, o.Why = true, *e.T, ph, e.Why
		if e.Token != nil {
			o.Token = e.Token
		}
		if e.Session != nil {
			o.Session = e.Session
		}
		if e.Permit != nil {
			o.Permit = e.Permit
		}
	}
	return ops
}

// historyFiles: every *.jsonl in the folder but the store log.
func historyFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		n := e.Name()
		if n != storeLog && strings.HasSuffix(n, ".jsonl") && !e.IsDir() {
			out = append(out, filepath.Join(dir, n))
		}
	}
	sort.Strings(out)
	return out, nil
}
