package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenced-lock/fenced-lock/clients/go/lockv1"
	"google.golang.org/grpc/codes"
)

func (f *fakeLock) Observe(r *lockv1.ObserveRequest, st lockv1.Lock_ObserveServer) error {
	f.mu.Lock()
	f.count("Observe", st.Context())
	call := len(f.observeReqs)
	f.observeReqs = append(f.observeReqs, r)
	script := f.observeScript
	f.mu.Unlock()
	answers, err := script(call, r)
	for _, a := range answers {
		if err := st.Send(a); err != nil {
			return nil
		}
	}
	return err
}

func (f *fakeLock) AcquireAll(ctx context.Context, r *lockv1.AcquireAllRequest) (*lockv1.AcquireAllResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("AcquireAll", ctx)
	f.acquireAllReqs = append(f.acquireAllReqs, r)
	f.token++
	keys := slices.Sorted(slices.Values(r.Keys))
	for _, k := range keys {
		f.holders[k] = r.SessionId
	}
	return &lockv1.AcquireAllResponse{Token: f.token, Keys: keys, TtlSeconds: f.ttl}, nil
}

func (f *fakeLock) ReleaseAll(ctx context.Context, r *lockv1.ReleaseAllRequest) (*lockv1.ReleaseAllResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("ReleaseAll", ctx)
	f.releaseAllReqs = append(f.releaseAllReqs, r)
	for _, k := range r.Keys {
		delete(f.holders, k)
	}
	return &lockv1.ReleaseAllResponse{ReleasedKeys: r.Keys}, nil
}

func answer(ev lockv1.ObserveEvent, rev int64, epoch uint32, held bool) *lockv1.ObserveResponse {
	a := &lockv1.ObserveResponse{Event: ev, Revision: rev, Held: held, StoreEpoch: epoch}
	if held {
		a.HolderSpiffeId, a.HolderInstance, a.GrantRevision = "spiffe://t/w", "pod-1", rev
	}
	return a
}

// A stream that ends (cleanly, or broken) is resumed after the last revision seen, with
// its store epoch, and progress marks move the resume point without being reported.
func TestObserveResumesAfterTheLastRevisionSeen(t *testing.T) {
	f, endpoint := startFake(t, 5)
	f.observeScript = func(call int, r *lockv1.ObserveRequest) ([]*lockv1.ObserveResponse, error) {
		switch call {
		case 0:
			return []*lockv1.ObserveResponse{
				answer(lockv1.ObserveEvent_OBSERVE_EVENT_CURRENT, 10, 3, false),
				answer(lockv1.ObserveEvent_OBSERVE_EVENT_GRANTED, 11, 3, true),
				answer(lockv1.ObserveEvent_OBSERVE_EVENT_PROGRESS, 15, 3, true),
			}, nil // ends cleanly, as a proxy's idle timeout does
		case 1:
			return []*lockv1.ObserveResponse{
				answer(lockv1.ObserveEvent_OBSERVE_EVENT_RELEASED, 16, 3, false),
			}, refusal(codes.Unavailable, "NO_QUORUM", "no quorum", nil).Err() // breaks
		default:
			return []*lockv1.ObserveResponse{
				answer(lockv1.ObserveEvent_OBSERVE_EVENT_EXPIRED, 17, 3, false),
			}, nil
		}
	}
	c := dialFake(t, endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	obs := c.Observe(ctx, "pay/x")
	defer obs.Close()
	var got []Change
	for range 4 {
		ev, err := obs.Next()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.Change)
		if ev.Change == ChangeGranted && (ev.Holder == nil || ev.Holder.Instance != "pod-1" || ev.Token() != 0) {
			t.Fatalf("granted: %v", ev)
		}
	}
	want := []Change{ChangeCurrent, ChangeGranted, ChangeReleased, ChangeExpired}
	if !slices.Equal(got, want) {
		t.Fatalf("changes %v, want %v", got, want)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.observeReqs) != 3 {
		t.Fatalf("%d Observe calls", len(f.observeReqs))
	}
	for i, w := range []struct {
		after int64
		epoch uint32
	}{{0, 0}, {15, 3}, {16, 3}} {
		r := f.observeReqs[i]
		if r.AfterRevision != w.after || r.AfterStoreEpoch != w.epoch {
			t.Fatalf("call %d resumed after %d/%d, want %d/%d", i, r.AfterRevision, r.AfterStoreEpoch, w.after, w.epoch)
		}
	}
	if obs.Revision() != 17 || obs.StoreEpoch() != 3 {
		t.Fatalf("resume point %d/%d", obs.Revision(), obs.StoreEpoch())
	}
}

// HISTORY_COMPACTED: observe from now, and the next CURRENT says changes were missed.
func TestObserveAfterCompactionRestartsWithAGap(t *testing.T) {
	f, endpoint := startFake(t, 5)
	f.observeScript = func(call int, r *lockv1.ObserveRequest) ([]*lockv1.ObserveResponse, error) {
		if r.AfterRevision != 0 {
			return nil, refusal(codes.OutOfRange, "HISTORY_COMPACTED", "compacted", map[string]string{"compact_revision": "50"}).Err()
		}
		return []*lockv1.ObserveResponse{answer(lockv1.ObserveEvent_OBSERVE_EVENT_CURRENT, 60, 4, true)}, nil
	}
	c := dialFake(t, endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	obs := c.Observe(ctx, "pay/x", ResumeAfter(20, 3))
	defer obs.Close()
	ev, err := obs.Next()
	if err != nil {
		t.Fatal(err)
	}
	if ev.Change != ChangeCurrent || !ev.Gap || ev.Revision != 60 || ev.StoreEpoch != 4 {
		t.Fatalf("after compaction: %v", ev)
	}
}

// A refusal no reconnect cures ends Next with its typed error.
func TestObserveRefusalIsTyped(t *testing.T) {
	f, endpoint := startFake(t, 5)
	f.observeScript = func(int, *lockv1.ObserveRequest) ([]*lockv1.ObserveResponse, error) {
		return nil, refusal(codes.PermissionDenied, "NOT_GRANTED", "no grant", nil).Err()
	}
	c := dialFake(t, endpoint)
	obs := c.Observe(context.Background(), "pay/x")
	defer obs.Close()
	if _, err := obs.Next(); !errors.Is(err, ErrNotGranted) {
		t.Fatalf("%v", err)
	}
}

// The holder's own observation carries its session id; the token it is told is never
// printed.
func TestObserveSendsTheOwnSessionAndHidesTheToken(t *testing.T) {
	f, endpoint := startFake(t, 5)
	const token = 1<<48 | 4242
	f.observeScript = func(int, *lockv1.ObserveRequest) ([]*lockv1.ObserveResponse, error) {
		a := answer(lockv1.ObserveEvent_OBSERVE_EVENT_CURRENT, 10, 1, true)
		a.Token = token
		return []*lockv1.ObserveResponse{a}, nil
	}
	c := dialFake(t, endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := c.Acquire(ctx, "pay/x", WithOnFence(func() {}))
	if err != nil {
		t.Fatal(err)
	}
	obs := c.Observe(ctx, "pay/x")
	defer obs.Close()
	ev, err := obs.Next()
	if err != nil {
		t.Fatal(err)
	}
	if ev.Token() != token {
		t.Fatal("the token")
	}
	for _, s := range []string{ev.String(), fmtV(ev), fmtSharpV(ev)} {
		if strings.Contains(s, strconv.FormatUint(token, 10)) {
			t.Fatalf("a token printed: %s", s)
		}
	}
	f.mu.Lock()
	sid := f.observeReqs[0].SessionId
	f.mu.Unlock()
	if sid != h.s.id {
		t.Fatalf("session %d, want the hold's %d", sid, h.s.id)
	}
}

// AcquireAll sends no `lock-key` (the edge decides on the body's keys), attaches the set
// to one session with one token, and ReleaseAll names the set.
func TestAcquireAllAndReleaseAll(t *testing.T) {
	f, endpoint := startFake(t, 5)
	c := dialFake(t, endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.AcquireAll(ctx, []string{"pay/a"}); !errors.Is(err, ErrOnFenceRequired) {
		t.Fatalf("%v", err)
	}
	if _, err := c.AcquireAll(ctx, nil, WithOnFence(func() {})); err == nil {
		t.Fatal("an empty set")
	}
	set, err := c.AcquireAll(ctx, []string{"pay/b", "pay/a"}, WithOnFence(func() {}))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(set.Keys(), []string{"pay/a", "pay/b"}) || set.Token() == 0 || !set.CanStart() {
		t.Fatalf("%v", set)
	}
	if strings.Contains(fmtV(set), strconv.FormatUint(set.Token(), 10)) {
		t.Fatal("a token printed")
	}
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
	now, err := c.TryAcquireAll(ctx, []string{"pay/c"}, WithOnFence(func() {}))
	if err != nil {
		t.Fatal(err)
	}
	if err := now.Release(ctx); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if w := f.acquireAllReqs[0].WaitMillis; w == 0 {
		t.Fatal("AcquireAll waits")
	}
	if w := f.acquireAllReqs[1].WaitMillis; w != 0 {
		t.Fatalf("TryAcquireAll waits %d ms", w)
	}
	r := f.releaseAllReqs[0]
	if r.Token != set.Token() || r.SessionId != f.acquireAllReqs[0].SessionId || len(r.Keys) != 2 {
		t.Fatalf("ReleaseAll %v", r)
	}
	// OpenSession carried the least key; the set calls none.
	if n := f.calls["OpenSession"]; n != 1 || slices.Contains(f.keyHeaders, "pay/b") {
		t.Fatalf("open %d, key headers %v", n, f.keyHeaders)
	}
}

// A shared hold is acquired and released with mode SHARED, each its own grant.
func TestSharedHoldsUseModeShared(t *testing.T) {
	f, endpoint := startFake(t, 5)
	c := dialFake(t, endpoint, WithMaxHoldStreams(0))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.AcquireShared(ctx, "pay/s"); !errors.Is(err, ErrOnFenceRequired) {
		t.Fatalf("%v", err)
	}
	a, err := c.AcquireShared(ctx, "pay/s", WithOnFence(func() {}))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.AcquireShared(ctx, "pay/s", WithOnFence(func() {}))
	if err != nil {
		t.Fatal(err)
	}
	if a.Token() == b.Token() || c.HoldCount("pay/s") != 0 {
		t.Fatal("shared holds are separate grants, not re-entries")
	}
	now, err := c.TryAcquireShared(ctx, "pay/s", WithOnFence(func() {}))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []*SharedHold{a, b, now} {
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.waits) != 3 || f.waits[0] == 0 || f.waits[1] == 0 || f.waits[2] != 0 {
		t.Fatalf("waits asked %v: TryAcquireShared waits 0", f.waits)
	}
	want := slices.Repeat([]lockv1.HoldMode{lockv1.HoldMode_HOLD_MODE_SHARED}, 6)
	if !slices.Equal(f.modes, want) {
		t.Fatalf("modes %v", f.modes)
	}
}

// Campaign waits in the queue while another leads, then leads with a higher term; a
// resign hands over at once.
func TestCampaignWaitsThenLeads(t *testing.T) {
	_, endpoint := startFake(t, 5)
	a := dialFake(t, endpoint)
	b := dialFake(t, endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := a.Campaign(ctx, "pay/lead"); !errors.Is(err, ErrOnFenceRequired) {
		t.Fatalf("%v", err)
	}
	first, err := a.Campaign(ctx, "pay/lead", WithOnFence(func() {}))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Leadership, 1)
	go func() {
		// The fake refuses at once (HELD) instead of waiting: the campaign asks again,
		// a round a second, until the key is free.
		l, err := b.Campaign(ctx, "pay/lead", WithOnFence(func() {}))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	select {
	case <-got:
		t.Fatal("a second leader while the first leads")
	case <-time.After(1500 * time.Millisecond):
	}
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	second := <-got
	if second == nil || second.Term() <= first.Term() || !second.CanLead() {
		t.Fatal("the next term")
	}
	if strings.Contains(fmtV(second), strconv.FormatUint(second.Term(), 10)) {
		t.Fatal("a term printed")
	}
}

func fmtV(v any) string      { return fmt.Sprintf("%v %+v", v, v) }
func fmtSharpV(v any) string { return fmt.Sprintf("%#v", v) }
