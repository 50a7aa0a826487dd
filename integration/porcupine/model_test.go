package main

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Small hand-made histories against the models directly.

const epoch1 = uint64(1) << revisionBits

func tok(rev int64) uint64 { return epoch1 | uint64(rev) }

func op(in any, call, ret int64, out any) porcupine.Operation {
	return porcupine.Operation{Input: in, Call: call, Output: out, Return: ret}
}

func grant(s int64, call, ret int64, rev int64) porcupine.Operation {
	return op(LockIn{Kind: Acquire, Session: s}, call, ret, LockOut{Ret: Granted, Token: tok(rev)})
}

func release(s int64, call, ret int64, rev int64) porcupine.Operation {
	return op(LockIn{Kind: Release, Session: s, Token: tok(rev)}, call, ret, LockOut{Ret: Released})
}

func check(t *testing.T, m porcupine.Model, h []porcupine.Operation) Verdict {
	t.Helper()
	return verdictOf(porcupine.CheckOperationsTimeout(m, h, 10*time.Second))
}

func expect(t *testing.T, name string, m porcupine.Model, h []porcupine.Operation, want Verdict) {
	t.Helper()
	if got := check(t, m, h); got != want {
		t.Errorf("%s: %s, want %s", name, got, want)
	}
}

func TestLegalTurns(t *testing.T) {
	h := []porcupine.Operation{
		grant(1, 0, 10, 5), release(1, 20, 30, 5),
		grant(2, 25, 40, 7), // concurrent with the release: after it
		op(LockIn{Kind: Acquire, Session: 3}, 45, 50, LockOut{Ret: Refused}),
		release(2, 60, 70, 7),
		op(LockIn{Kind: Release, Session: 2, Token: tok(7)}, 80, 90, LockOut{Ret: Stale}),
	}
	expect(t, "turns", LockModel, h, VerdictOk)
}

func TestTwoHoldersOverlapping(t *testing.T) {
	h := []porcupine.Operation{
		grant(1, 0, 10, 5),
		grant(2, 20, 30, 7),
		release(1, 40, 50, 5),
	}
	expect(t, "two holders", LockModel, h, VerdictIllegal)
	// The first holder's session ended (the store placed it at revision 6) before the
	// second was granted: legal.
	h = append(h[:2:2], op(LockIn{Kind: Expire, Session: 1, At: 6, HasAt: true}, 10, 15, LockOut{Ret: Done}))
	expect(t, "two holders, the first expired", LockModel, h, VerdictOk)
	// Placed at a revision after the second grant's: the end cannot explain it.
	h[2] = op(LockIn{Kind: Expire, Session: 1, At: 8, HasAt: true}, 10, 15, LockOut{Ret: Done})
	expect(t, "two holders, the first expired too late", LockModel, h, VerdictIllegal)
}

func TestTokenGoingBackwards(t *testing.T) {
	h := []porcupine.Operation{
		grant(1, 0, 10, 9), release(1, 20, 30, 9),
		grant(2, 40, 50, 8),
	}
	expect(t, "token backwards", LockModel, h, VerdictIllegal)
	// An epoch advance raises the token whatever the revision.
	h[2] = op(LockIn{Kind: Acquire, Session: 2}, 40, 50, LockOut{Ret: Granted, Token: 2<<revisionBits | 10})
	expect(t, "next epoch", LockModel, h, VerdictOk)
	// A token of the old epoch after a newer one: backwards.
	h = append(h, release(2, 60, 70, 0), op(LockIn{Kind: Acquire, Session: 3}, 80, 90,
		LockOut{Ret: Granted, Token: tok(12)}))
	h[3] = op(LockIn{Kind: Release, Session: 2, Token: 2<<revisionBits | 10}, 60, 70, LockOut{Ret: Released})
	expect(t, "old epoch after the new", LockModel, h, VerdictIllegal)
}

func TestStaleWriteAccepted(t *testing.T) {
	w := func(token uint64, call, ret int64, out FenceOut) porcupine.Operation {
		return op(FenceIn{Token: token}, call, ret, out)
	}
	h := []porcupine.Operation{
		w(tok(5), 0, 10, FenceAccepted),
		w(tok(5), 20, 30, FenceAccepted), // the holder writes twice
		w(tok(7), 40, 50, FenceAccepted),
		w(tok(5), 60, 70, FenceStale), // a paused holder resumes: refused
	}
	expect(t, "fenced", RegisterModel, h, VerdictOk)
	expect(t, "PostgreSQL's strict fence refuses a token twice", PgFenceModel, h, VerdictIllegal)
	h[3] = w(tok(5), 60, 70, FenceAccepted)
	expect(t, "stale write accepted", RegisterModel, h, VerdictIllegal)
	// Concurrent with the newer write, the old one may have come first.
	h[3] = w(tok(5), 45, 70, FenceAccepted)
	expect(t, "concurrent", RegisterModel, h, VerdictOk)
	// A refusal with nothing newer accepted is wrong too.
	h = []porcupine.Operation{w(tok(5), 0, 10, FenceAccepted), w(tok(7), 20, 30, FenceStale)}
	expect(t, "refused though current", RegisterModel, h, VerdictIllegal)
	// A write of unknown outcome may explain a refusal, or not have happened.
	h = []porcupine.Operation{
		w(tok(7), 0, never, FenceUnknown),
		w(tok(5), 20, 30, FenceStale),
		w(tok(6), 40, 50, FenceStale),
	}
	expect(t, "unknown write", RegisterModel, h, VerdictOk)
	h[0] = w(tok(7), 0, never, FenceUnknown)
	h = append(h, w(tok(6), 60, 70, FenceAccepted))
	expect(t, "unknown write, then the refused token accepted", RegisterModel, h, VerdictIllegal)
}

func TestUnknownOutcomeGrant(t *testing.T) {
	unknown := op(LockIn{Kind: Acquire, Session: 1}, 0, never, LockOut{Ret: Unanswered})
	refused := op(LockIn{Kind: Acquire, Session: 2}, 20, 30, LockOut{Ret: Refused})
	// Nobody known holds: a HELD answer is wrong...
	expect(t, "HELD without a holder", LockModel, []porcupine.Operation{refused}, VerdictIllegal)
	// ... unless a grant whose answer was lost explains it.
	expect(t, "HELD by a lost grant", LockModel, []porcupine.Operation{unknown, refused}, VerdictOk)
	// A lost grant may also not have happened: another session is granted meanwhile.
	expect(t, "lost grant that did not happen", LockModel,
		[]porcupine.Operation{unknown, grant(2, 20, 30, 5)}, VerdictOk)
	// The session asks again and is answered the grant it already had.
	h := []porcupine.Operation{unknown, refused, grant(1, 40, 50, 5), release(1, 60, 70, 5),
		grant(2, 80, 90, 8)}
	expect(t, "lost grant answered again", LockModel, h, VerdictOk)
	// But not both: HELD for 2, then 2 granted while 1 still holds it.
	h = []porcupine.Operation{unknown, refused, grant(1, 40, 50, 5), grant(2, 55, 58, 8)}
	expect(t, "lost grant held, then a second holder", LockModel, h, VerdictIllegal)
}

func TestSharedHolds(t *testing.T) {
	sg := func(s int64, call, ret, rev int64) porcupine.Operation {
		return op(LockIn{Kind: AcquireShared, Session: s}, call, ret, LockOut{Ret: Granted, Token: tok(rev)})
	}
	sr := func(s int64, call, ret, rev int64) porcupine.Operation {
		return op(LockIn{Kind: ReleaseShared, Session: s, Token: tok(rev)}, call, ret, LockOut{Ret: Released})
	}
	readers := []porcupine.Operation{sg(1, 0, 10, 5), sg(2, 20, 30, 6), sr(1, 40, 50, 5), sr(2, 60, 70, 6)}
	expect(t, "two readers", LockModel, readers, VerdictOk)
	writerAmong := append(readers[:2:2], grant(3, 35, 38, 7))
	expect(t, "a writer among readers", LockModel, writerAmong, VerdictIllegal)
	writerAfter := append(readers, grant(3, 80, 90, 8))
	expect(t, "a writer after them", LockModel, writerAfter, VerdictOk)
	held := append(readers[:1:1], op(LockIn{Kind: Acquire, Session: 3}, 20, 30, LockOut{Ret: Refused}))
	expect(t, "a writer refused HELD by a reader", LockModel, held, VerdictOk)
}

// A search that cannot finish in its time is unknown, never ok: two dozen grants of
// unknown outcome, then an answer no order explains (every placement is tried).
func TestTimeoutIsUnknown(t *testing.T) {
	var h []porcupine.Operation
	for s := int64(1); s <= 24; s++ {
		h = append(h, op(LockIn{Kind: Acquire, Session: s}, 0, never, LockOut{Ret: Unanswered}))
	}
	h = append(h, release(99, 100, 110, 5))
	got := verdictOf(porcupine.CheckOperationsTimeout(LockModel, h, 50*time.Millisecond))
	if got != VerdictUnknown {
		t.Fatalf("%s, want unknown", got)
	}
	if worst(VerdictOk, VerdictUnknown) != VerdictUnknown || worst(VerdictUnknown, VerdictIllegal) != VerdictIllegal {
		t.Fatal("worst")
	}
}
