package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// What etcd itself says happened (integration/gate/src/store_log.rs writes it beside the
// history): every event of a watch over the whole key space. The clients cannot see when
// a session ended, an epoch advance deleted every hold, or operators force-released one;
// the store log places each at its commit revision. It also says what an operation whose
// answer was lost did: whether its session's holder record was made or deleted.

const (
	storeLog   = "store.jsonl"
	storeStart = "store-start.json"

	// The etcd key layout (arbiter/src/store/layout.rs).
	epochKey      = "/sys/epoch"
	holderPrefix  = "/l/"
	sessionPrefix = "/s/"
	forcePrefix   = "/sys/force/"
	sharedPrefix  = "/r/"
	permitPrefix  = "/p/"

	revisionBits = 48
	maxRevision  = 1<<revisionBits - 1
	maxEpoch     = 1<<15 - 1
)

type storeEvent struct {
	Revision       int64   `json:"revision"`
	Seen           uint64  `json:"seen"`
	Key            string  `json:"key"`
	Delete         bool    `json:"delete"`
	CreateRevision int64   `json:"create_revision"`
	Lease          int64   `json:"lease"`
	Hold           *int64  `json:"hold"`
	Epoch          *uint16 `json:"epoch"`
}

// holdID: the mod revision of the record a put made or a delete removed (logs from before
// handoffs name only the create revision).
func (e *storeEvent) holdID() int64 {
	if e.Hold != nil {
		return *e.Hold
	}
	return e.CreateRevision
}

// holdOf: the lock key a holder record holds, and whether it is a shared hold:
// /l/<key> (exclusive) or /r/<key>//s/<lease> (shared). A key has no empty segment, so the
// first "//" after the prefix ends it.
func holdOf(etcdKey string) (key string, shared bool, ok bool) {
	if k, found := strings.CutPrefix(etcdKey, holderPrefix); found {
		return k, false, true
	}
	rest, found := strings.CutPrefix(etcdKey, sharedPrefix)
	if !found {
		return "", false, false
	}
	k, tail, found := strings.Cut(rest, "//")
	if !found || !strings.HasPrefix(tail, "s/") {
		return "", false, false
	}
	return k, true, true
}

// permitOf: the lock key and permit number of a semaphore's permit record,
// /p/<key>//<i> (a holder record on its session's lease).
func permitOf(etcdKey string) (key string, permit uint32, ok bool) {
	rest, found := strings.CutPrefix(etcdKey, permitPrefix)
	if !found {
		return "", 0, false
	}
	k, tail, found := strings.Cut(rest, "//")
	if !found {
		return "", 0, false
	}
	n, err := strconv.ParseUint(tail, 10, 32)
	if err != nil {
		return "", 0, false
	}
	return k, uint32(n), true
}

// lockKeyOf: the lock key of any holder record (exclusive, shared, or a permit).
func lockKeyOf(etcdKey string) (string, bool) {
	if k, _, ok := holdOf(etcdKey); ok {
		return k, true
	}
	k, _, ok := permitOf(etcdKey)
	return k, ok
}

// permitRecord: a semaphore permit's record and its number.
type permitRecord struct {
	key    string
	permit uint32
}

// record names one hold: its etcd key and the revision that made it.
type record struct {
	key string
	rev int64
}

// seenAt: when the watcher saw a hold made and, if it saw it end, ended.
type seenAt struct {
	made    uint64
	gone    uint64
	hasGone bool
}

// Truth is the store log, indexed.
type Truth struct {
	// Each hold -> the revision that ended it (a delete or a handoff's overwrite), if any.
	ended    map[record]int64
	holds    map[record]bool
	lease    map[record]int64
	seen     map[record]seenAt
	shared   map[record]string       // (lock key, revision) -> the shared record's etcd key
	permits  map[record]permitRecord // (lock key, revision) -> the permit record made then
	sessEnd  map[int64]int64         // lease -> the revision its session record was deleted at
	sessSeen map[int64]uint64        // lease -> when the watcher saw that
	epochs   map[int64]bool          // revisions that wrote the epoch record
	epochVal map[int64]uint16        // ... and the epoch each named, where the log has it
	forces   map[int64]bool          // revisions that wrote a force-release record
	// From store-start.json: a log that starts mid-store (a soak round) counts the epoch
	// writes before it from here, and its first epoch write is an advance.
	epochsBefore   uint32
	startsMidStore bool
}

func newTruth() *Truth {
	return &Truth{
		ended: map[record]int64{}, holds: map[record]bool{}, lease: map[record]int64{},
		seen: map[record]seenAt{}, shared: map[record]string{}, permits: map[record]permitRecord{},
		sessEnd: map[int64]int64{}, sessSeen: map[int64]uint64{}, epochs: map[int64]bool{},
		epochVal: map[int64]uint16{}, forces: map[int64]bool{},
	}
}

// readTruth reads store.jsonl (absent: an empty truth) and store-start.json.
func readTruth(dir string) (*Truth, error) {
	var events []storeEvent
	f, err := os.Open(filepath.Join(dir, storeLog))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
		n := 0
		for sc.Scan() {
			n++
			if len(strings.TrimSpace(sc.Text())) == 0 {
				continue
			}
			var e storeEvent
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				return nil, fmt.Errorf("%s line %d: %w", storeLog, n, err)
			}
			events = append(events, e)
		}
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	t := truthFrom(events)
	if text, err := os.ReadFile(filepath.Join(dir, storeStart)); err == nil {
		var start struct {
			Epoch uint32 `json:"epoch"`
		}
		if err := json.Unmarshal(text, &start); err != nil {
			return nil, fmt.Errorf("%s: %w", storeStart, err)
		}
		t.epochsBefore, t.startsMidStore = start.Epoch, true
	}
	return t, nil
}

func truthFrom(events []storeEvent) *Truth {
	t := newTruth()
	live := map[string]int64{} // holder record -> the revision of its live hold
	for i := range events {
		e := &events[i]
		lockKey, shared, ok := holdOf(e.Key)
		permitKey, permit, isPermit := permitOf(e.Key)
		if isPermit {
			lockKey, ok = permitKey, true
		}
		if ok {
			if shared && !e.Delete {
				t.shared[record{lockKey, e.Revision}] = e.Key
			}
			if isPermit && !e.Delete {
				t.permits[record{lockKey, e.Revision}] = permitRecord{e.Key, permit}
			}
			if e.Delete {
				id := record{e.Key, e.holdID()}
				if s, found := t.seen[id]; found {
					s.gone, s.hasGone = e.Seen, true
					t.seen[id] = s
				}
				t.holds[id] = true
				t.ended[id] = e.Revision
				delete(live, e.Key)
				continue
			}
			// A put over a live hold is a handoff: that hold ends here.
			if before, found := live[e.Key]; found {
				old := record{e.Key, before}
				if s, ok := t.seen[old]; ok {
					s.gone, s.hasGone = e.Seen, true
					t.seen[old] = s
				}
				t.holds[old] = true
				t.ended[old] = e.Revision
			}
			live[e.Key] = e.Revision
			id := record{e.Key, e.Revision}
			t.seen[id] = seenAt{made: e.Seen}
			t.holds[id] = true
			t.lease[id] = e.Lease
			continue
		}
		switch {
		case strings.HasPrefix(e.Key, sessionPrefix):
			if l, err := strconv.ParseInt(strings.TrimPrefix(e.Key, sessionPrefix), 16, 64); e.Delete && err == nil {
				t.sessEnd[l] = e.Revision
				t.sessSeen[l] = e.Seen
			}
		case e.Key == epochKey && !e.Delete:
			t.epochs[e.Revision] = true
			if e.Epoch != nil {
				t.epochVal[e.Revision] = *e.Epoch
			}
		case strings.HasPrefix(e.Key, forcePrefix) && !e.Delete:
			t.forces[e.Revision] = true
		}
	}
	return t
}

// hasLog: the log holds any hold at all (without one, lost answers are searched as
// operations of unknown outcome).
func (t *Truth) hasLog() bool { return len(t.seen) > 0 }

// hkey: the record of the hold of key made at rev, its shared or permit record if it was
// one.
func (t *Truth) hkey(key string, rev int64) record {
	if p, ok := t.permits[record{key, rev}]; ok {
		return record{p.key, rev}
	}
	if k, ok := t.shared[record{key, rev}]; ok {
		return record{k, rev}
	}
	return record{holderPrefix + key, rev}
}

// permitAt: the permit the hold of key made at rev was, if it was a semaphore's.
func (t *Truth) permitAt(key string, rev int64) (uint32, bool) {
	p, ok := t.permits[record{key, rev}]
	return p.permit, ok
}

func (t *Truth) isShared(key string, rev int64) bool {
	_, ok := t.shared[record{key, rev}]
	return ok
}

// deletedAt: whether the store ever had the hold of key made at rev (exists), and the
// revision that ended it (ended false: it lived to the end of the log).
func (t *Truth) deletedAt(key string, rev int64) (exists bool, at int64, ended bool) {
	id := t.hkey(key, rev)
	if !t.holds[id] {
		return false, 0, false
	}
	at, ended = t.ended[id]
	return true, at, ended
}

// logged: the log has any hold record of key, exclusive, shared or a permit.
func (t *Truth) logged(key string) bool {
	for r := range t.lease {
		if k, ok := lockKeyOf(r.key); ok && k == key {
			return true
		}
	}
	return false
}

type heldOn struct {
	rev int64
	seenAt
}

// holdsOn: the holds of key written on lease, exclusive, shared or permits, in revision
// order.
func (t *Truth) holdsOn(key string, lease int64) []heldOn {
	exclusive := holderPrefix + key
	shared := fmt.Sprintf("%s%s//s/%x", sharedPrefix, key, uint64(lease))
	var out []heldOn
	for r, l := range t.lease {
		pk, _, isPermit := permitOf(r.key)
		if (r.key != exclusive && r.key != shared && (!isPermit || pk != key)) || l != lease {
			continue
		}
		if s, ok := t.seen[r]; ok {
			out = append(out, heldOn{r.rev, s})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].rev < out[j].rev })
	return out
}

// epochAt: the epoch the store was in at rev, if the log can say.
func (t *Truth) epochAt(rev int64) (uint32, bool) {
	if len(t.epochs) == 0 && t.epochsBefore == 0 {
		return 0, false
	}
	var last int64
	found := false
	n := uint32(0)
	for w := range t.epochs {
		if w < rev {
			n++
			if !found || w > last {
				last, found = w, true
			}
		}
	}
	if found {
		if e, ok := t.epochVal[last]; ok {
			return uint32(e), true
		}
	}
	return n + t.epochsBefore, true
}

// tokenAt: the token a grant committed at rev carries, if the log can say.
func (t *Truth) tokenAt(rev int64) (uint64, bool) {
	e, ok := t.epochAt(rev)
	if !ok || e == 0 || e > maxEpoch || rev <= 0 || rev > maxRevision {
		return 0, false
	}
	return uint64(e)<<revisionBits | uint64(rev), true
}

// advances: the epoch writes that were advances, in order (all but the first, the epoch
// init, when the log starts at the store's beginning).
func (t *Truth) advances() []int64 {
	var w []int64
	for r := range t.epochs {
		w = append(w, r)
	}
	sort.Slice(w, func(i, j int) bool { return w[i] < w[j] })
	if !t.startsMidStore && len(w) > 0 {
		w = w[1:]
	}
	return w
}

// forcedAt: the revision at which operators force-released the hold of key made at rev.
func (t *Truth) forcedAt(key string, rev int64) (int64, bool) {
	id := record{holderPrefix + key, rev}
	at, ended := t.ended[id]
	if !t.holds[id] || !ended || !t.forces[at] {
		return 0, false
	}
	return at, true
}

// revoked: whether the hold of key made at rev was taken away by the service (its session
// ended, an advance deleted it, operators force-released it) rather than released.
func (t *Truth) revoked(key string, rev int64) bool {
	id := t.hkey(key, rev)
	at, ended := t.ended[id]
	if !t.holds[id] || !ended {
		return false
	}
	end, ok := t.sessEnd[t.lease[id]]
	_, forced := t.forcedAt(key, rev)
	return (ok && end == at) || t.epochs[at] || forced
}

type forcedHold struct {
	lease int64
	at    int64
	seenAt
}

// forcedHolds: the exclusive holds of key that operators force-released.
func (t *Truth) forcedHolds(key string) []forcedHold {
	var out []forcedHold
	for r, l := range t.lease {
		if r.key != holderPrefix+key {
			continue
		}
		at, ok := t.forcedAt(key, r.rev)
		s, seen := t.seen[r]
		if ok && seen {
			out = append(out, forcedHold{l, at, s})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].at < out[j].at })
	return out
}
