package main

import (
	"time"

	"github.com/anishathalye/porcupine"
)

// Verdict is one key's (or one object's) answer.
type Verdict string

const (
	VerdictOk      Verdict = "ok"
	VerdictIllegal Verdict = "illegal"
	// VerdictUnknown: the search ran out of time; nothing is claimed.
	VerdictUnknown Verdict = "unknown"
)

func verdictOf(r porcupine.CheckResult) Verdict {
	switch r {
	case porcupine.Ok:
		return VerdictOk
	case porcupine.Illegal:
		return VerdictIllegal
	}
	return VerdictUnknown
}

// worst: illegal over unknown over ok.
func worst(vs ...Verdict) Verdict {
	out := VerdictOk
	for _, v := range vs {
		switch {
		case v == VerdictIllegal:
			return VerdictIllegal
		case v == VerdictUnknown:
			out = VerdictUnknown
		}
	}
	return out
}

// Result is one key's line of output.
type Result struct {
	Key     string  `json:"key"`
	Verdict Verdict `json:"verdict"`
	// Lock: the lock object's verdict; Fences: the register's and the PostgreSQL fence's
	// together (the gate holds them to separate checks: its search, its fence check).
	Lock   Verdict `json:"lock"`
	Fences Verdict `json:"fences"`
	// Ops: operations checked, all objects.
	Ops int `json:"ops"`
	// Ms: how long the key's checks took.
	Ms float64 `json:"ms"`
}

// checkKey checks each of a key's objects with Porcupine, each bounded by timeout: a
// search that runs out of time is unknown, never ok.
func checkKey(name string, k *Key, timeout time.Duration) Result {
	started := time.Now()
	check := func(m porcupine.Model, ops []porcupine.Operation) Verdict {
		if len(ops) == 0 {
			return VerdictOk
		}
		return verdictOf(porcupine.CheckOperationsTimeout(m, ops, timeout))
	}
	lock := check(LockModel, k.Lock)
	fences := worst(check(RegisterModel, k.Register), check(PgFenceModel, k.PgFence))
	return Result{
		Key:     name,
		Verdict: worst(lock, fences),
		Lock:    lock,
		Fences:  fences,
		Ops:     len(k.Lock) + len(k.Register) + len(k.PgFence),
		Ms:      float64(time.Since(started).Microseconds()) / 1e3,
	}
}
