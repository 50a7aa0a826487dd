package main

import (
	"math"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"
)

// One key's history as Porcupine operations: the clients' calls with their answers, and
// what the store log shows the clients could not see. The evidence is the gate's
// (integration/gate/src/linearize.rs builds its search's operations from the same files);
// this is a second reading of it.

// never is the return time of an operation whose answer was never seen (Porcupine's
// convention: it may be placed anywhere after its call, and placed last it did not happen).
const never = math.MaxInt64

func ns(t uint64) int64 {
	if t > math.MaxInt64 {
		return never
	}
	return int64(t)
}

func operation(in any, call uint64, out any, ret int64) porcupine.Operation {
	c := ns(call)
	return porcupine.Operation{Input: in, Call: c, Output: out, Return: max(ret, c)}
}

// Key is one key's operations, per object.
type Key struct {
	// Permits: N for a semaphore's key (its lock is then a semaphore), 0 for any other.
	Permits uint32
	Lock    []porcupine.Operation
	// The fences, by permit: a semaphore's resource fences each permit on its own; every
	// other key's writes carry no permit and are one fence (noPermit).
	Register map[int64][]porcupine.Operation
	PgFence  map[int64][]porcupine.Operation
}

// noPermit: the fence of a key whose writes name no permit.
const noPermit = -1

// deriveAll: every key any operation names, with its objects' operations; semaphores
// gives each semaphore class's prefix its permits.
func deriveAll(ops []*Op, truth *Truth, semaphores map[string]uint32) map[string]*Key {
	byKey := map[string][]*Op{}
	var advances []*Op
	for _, o := range ops {
		if o.Kind == KindAdvance {
			advances = append(advances, o)
		}
		if o.Key != nil {
			byKey[*o.Key] = append(byKey[*o.Key], o)
		}
	}
	sort.SliceStable(advances, func(i, j int) bool { return advances[i].Invoked < advances[j].Invoked })
	out := map[string]*Key{}
	for k, kops := range byKey {
		out[k] = &Key{
			Permits:  permitsOf(k, semaphores),
			Lock:     lockOps(k, kops, advances, truth),
			Register: fenceOps(kops, KindWrite, KindRead),
			PgFence:  fenceOps(kops, KindPgWrite, ""),
		}
	}
	return out
}

// permitsOf: the permits of key's class if a semaphore prefix covers it (on a segment
// boundary), else 0.
func permitsOf(key string, semaphores map[string]uint32) uint32 {
	for prefix, n := range semaphores {
		if rest, ok := strings.CutPrefix(key, prefix); ok && strings.HasPrefix(rest, "/") {
			return n
		}
	}
	return 0
}

// fenceOps: the guarded writes (and reads) of one key's fence, by permit. A refusal other
// than STALE and a read of unknown outcome change nothing: left out.
func fenceOps(ops []*Op, write, read string) map[int64][]porcupine.Operation {
	out := map[int64][]porcupine.Operation{}
	for _, o := range ops {
		if (o.Kind != write && (read == "" || o.Kind != read)) || o.Token == nil {
			continue
		}
		fence := int64(noPermit)
		if o.Permit != nil {
			fence = int64(*o.Permit)
		}
		in := FenceIn{Token: *o.Token, Read: o.Kind == read}
		switch {
		case o.ok():
			out[fence] = append(out[fence], operation(in, o.Invoked, FenceAccepted, ns(o.DoneAt)))
		case o.failed() && o.why() == "STALE":
			out[fence] = append(out[fence], operation(in, o.Invoked, FenceStale, ns(o.DoneAt)))
		case o.unknown() && !in.Read:
			out[fence] = append(out[fence], operation(in, o.Invoked, FenceUnknown, never))
		}
	}
	return out
}

// lockOps: one key's lock operations.
//
// Clients: an answered acquire or release, by its answer; a refusal other than HELD,
// LEAKED_HOLD or STALE_TOKEN changes nothing, nor does a refused shared acquire (a waiting
// writer's mark, which the model does not hold, refuses it too): left out. An acquire or
// release of unknown outcome follows Porcupine's convention when there is no store log;
// with one, it is replaced by what the store shows it did (storeEffects).
//
// The store: each session that may have held the key and ended (expiry or close), placed
// at its commit revision; each force release; each epoch advance.
func lockOps(key string, ops []*Op, advances []*Op, truth *Truth) []porcupine.Operation {
	var out []porcupine.Operation
	effects := truth.hasLog()
	// A session's first acquire that may have held the key (not refused): its end, if it
	// took a hold away, came after.
	first := map[int64]uint64{}
	// The latest invocation of an acknowledged grant per session: its transaction compared
	// the session's record, so the session was alive when it was invoked.
	aliveAt := map[int64]uint64{}
	// Acknowledged grants' commit revisions with their invocations: a session end
	// committed at a later revision happened after those invocations.
	type commit struct {
		rev     int64
		invoked uint64
	}
	var commits []commit
	for _, o := range ops {
		if o.Kind == KindAcquire && o.ok() {
			if o.Session != nil {
				aliveAt[*o.Session] = max(aliveAt[*o.Session], o.Invoked)
			}
			if o.Token != nil {
				commits = append(commits, commit{revisionOf(*o.Token), o.Invoked})
			}
		}
	}
	committedBefore := func(rev int64) uint64 {
		var t uint64
		for _, c := range commits {
			if c.rev < rev {
				t = max(t, c.invoked)
			}
		}
		return t
	}
	for _, o := range ops {
		if o.Session == nil || (o.Kind != KindAcquire && o.Kind != KindRelease) {
			continue
		}
		s := *o.Session
		if o.Kind == KindAcquire && !o.failed() {
			if f, ok := first[s]; !ok || o.Invoked < f {
				first[s] = o.Invoked
			}
		}
		if o.Kind == KindAcquire && o.Shared && o.failed() {
			continue
		}
		var token uint64
		if o.Token != nil {
			token = *o.Token
		}
		// An acquire's token is its answer; a release's, what it names.
		in := LockIn{Session: s}
		switch {
		case o.Kind == KindAcquire && o.Shared:
			in.Kind = AcquireShared
		case o.Kind == KindAcquire:
			in.Kind = Acquire
		case o.Shared:
			in.Kind, in.Token = ReleaseShared, token
		default:
			in.Kind, in.Token = Release, token
		}
		var ret LockOut
		switch {
		case o.unknown() && effects:
			continue
		case o.unknown():
			out = append(out, operation(in, o.Invoked, LockOut{Ret: Unanswered}, never))
			continue
		case o.Kind == KindAcquire && o.ok():
			ret = LockOut{Ret: Granted, Token: token}
			if o.Permit != nil {
				ret.Permit, ret.HasPermit = *o.Permit, true
			}
		case o.Kind == KindAcquire && o.why() == "HELD":
			ret = LockOut{Ret: Refused}
		case o.Kind == KindAcquire && o.why() == "LEAKED_HOLD":
			ret = LockOut{Ret: Leaked}
		case o.Kind == KindRelease && o.ok():
			ret = LockOut{Ret: Released}
		case o.Kind == KindRelease && o.why() == "STALE_TOKEN":
			ret = LockOut{Ret: Stale}
		default:
			continue
		}
		out = append(out, operation(in, o.Invoked, ret, ns(o.DoneAt)))
	}
	if effects {
		out = append(out, storeEffects(key, ops, truth)...)
	}
	out = append(out, sessionEnds(key, first, aliveAt, committedBefore, truth)...)
	out = append(out, forceReleases(key, ops, truth)...)
	// The epoch record's writes that were advances, in order, are the advances made; when
	// there are as many as advance calls, each call is placed at its revision.
	revs := truth.advances()
	known := len(revs) == len(advances)
	for i, a := range advances {
		in := LockIn{Kind: Revoke}
		if known {
			in.At, in.HasAt = revs[i], true
		}
		if a.ok() {
			out = append(out, operation(in, a.Invoked, LockOut{Ret: Done}, ns(a.DoneAt)))
		} else {
			out = append(out, operation(in, a.Invoked, LockOut{Ret: Unanswered}, never))
		}
	}
	return out
}

// storeEffects: what the acquires and releases whose answers were lost did, from the store.
// An acquire has an effect only by making a holder record on its session's lease, a
// release only by deleting the hold its token names. Each such record a lost call may have
// made is a grant of its own, from the earliest call of the session that may have made it
// until the store showed it (or an acknowledgement came back, if earlier); each delete a
// lost release may have made, likewise, unless an acknowledged release claims it or the
// service took the hold away (session end, advance, force release: their own operations).
func storeEffects(key string, ops []*Op, truth *Truth) []porcupine.Operation {
	sessions := map[int64]bool{}
	for _, o := range ops {
		if o.unknown() && (o.Kind == KindAcquire || o.Kind == KindRelease) && o.Session != nil {
			sessions[*o.Session] = true
		}
	}
	var out []porcupine.Operation
	for s := range sessions {
		for _, h := range truth.holdsOn(key, s) {
			token, ok := truth.tokenAt(h.rev)
			if !ok {
				continue
			}
			shared := truth.isShared(key, h.rev)
			from, by, lost, mayHave := uint64(math.MaxUint64), h.made, false, false
			for _, o := range ops {
				if o.Kind != KindAcquire || !o.sessionIs(s) || o.Invoked > h.made ||
					!(o.unknown() || o.tokenIs(token)) {
					continue
				}
				mayHave = true
				from = min(from, o.Invoked)
				lost = lost || o.unknown()
				if o.ok() {
					by = min(by, o.DoneAt)
				}
			}
			if mayHave && lost {
				kind := Acquire
				if shared {
					kind = AcquireShared
				}
				granted := LockOut{Ret: Granted, Token: token}
				// A semaphore's record is a permit's: the grant names it.
				if p, ok := truth.permitAt(key, h.rev); ok {
					granted.Permit, granted.HasPermit = p, true
				}
				out = append(out, operation(LockIn{Kind: kind, Session: s}, from,
					granted, ns(max(by, from))))
			}
			if !h.hasGone || truth.revoked(key, h.rev) {
				continue
			}
			from, acked, claimed := uint64(math.MaxUint64), false, false
			for _, o := range ops {
				if o.Kind != KindRelease || !o.sessionIs(s) || !o.tokenIs(token) ||
					o.Invoked > h.gone || o.failed() {
					continue
				}
				claimed = true
				acked = acked || o.ok()
				from = min(from, o.Invoked)
			}
			if claimed && !acked {
				kind := Release
				if shared {
					kind = ReleaseShared
				}
				out = append(out, operation(LockIn{Kind: kind, Session: s, Token: token}, from,
					LockOut{Ret: Released}, ns(max(h.gone, from))))
			}
		}
	}
	return out
}

// sessionEnds: each session that may have held the key and ended, at its commit revision,
// between the last call that shows it alive and when the watcher saw its record deleted.
// Left out: a session that ended before its first call that may have held (it never held
// the key), and one whose end took no hold of this key away where the log has the key's
// records (it changes nothing, and would only widen the search).
func sessionEnds(key string, first, aliveAt map[int64]uint64, committedBefore func(int64) uint64, truth *Truth) []porcupine.Operation {
	logged := truth.logged(key)
	var out []porcupine.Operation
	for s, f := range first {
		seen, ended := truth.sessSeen[s]
		if !ended || seen < f {
			continue
		}
		at, hasAt := truth.sessEnd[s]
		took := false
		for _, h := range truth.holdsOn(key, s) {
			exists, d, gone := truth.deletedAt(key, h.rev)
			took = took || (exists && (!gone || (hasAt && d == at)))
		}
		if logged && !took {
			continue
		}
		from := f
		if a, ok := aliveAt[s]; ok {
			from = max(from, a)
		}
		if hasAt {
			from = max(from, committedBefore(at))
		}
		from = min(from, seen)
		out = append(out, operation(LockIn{Kind: Expire, Session: s, At: at, HasAt: hasAt}, from,
			LockOut{Ret: Done}, ns(seen)))
	}
	return out
}

// forceReleases: a force-released hold's session loses the key at the force revision,
// after the gate invoked the release (or the hold was seen made, if the history lacks the
// call) and before the watcher saw the delete.
func forceReleases(key string, ops []*Op, truth *Truth) []porcupine.Operation {
	var out []porcupine.Operation
	for _, h := range truth.forcedHolds(key) {
		from := h.made
		for _, o := range ops {
			if o.Kind == KindForce && (!h.hasGone || o.Invoked <= h.gone) {
				from = max(from, o.Invoked)
			}
		}
		in := LockIn{Kind: Expire, Session: h.lease, At: h.at, HasAt: true}
		if h.hasGone {
			out = append(out, operation(in, from, LockOut{Ret: Done}, ns(max(h.gone, from))))
		} else {
			out = append(out, operation(in, from, LockOut{Ret: Unanswered}, never))
		}
	}
	return out
}
