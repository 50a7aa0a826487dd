package lock

// Stack tests of semaphores (see integration_test.go): the test registry's class of
// LOCK_TEST_SEM_PERMITS permits under LOCK_TEST_SEM_PREFIX.

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/fenced-lock/fenced-lock/clients/go/lockv1"
)

func semPermits(t *testing.T) int {
	t.Helper()
	n, err := strconv.Atoi(env(t, "LOCK_TEST_SEM_PERMITS"))
	if err != nil || n < 2 {
		t.Fatalf("LOCK_TEST_SEM_PERMITS: %v", err)
	}
	return n
}

func inspect(ctx context.Context, t *testing.T, c *Client, key string) *lockv1.InspectResponse {
	t.Helper()
	r, err := c.RPC().Inspect(keyed(ctx, key), &lockv1.InspectRequest{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func validToken(ctx context.Context, t *testing.T, c *Client, key string, token uint64) bool {
	t.Helper()
	r, err := c.RPC().ValidateToken(keyed(ctx, key), &lockv1.ValidateTokenRequest{Key: key, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	return r.GetValid()
}

type permitted struct {
	permit *Permit
	err    error
}

// N Clients (two identities, sibling Clients of each) hold the N permits of a key at once,
// each its own permit and token; the next is refused HELD without a wait, then waits and
// is handed the permit a release frees, under a greater token.
func TestStackPermitsHeldAtOnceAndTheNextWaitsForARelease(t *testing.T) {
	n := semPermits(t)
	key := testKey(t, "LOCK_TEST_SEM_PREFIX")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	who := []string{"LOCK", "LOCK_OTHER"}
	var held []*Permit
	for i := range n {
		p, err := stackClient(t, who[i%2]).TryAcquirePermit(ctx, key, noFence(t))
		if err != nil {
			t.Fatalf("permit holder %d: %v", i, err)
		}
		held = append(held, p)
	}
	var permits []uint32
	tokens := map[uint64]bool{}
	for _, p := range held {
		permits = append(permits, p.Permit())
		tokens[p.Token()] = true
	}
	slices.Sort(permits)
	for i, p := range permits {
		if p != uint32(i) {
			t.Fatalf("%d holders hold permits %v", n, permits)
		}
	}
	if len(tokens) != n {
		t.Fatal("two permit grants share a token")
	}
	last := stackClient(t, "LOCK_OTHER")
	seen := inspect(ctx, t, last, key)
	if !seen.GetHeld() || seen.GetPermitsHeld() != uint32(n) || seen.GetPermits() != uint32(n) {
		t.Fatalf("inspect: held %v, %d of %d permits", seen.GetHeld(), seen.GetPermitsHeld(), seen.GetPermits())
	}
	if p, err := last.TryAcquirePermit(ctx, key, noFence(t)); !errors.Is(err, ErrHeld) {
		t.Fatalf("one holder too many: %v (permit %v)", err, p)
	}
	got := make(chan permitted, 1)
	go func() {
		p, err := last.AcquirePermit(ctx, key, noFence(t))
		got <- permitted{p, err}
	}()
	select {
	case r := <-got:
		t.Fatalf("the waiter did not wait: %v", r.err)
	case <-time.After(time.Second):
	}
	freed := held[1]
	if err := freed.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("the waiter: %v", r.err)
	}
	if r.permit.Permit() != freed.Permit() || r.permit.Token() <= freed.Token() {
		t.Fatalf("the waiter got permit %d (freed %d); greater token: %v",
			r.permit.Permit(), freed.Permit(), r.permit.Token() > freed.Token())
	}
	if validToken(ctx, t, last, key, freed.Token()) || !validToken(ctx, t, last, key, r.permit.Token()) {
		t.Fatal("the freed permit's old token is current, or its new one is not")
	}
	for _, p := range append(slices.Delete(held, 1, 2), r.permit) {
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if seen := inspect(ctx, t, last, key); seen.GetHeld() || seen.GetPermitsHeld() != 0 {
		t.Fatalf("after every release: held %v, %d permits", seen.GetHeld(), seen.GetPermitsHeld())
	}
}

// A Client's second acquire of a key nests on its permit: the same permit and token, one
// permit held; the service hears the last release only.
func TestStackPermitReentry(t *testing.T) {
	c := stackClient(t, "LOCK")
	look := stackClient(t, "LOCK_OTHER")
	key := testKey(t, "LOCK_TEST_SEM_PREFIX")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	outer, err := c.AcquirePermit(ctx, key, noFence(t))
	if err != nil {
		t.Fatal(err)
	}
	inner, err := c.TryAcquirePermit(ctx, key, noFence(t))
	if err != nil {
		t.Fatal(err)
	}
	if inner.Permit() != outer.Permit() || inner.Token() != outer.Token() {
		t.Fatal("the nested acquire is not the same permit grant")
	}
	if n := inspect(ctx, t, look, key).GetPermitsHeld(); n != 1 {
		t.Fatalf("%d permits held by one nested Client", n)
	}
	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !validToken(ctx, t, look, key, inner.Token()) {
		t.Fatal("released while a nested Permit holds it")
	}
	if err := inner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if validToken(ctx, t, look, key, inner.Token()) {
		t.Fatal("still held after the last release")
	}
}

// The mode must fit the class: a permit of a class that is no semaphore, and an exclusive
// or shared hold of a semaphore's key, are refused ErrMalformedRequest.
func TestStackPermitsOnlyOnASemaphore(t *testing.T) {
	c := stackClient(t, "LOCK")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := c.TryAcquirePermit(ctx, testKey(t, "LOCK_TEST_PREFIX"), noFence(t))
	var e *Error
	if !errors.Is(err, ErrMalformedRequest) || !errors.As(err, &e) || e.Reason != "MALFORMED_REQUEST" {
		t.Fatalf("a permit of an exclusive class: %v", err)
	}
	sem := testKey(t, "LOCK_TEST_SEM_PREFIX")
	if _, err := c.TryAcquire(ctx, sem, noFence(t)); !errors.Is(err, ErrMalformedRequest) {
		t.Fatalf("an exclusive hold of a semaphore's key: %v", err)
	}
	if _, err := c.TryAcquireShared(ctx, sem, noFence(t)); !errors.Is(err, ErrMalformedRequest) {
		t.Fatalf("a shared hold of a semaphore's key: %v", err)
	}
}
