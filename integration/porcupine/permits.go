package main

import (
	"hash/fnv"
	"slices"

	"github.com/anishathalye/porcupine"
)

// The lock of a semaphore's key (a permits: N class, issue 53) as a sequential object: up
// to N sessions hold at once, each on its own permit below N, a permit held by one session
// at a time; every new grant's token is above every earlier grant's of the key (a grant is
// a commit at a new revision, whichever permit it takes), and commits come in the store's
// revision order. The operations are the lock's (LockIn: the store log's session ends,
// advances and lost answers read the same way); a grant's answer names its permit
// (LockOut.Permit). The gate's search has the same specification
// (integration/gate/src/linearize/permits.rs).

// permitHolding: one session's permit. A token not Known is a grant whose answer was lost;
// its permit is then not KnownPermit either where the store log cannot say which it was: it
// counts toward N and holds no particular permit.
type permitHolding struct {
	Session     int64
	Permit      uint32
	KnownPermit bool
	Token       uint64
	Known       bool
}

// PermitsState is a semaphore's state; a value (steps copy before they change it).
type PermitsState struct {
	// Holders, by session.
	Holders []permitHolding
	// Last: the highest token granted so far.
	Last uint64
	// Rev: the highest commit revision placed so far.
	Rev int64
}

func (s *PermitsState) holder(session int64) (int, bool) {
	return slices.BinarySearchFunc(s.Holders, session, func(h permitHolding, x int64) int {
		switch {
		case h.Session < x:
			return -1
		case h.Session > x:
			return 1
		}
		return 0
	})
}

func (s *PermitsState) set(h permitHolding) {
	i, found := s.holder(h.Session)
	s.Holders = slices.Clone(s.Holders)
	if found {
		s.Holders[i] = h
	} else {
		s.Holders = slices.Insert(s.Holders, i, h)
	}
}

func (s *PermitsState) drop(session int64) {
	if i, found := s.holder(session); found {
		s.Holders = slices.Delete(slices.Clone(s.Holders), i, i+1)
	}
}

// taken: permit is held by a session other than session.
func (s *PermitsState) taken(permit uint32, session int64) bool {
	for _, h := range s.Holders {
		if h.Session != session && h.KnownPermit && h.Permit == permit {
			return true
		}
	}
	return false
}

// ours: session holds under token (or under a token never seen).
func (s *PermitsState) ours(session int64, token uint64) bool {
	i, found := s.holder(session)
	return found && (!s.Holders[i].Known || s.Holders[i].Token == token)
}

// permitsModel is the porcupine.Model of a semaphore of n permits.
func permitsModel(n uint32) porcupine.Model {
	full := func(s *PermitsState) bool { return len(s.Holders) >= int(n) }
	step := func(state, input, output any) (bool, any) {
		s := state.(PermitsState)
		in, out := input.(LockIn), output.(LockOut)
		if in.HasAt {
			if in.At < s.Rev {
				// Out of the store's order: impossible for an answered operation; for one
				// of unknown outcome, placed here it had no effect.
				return out.Ret == Unanswered, s
			}
			s.Rev = in.At
		}
		switch in.Kind {
		case Acquire:
			i, holds := s.holder(in.Session)
			switch out.Ret {
			case Unanswered:
				if !holds && !full(&s) {
					s.set(permitHolding{Session: in.Session})
				}
				return true, s
			case Granted:
				p, t := out.Permit, out.Token
				if !out.HasPermit || p >= n || s.taken(p, in.Session) {
					return false, s
				}
				switch {
				case holds && s.Holders[i].Known:
					// A retried acquire answered with the permit the session already has.
					h := s.Holders[i]
					return h.Token == t && h.KnownPermit && h.Permit == p, s
				case holds:
					if s.Holders[i].KnownPermit && s.Holders[i].Permit != p {
						return false, s
					}
					s.set(permitHolding{in.Session, p, true, t, true})
					s.Last = max(s.Last, t)
					return true, s
				case !full(&s) && t > s.Last && revisionOf(t) > s.Rev:
					s.set(permitHolding{in.Session, p, true, t, true})
					s.Last, s.Rev = t, revisionOf(t)
					return true, s
				}
				return false, s
			case Refused:
				// HELD: every permit held, none by the caller (its own would be given back).
				return !holds && full(&s), s
			case Leaked:
				// LEAKED_HOLD: another session holds a permit (its identity and instance,
				// which the model does not know, are the caller's).
				for _, h := range s.Holders {
					if h.Session != in.Session {
						return true, s
					}
				}
				return false, s
			}
		case Release:
			switch out.Ret {
			case Unanswered, Released:
				mine := s.ours(in.Session, in.Token)
				if mine {
					s.drop(in.Session)
				}
				return mine || out.Ret == Unanswered, s
			case Stale:
				i, holds := s.holder(in.Session)
				return !(holds && s.Holders[i].Known && s.Holders[i].Token == in.Token), s
			}
		case Expire:
			s.drop(in.Session)
			return true, s
		case Revoke:
			s.Holders = nil
			return true, s
		}
		return false, s
	}
	return porcupine.Model{
		Init:  func() any { return PermitsState{} },
		Step:  step,
		Equal: permitsEqual,
		Hash:  permitsHash,
	}
}

func permitsEqual(a, b any) bool {
	x, y := a.(PermitsState), b.(PermitsState)
	return x.Last == y.Last && x.Rev == y.Rev && slices.Equal(x.Holders, y.Holders)
}

func permitsHash(state any) uint64 {
	s := state.(PermitsState)
	h := fnv.New64a()
	var b [8]byte
	put := func(v uint64) {
		for i := range b {
			b[i] = byte(v >> (8 * i))
		}
		h.Write(b[:])
	}
	for _, x := range s.Holders {
		put(uint64(x.Session))
		put(uint64(x.Permit))
		put(x.Token)
	}
	put(s.Last)
	put(uint64(s.Rev))
	return h.Sum64()
}
