package lock

// Stack tests of Observe, Campaign, AcquireAll and shared holds (see integration_test.go).

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// next is the observation's next change within d.
func next(t *testing.T, obs *Observation) Observed {
	t.Helper()
	ev, err := obs.Next()
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// Another identity observes a key: the current state, the grant (holder and instance, no
// token), then a broken stream resumed after the last revision seen: the release follows
// with no CURRENT in between. A second observation resumed from the first answer replays
// both changes. The holder's own observation carries its token.
func TestStackObserveSeesChangesAndResumes(t *testing.T) {
	holder := stackClient(t, "LOCK")
	watcher := stackClient(t, "LOCK_OTHER")
	key := testKey(t, "LOCK_TEST_PREFIX")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	obs := watcher.Observe(ctx, key)
	defer obs.Close()
	first := next(t, obs)
	if first.Change != ChangeCurrent || first.Held || first.Revision <= 0 {
		t.Fatalf("first: %v", first)
	}
	h, err := holder.Acquire(ctx, key, noFence(t))
	if err != nil {
		t.Fatal(err)
	}
	granted := next(t, obs)
	if granted.Change != ChangeGranted || !granted.Held || granted.Holder == nil ||
		granted.Holder.Instance != holder.Instance() || granted.Token() != 0 {
		t.Fatalf("granted: %v (token shown to another identity: %v)", granted, granted.Token() != 0)
	}
	own := holder.Observe(ctx, key)
	defer own.Close()
	if ev := next(t, own); ev.Change != ChangeCurrent || ev.Token() != h.Token() {
		t.Fatalf("the holder's own observation: %v, token matches %v", ev, ev.Token() == h.Token())
	}
	// Break the stream: the next call resumes after the grant's revision.
	obs.dropStream()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	released := next(t, obs)
	if released.Change != ChangeReleased || released.Held || released.Revision <= granted.Revision {
		t.Fatalf("after the break: %v", released)
	}
	replay := watcher.Observe(ctx, key, ResumeAfter(first.Revision, first.StoreEpoch))
	defer replay.Close()
	var got []Change
	for len(got) < 2 {
		got = append(got, next(t, replay).Change)
	}
	if !slices.Equal(got, []Change{ChangeGranted, ChangeReleased}) {
		t.Fatalf("resumed from the first answer: %v", got)
	}
}

// Two candidates of one identity (two Clients: two replicas): one leads, the other waits
// in the queue; a resign hands over at once, with a higher term.
func TestStackCampaignTermsRiseAndResignHandsOver(t *testing.T) {
	a := stackClient(t, "LOCK")
	b := stackClient(t, "LOCK")
	key := testKey(t, "LOCK_TEST_PREFIX")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := a.Campaign(ctx, key); !errors.Is(err, ErrOnFenceRequired) {
		t.Fatalf("%v", err)
	}
	first, err := a.Campaign(ctx, key, noFence(t))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Leadership, 1)
	go func() {
		l, err := b.Campaign(ctx, key, noFence(t))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	select {
	case <-got:
		t.Fatal("two leaders at once")
	case <-time.After(1500 * time.Millisecond):
	}
	if !first.CanLead() || !first.WasContinuous() {
		t.Fatal("the first term lapsed")
	}
	resigned := time.Now()
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	second := <-got
	if second == nil || second.Term() <= first.Term() {
		t.Fatal("the next term is not above the first")
	}
	if took := time.Since(resigned); took > 3*time.Second {
		t.Fatalf("the hand-over took %v", took)
	}
	if err := second.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// A set: one token for every key, each key held against another identity, released in
// one call; overlapping sets in opposite orders do not deadlock; a set of two TTLs is
// refused as one.
func TestStackAcquireAllOneTokenAndRelease(t *testing.T) {
	c := stackClient(t, "LOCK")
	other := stackClient(t, "LOCK_OTHER")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keys := []string{testKey(t, "LOCK_TEST_PREFIX"), testKey(t, "LOCK_TEST_PREFIX"), testKey(t, "LOCK_TEST_PREFIX")}
	set, err := c.AcquireAll(ctx, keys, noFence(t))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(set.Keys(), slices.Sorted(slices.Values(keys))) || !set.CanStart() {
		t.Fatalf("%v", set)
	}
	for _, k := range keys {
		if _, err := other.TryAcquire(ctx, k, noFence(t)); !errors.Is(err, ErrHeld) {
			t.Fatalf("%s of the set: %v", k, err)
		}
	}
	// Another identity's set overlapping it waits, then gets every key at once.
	got := make(chan *HeldSet, 1)
	go func() {
		s, err := other.AcquireAll(ctx, []string{keys[2], keys[0]}, noFence(t))
		if err != nil {
			t.Error(err)
		}
		got <- s
	}()
	select {
	case <-got:
		t.Fatal("an overlapping set granted while the first is held")
	case <-time.After(time.Second):
	}
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second := <-got
	if second == nil || second.Token() <= set.Token() {
		t.Fatal("the second set's token")
	}
	h, err := c.TryAcquire(ctx, keys[1], noFence(t))
	if err != nil {
		t.Fatalf("the key outside the second set: %v", err)
	}
	_ = h.Release(ctx)
	_ = second.Release(ctx)
	_, err = c.AcquireAll(ctx, []string{testKey(t, "LOCK_TEST_PREFIX"), testKey(t, "LOCK_TEST_SLOW_PREFIX")}, noFence(t))
	var e *Error
	if !errors.Is(err, ErrKeySetRefused) || !errors.As(err, &e) || e.Metadata["why"] == "" {
		t.Fatalf("a set of two TTLs: %v", err)
	}
}

// Shared holds of two identities coexist; an exclusive acquire (a third Client: a
// Client holding the key shared is told LEAKED_HOLD if it asks for it exclusive) waits
// for both, and its token is above theirs.
func TestStackSharedHoldsCoexistAndExcludeExclusive(t *testing.T) {
	a := stackClient(t, "LOCK")
	b := stackClient(t, "LOCK_OTHER")
	w := stackClient(t, "LOCK")
	key := testKey(t, "LOCK_TEST_SHARED_PREFIX")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ra, err := a.AcquireShared(ctx, key, noFence(t))
	if err != nil {
		t.Fatal(err)
	}
	rb, err := b.AcquireShared(ctx, key, noFence(t))
	if err != nil {
		t.Fatalf("a second shared hold: %v", err)
	}
	if _, err := w.TryAcquire(ctx, key, noFence(t)); !errors.Is(err, ErrHeld) {
		t.Fatalf("exclusive while shared: %v", err)
	}
	got := queue(ctx, t, w, key)
	assertWaiting(t, got, time.Second)
	if err := ra.Release(ctx); err != nil {
		t.Fatal(err)
	}
	assertWaiting(t, got, 500*time.Millisecond)
	if err := rb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.hold.Token() <= max(ra.Token(), rb.Token()) {
		t.Fatal("the writer's token is not above the readers'")
	}
	_ = r.hold.Release(ctx)
	if _, err := a.AcquireShared(ctx, testKey(t, "LOCK_TEST_PREFIX"), noFence(t)); !errors.Is(err, ErrMalformedRequest) {
		t.Fatalf("shared on a class that is not shared: %v", err)
	}
}
