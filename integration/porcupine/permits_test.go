package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

// A semaphore of 3 permits, by hand: its model directly, then whole history folders with
// permit records in the store log and writes fenced per permit.

func grantPermit(s int64, call, ret int64, rev int64, permit uint32) porcupine.Operation {
	return op(LockIn{Kind: Acquire, Session: s}, call, ret,
		LockOut{Ret: Granted, Token: tok(rev), Permit: permit, HasPermit: true})
}

func held(s int64, call, ret int64) porcupine.Operation {
	return op(LockIn{Kind: Acquire, Session: s}, call, ret, LockOut{Ret: Refused})
}

// Three sessions on permits 0, 1, 2 at once, released, then a fourth on permit 0.
func threeThenAFourth() []porcupine.Operation {
	return []porcupine.Operation{
		grantPermit(1, 0, 10, 5, 0), grantPermit(2, 5, 20, 6, 1), grantPermit(3, 8, 30, 7, 2),
		release(1, 100, 101, 5), release(2, 110, 111, 6), release(3, 120, 121, 7),
		grantPermit(4, 90, 105, 11, 0), release(4, 130, 131, 11),
	}
}

func TestPermitsModel(t *testing.T) {
	sem := permitsModel(3)
	expect(t, "three at once, then a fourth", sem, threeThenAFourth(), VerdictOk)
	expect(t, "a mutex's model refuses them", LockModel, threeThenAFourth(), VerdictIllegal)

	h := append(threeThenAFourth(), grantPermit(5, 40, 50, 8, 3), release(5, 60, 61, 8))
	expect(t, "permit 3 of 3 (an N+1st)", sem, h, VerdictIllegal)
	h = append(threeThenAFourth(), grantPermit(5, 40, 50, 8, 1), release(5, 60, 61, 8))
	expect(t, "permit 1 twice at once", sem, h, VerdictIllegal)
	// Session 2's end (placed at revision 8) freed permit 1 before session 5's grant at 9.
	h = append(threeThenAFourth()[:6:6],
		op(LockIn{Kind: Expire, Session: 2, At: 8, HasAt: true}, 31, 38, LockOut{Ret: Done}),
		grantPermit(5, 40, 50, 9, 1), release(5, 60, 61, 9))
	h[4] = op(LockIn{Kind: Release, Session: 2, Token: tok(6)}, 110, 111, LockOut{Ret: Stale})
	expect(t, "permit 1 again after its session ended", sem, h, VerdictOk)

	h = append(threeThenAFourth(), held(6, 35, 36))
	expect(t, "HELD while every permit was held", sem, h, VerdictOk)
	h = append(threeThenAFourth(), held(6, 140, 145))
	expect(t, "HELD with every permit free", sem, h, VerdictIllegal)
	h = append(threeThenAFourth(), held(1, 35, 36))
	expect(t, "HELD to a holder (its own permit is given back)", sem, h, VerdictIllegal)

	// A grant acknowledged after another was asked for, with a lower token: backwards,
	// whichever permits they are.
	h = []porcupine.Operation{grantPermit(1, 0, 10, 9, 0), grantPermit(2, 20, 30, 8, 1)}
	expect(t, "token backwards across permits", sem, h, VerdictIllegal)
	// A retried acquire answered with the permit the session holds.
	h = []porcupine.Operation{grantPermit(1, 0, 10, 5, 2), grantPermit(1, 20, 30, 5, 2)}
	expect(t, "the same permit given back", sem, h, VerdictOk)
	h[1] = grantPermit(1, 20, 30, 5, 1)
	expect(t, "another permit given back", sem, h, VerdictIllegal)
	// A grant of unknown outcome counts toward N.
	h = []porcupine.Operation{
		grantPermit(1, 0, 10, 5, 0), grantPermit(2, 0, 10, 6, 1),
		op(LockIn{Kind: Acquire, Session: 3}, 0, never, LockOut{Ret: Unanswered}),
		held(4, 20, 30),
	}
	expect(t, "an unanswered grant explains HELD", sem, h, VerdictOk)
	// A grant without a permit is no semaphore's.
	h = []porcupine.Operation{op(LockIn{Kind: Acquire, Session: 1}, 0, 10, LockOut{Ret: Granted, Token: tok(5)})}
	expect(t, "a grant naming no permit", sem, h, VerdictIllegal)
	h = []porcupine.Operation{grantPermit(1, 0, 10, 5, 0)}
	expect(t, "a mutex granting a permit", LockModel, h, VerdictIllegal)
}

// semEvents: client c (session s) granted permit p at revision rev over [t0, t0+10], a
// write under it at t0+11, a release at t1.
func semEvents(c int, s int64, p uint32, rev int64, t0, t1 int) []string {
	token := tok(rev)
	return []string{
		fmt.Sprintf(`{"c":%d,"op":1,"t":%d,"ph":"invoke","f":"acquire","key":"sem/k","session":%d}`, c, t0, s),
		fmt.Sprintf(`{"c":%d,"op":1,"t":%d,"ph":"ok","f":"acquire","session":%d,"token":%d,"permit":%d}`, c, t0+10, s, token, p),
		fmt.Sprintf(`{"c":%d,"op":2,"t":%d,"ph":"invoke","f":"write","key":"sem/k","session":%d,"token":%d,"permit":%d}`, c, t0+11, s, token, p),
		fmt.Sprintf(`{"c":%d,"op":2,"t":%d,"ph":"ok","f":"write"}`, c, t0+12),
		fmt.Sprintf(`{"c":%d,"op":3,"t":%d,"ph":"invoke","f":"release","key":"sem/k","session":%d,"token":%d,"permit":%d}`, c, t1, s, token, p),
		fmt.Sprintf(`{"c":%d,"op":3,"t":%d,"ph":"ok","f":"release"}`, c, t1+1),
	}
}

func permitPut(rev int64, p uint32, lease int64, seen int) string {
	return fmt.Sprintf(`{"revision":%d,"seen":%d,"key":"/p/sem/k//%d","delete":false,"create_revision":%d,"lease":%d,"hold":%d}`,
		rev, seen, p, rev, lease, rev)
}

func permitDel(rev, hold int64, p uint32, lease int64, seen int) string {
	return fmt.Sprintf(`{"revision":%d,"seen":%d,"key":"/p/sem/k//%d","delete":true,"create_revision":%d,"lease":%d,"hold":%d}`,
		rev, seen, p, hold, lease, hold)
}

func TestSemaphoreHistories(t *testing.T) {
	var events []string
	events = append(events, semEvents(1, 16, 0, 5, 0, 100)...)
	events = append(events, semEvents(2, 32, 1, 6, 10, 110)...)
	events = append(events, semEvents(3, 48, 2, 7, 20, 120)...)
	store := storeLines(
		permitPut(5, 0, 16, 10), permitPut(6, 1, 32, 20), permitPut(7, 2, 48, 30),
		permitDel(10, 5, 0, 16, 101), permitDel(11, 6, 1, 32, 111), permitDel(12, 7, 2, 48, 121),
	)
	dir := folder(t, map[string][]string{"worker-0.jsonl": events, storeLog: store})
	got, illegal := verdicts(t, dir)
	if illegal != 0 || got["sem/k"].Verdict != VerdictOk || got["sem/k"].Permits != 3 {
		t.Fatalf("three at once: %+v", got)
	}

	// A fourth on permit 3 (an N+1st), whose answer was lost: the store log's record is
	// the grant.
	over := semEvents(4, 64, 3, 8, 40, 60)
	over[1] = `{"c":4,"op":1,"t":50,"ph":"info","f":"acquire","why":"NO_QUORUM"}`
	over = over[:2]
	dir = folder(t, map[string][]string{
		"worker-0.jsonl": append(append([]string{}, events...), over...),
		storeLog: storeLines(
			permitPut(5, 0, 16, 10), permitPut(6, 1, 32, 20), permitPut(7, 2, 48, 30),
			permitPut(8, 3, 64, 45),
			permitDel(10, 5, 0, 16, 101), permitDel(11, 6, 1, 32, 111), permitDel(12, 7, 2, 48, 121),
		),
	})
	got, illegal = verdicts(t, dir)
	if illegal != 1 || got["sem/k"].Lock != VerdictIllegal || got["sem/k"].Fences != VerdictOk {
		t.Fatalf("permit 3 of 3 in the store: %+v", got)
	}

	// Writes of different permits out of token order are fine; on one permit, not.
	late := func(c, op, at int, token uint64, p uint32) []string {
		return []string{
			fmt.Sprintf(`{"c":%d,"op":%d,"t":%d,"ph":"invoke","f":"write","key":"sem/k","session":16,"token":%d,"permit":%d}`, c, op, at, token, p),
			fmt.Sprintf(`{"c":%d,"op":%d,"t":%d,"ph":"ok","f":"write"}`, c, op, at+1),
		}
	}
	withLate := append(append([]string{}, events...), late(1, 9, 80, tok(5), 0)...)
	dir = folder(t, map[string][]string{"worker-0.jsonl": withLate, storeLog: store})
	if got, illegal = verdicts(t, dir); illegal != 0 {
		t.Fatalf("permit 0's write after permit 2's: %+v", got)
	}
	withLate = append(withLate, late(1, 10, 90, tok(4), 0)...)
	dir = folder(t, map[string][]string{"worker-0.jsonl": withLate, storeLog: store})
	if got, illegal = verdicts(t, dir); illegal != 1 || got["sem/k"].Fences != VerdictIllegal {
		t.Fatalf("a lower token accepted on one permit: %+v", got)
	}
}

func TestParseSemaphores(t *testing.T) {
	got, err := parseSemaphores("pay/gate-sem=3, other=2")
	if err != nil || len(got) != 2 || got["pay/gate-sem"] != 3 || got["other"] != 2 {
		t.Fatalf("%v %v", got, err)
	}
	if got, err := parseSemaphores(""); err != nil || len(got) != 0 {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []string{"x", "x=1", "=3", "x=-2", "x=y"} {
		if _, err := parseSemaphores(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if permitsOf("pay/gate-sem/r1/g0/k0", map[string]uint32{"pay/gate-sem": 3}) != 3 ||
		permitsOf("pay/gate-semx/k", map[string]uint32{"pay/gate-sem": 3}) != 0 ||
		!strings.HasPrefix(gateSemaphores, "pay/gate-sem=") {
		t.Fatal("prefixes on segment boundaries")
	}
}
