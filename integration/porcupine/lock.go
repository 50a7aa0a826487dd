package main

import (
	"hash/fnv"
	"slices"

	"github.com/anishathalye/porcupine"
)

// The lock of one key as a sequential object: a fenced reader-writer mutex. One exclusive
// holder at a time, or any number of shared holders (a shared: true class) and no
// exclusive one; every new grant's token is above every token granted before, and commits
// (grants, session ends, epoch advances, force releases) come in the store's revision
// order. An exclusive class's key never sees a shared operation, so there it is the plain
// fenced mutex. A set (AcquireAll) is one operation per key, each key's part an ordinary
// exclusive acquire and release, as the gate records and models it.

// LockOpKind is what a lock operation asked for.
type LockOpKind int

const (
	Acquire LockOpKind = iota
	Release
	AcquireShared
	ReleaseShared
	// Expire: the session ended (expiry or close) or operators force-released its hold:
	// whatever it held is gone.
	Expire
	// Revoke: an epoch advance deleted every hold.
	Revoke
)

// LockIn is an operation's input.
type LockIn struct {
	Kind    LockOpKind
	Session int64
	// Release: the token released.
	Token uint64
	// At: the store revision the operation committed at, where the store log says
	// (HasAt); commits must come in revision order.
	At    int64
	HasAt bool
}

// LockRet is what an operation was answered.
type LockRet int

const (
	// Unanswered: the outcome is unknown (info, or no completion); Porcupine's convention,
	// the return time is infinite. The step applies whatever the operation may have done,
	// and placing it last is its not having happened.
	Unanswered LockRet = iota
	Granted
	// Refused: HELD, another session held the key.
	Refused
	// Leaked: LEAKED_HOLD, another session held it (a sibling replica, which the model does
	// not tell apart from any other session), or the caller's own session held it in the
	// other mode.
	Leaked
	Released
	// Stale: STALE_TOKEN, not the current grant.
	Stale
	// Done: a store-side change (session end, advance, force release) was seen.
	Done
)

// LockOut is an operation's answer.
type LockOut struct {
	Ret LockRet
	// Granted: the token.
	Token uint64
	// Granted on a semaphore's key: the permit (HasPermit). A mutex's grant names none.
	Permit    uint32
	HasPermit bool
}

// holding: one hold. A token not Known is a grant whose answer was lost.
type holding struct {
	Session int64
	Token   uint64
	Known   bool
}

// LockState is the lock's state; a value (Step copies before it changes anything).
type LockState struct {
	Held   bool
	Holder holding
	// Shared holds, by session.
	Readers []holding
	// Last: the highest token granted so far.
	Last uint64
	// Rev: the highest commit revision placed so far.
	Rev int64
}

func revisionOf(token uint64) int64 { return int64(token & maxRevision) }

func (s *LockState) reader(session int64) (int, bool) {
	return slices.BinarySearchFunc(s.Readers, session, func(h holding, x int64) int {
		switch {
		case h.Session < x:
			return -1
		case h.Session > x:
			return 1
		}
		return 0
	})
}

func (s *LockState) setReader(h holding) {
	i, found := s.reader(h.Session)
	s.Readers = slices.Clone(s.Readers)
	if found {
		s.Readers[i] = h
	} else {
		s.Readers = slices.Insert(s.Readers, i, h)
	}
}

func (s *LockState) dropReader(session int64) {
	if i, found := s.reader(session); found {
		s.Readers = slices.Delete(slices.Clone(s.Readers), i, i+1)
	}
}

// ours: the exclusive hold is session's, under token (or under a token never seen).
func (s *LockState) ours(session int64, token uint64) bool {
	return s.Held && s.Holder.Session == session && (!s.Holder.Known || s.Holder.Token == token)
}

func (s *LockState) oursShared(session int64, token uint64) bool {
	i, found := s.reader(session)
	return found && (!s.Readers[i].Known || s.Readers[i].Token == token)
}

// heldByOther: another session holds, exclusively or shared (what refuses an exclusive
// acquire).
func (s *LockState) heldByOther(session int64) bool {
	if s.Held && s.Holder.Session != session {
		return true
	}
	for _, r := range s.Readers {
		if r.Session != session {
			return true
		}
	}
	return false
}

// newGrant: a token a new hold may carry: above every earlier grant and committed after
// every commit placed so far.
func (s *LockState) newGrant(t uint64) bool {
	return t > s.Last && revisionOf(t) > s.Rev
}

// lockStep is the sequential specification.
func lockStep(state, input, output any) (bool, any) {
	s := state.(LockState)
	in, out := input.(LockIn), output.(LockOut)
	if in.HasAt {
		if in.At < s.Rev {
			// Out of the store's order: impossible for an answered operation; for one of
			// unknown outcome, placed here it had no effect.
			return out.Ret == Unanswered, s
		}
		s.Rev = in.At
	}
	switch in.Kind {
	case Acquire:
		return acquire(s, in.Session, out)
	case AcquireShared:
		return acquireShared(s, in.Session, out)
	case Release:
		switch out.Ret {
		case Unanswered, Released:
			mine := s.ours(in.Session, in.Token)
			if mine {
				s.Held, s.Holder = false, holding{}
			}
			return mine || out.Ret == Unanswered, s
		case Stale:
			current := s.Held && s.Holder == holding{in.Session, in.Token, true}
			return !current, s
		}
	case ReleaseShared:
		switch out.Ret {
		case Unanswered, Released:
			mine := s.oursShared(in.Session, in.Token)
			if mine {
				s.dropReader(in.Session)
			}
			return mine || out.Ret == Unanswered, s
		case Stale:
			i, found := s.reader(in.Session)
			current := found && s.Readers[i] == holding{in.Session, in.Token, true}
			return !current, s
		}
	case Expire:
		if s.Held && s.Holder.Session == in.Session {
			s.Held, s.Holder = false, holding{}
		}
		s.dropReader(in.Session)
		return true, s
	case Revoke:
		s.Held, s.Holder, s.Readers = false, holding{}, nil
		return true, s
	}
	return false, s
}

func acquire(s LockState, session int64, out LockOut) (bool, any) {
	switch out.Ret {
	case Unanswered:
		if !s.Held && len(s.Readers) == 0 {
			s.Held, s.Holder = true, holding{Session: session}
		}
		return true, s
	case Granted:
		t := out.Token
		if out.HasPermit {
			// A permit: a semaphore's grant, never a mutex's.
			return false, s
		}
		switch {
		case s.Held && s.Holder.Session == session && s.Holder.Known:
			// A retried acquire answered with the grant the session already has.
			return s.Holder.Token == t, s
		case s.Held && s.Holder.Session == session:
			s.Holder = holding{session, t, true}
			s.Last = max(s.Last, t)
			return true, s
		case !s.Held && len(s.Readers) == 0 && s.newGrant(t):
			s.Held, s.Holder = true, holding{session, t, true}
			s.Last, s.Rev = t, revisionOf(t)
			return true, s
		}
		return false, s
	case Refused:
		return s.heldByOther(session), s
	case Leaked:
		_, reads := s.reader(session)
		return s.heldByOther(session) || reads, s
	}
	return false, s
}

func acquireShared(s LockState, session int64, out LockOut) (bool, any) {
	i, found := s.reader(session)
	switch out.Ret {
	case Unanswered:
		if !s.Held && !found {
			s.setReader(holding{Session: session})
		}
		return true, s
	case Granted:
		t := out.Token
		switch {
		case found && s.Readers[i].Known:
			return s.Readers[i].Token == t, s
		case found:
			s.setReader(holding{session, t, true})
			s.Last = max(s.Last, t)
			return true, s
		case !s.Held && s.newGrant(t):
			s.setReader(holding{session, t, true})
			s.Last, s.Rev = t, revisionOf(t)
			return true, s
		}
	}
	return false, s
}

func lockEqual(a, b any) bool {
	x, y := a.(LockState), b.(LockState)
	return x.Held == y.Held && x.Holder == y.Holder && x.Last == y.Last && x.Rev == y.Rev &&
		slices.Equal(x.Readers, y.Readers)
}

func lockHash(state any) uint64 {
	s := state.(LockState)
	h := fnv.New64a()
	var b [8]byte
	put := func(v uint64) {
		for i := range b {
			b[i] = byte(v >> (8 * i))
		}
		h.Write(b[:])
	}
	if s.Held {
		put(uint64(s.Holder.Session))
		put(s.Holder.Token)
	}
	for _, r := range s.Readers {
		put(uint64(r.Session))
		put(r.Token)
	}
	put(s.Last)
	put(uint64(s.Rev))
	return h.Sum64()
}

// LockModel is the lock's porcupine.Model.
var LockModel = porcupine.Model{
	Init:  func() any { return LockState{} },
	Step:  lockStep,
	Equal: lockEqual,
	Hash:  lockHash,
}
