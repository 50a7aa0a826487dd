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
	// Permits: the key's semaphore permits (its lock checked as a semaphore of that many),
	// absent for every other key.
	Permits uint32 `json:"permits,omitempty"`
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
	model := LockModel
	if k.Permits > 0 {
		model = permitsModel(k.Permits)
	}
	lock := check(model, k.Lock)
	ops := len(k.Lock)
	// Each permit's fence is an object of its own (a key's one fence when it has none).
	var fences []Verdict
	for _, f := range []struct {
		model   porcupine.Model
		byFence map[int64][]porcupine.Operation
	}{{RegisterModel, k.Register}, {PgFenceModel, k.PgFence}} {
		for _, fops := range f.byFence {
			fences = append(fences, check(f.model, fops))
			ops += len(fops)
		}
	}
	fence := worst(fences...)
	return Result{
		Key:     name,
		Verdict: worst(lock, fence),
		Lock:    lock,
		Fences:  fence,
		Permits: k.Permits,
		Ops:     ops,
		Ms:      float64(time.Since(started).Microseconds()) / 1e3,
	}
}
