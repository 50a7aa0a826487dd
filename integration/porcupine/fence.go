package main

import "github.com/anishathalye/porcupine"

// The fenced resources a holder writes under its token, each its own object per key (a
// history is linearizable if and only if each object's is): the in-test register
// (integration/gate/src/register.rs) accepts a write whose token is not below the highest
// it accepted and serves a shared holder's read under such a token; the PostgreSQL
// reference fence (`fence < $token`) is strict and accepts a token at most once. So a
// write under the current grant's token is accepted, and one under a token older than a
// write already accepted is refused (STALE), as fencing promises.

// FenceIn is a guarded call: a write (or, for the register, a read) under Token.
type FenceIn struct {
	Token uint64
	Read  bool
}

// FenceOut is its answer.
type FenceOut int

const (
	// FenceUnknown: no answer; Porcupine's convention (infinite return time).
	FenceUnknown FenceOut = iota
	FenceAccepted
	// FenceStale: refused, the token is below the fence.
	FenceStale
)

// fenceModel: strict is PostgreSQL's rule (a token above the fence), else the register's
// (a token not below it).
func fenceModel(strict bool) porcupine.Model {
	admits := func(fence, token uint64) bool {
		if strict {
			return token > fence
		}
		return token >= fence
	}
	return porcupine.Model{
		Init: func() any { return uint64(0) },
		Step: func(state, input, output any) (bool, any) {
			fence, in, out := state.(uint64), input.(FenceIn), output.(FenceOut)
			ok := admits(fence, in.Token)
			switch out {
			case FenceUnknown:
				if ok && !in.Read {
					fence = in.Token
				}
				return true, fence
			case FenceAccepted:
				if ok && !in.Read {
					fence = in.Token
				}
				return ok, fence
			case FenceStale:
				return !ok, fence
			}
			return false, fence
		},
	}
}

// RegisterModel and PgFenceModel are the two fences' porcupine.Models.
var (
	RegisterModel = fenceModel(false)
	PgFenceModel  = fenceModel(true)
)
