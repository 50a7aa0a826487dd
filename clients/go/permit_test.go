package lock

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenced-lock/fenced-lock/clients/go/lockv1"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// waitUntil polls cond for up to d.
func waitUntil(d time.Duration, cond func() bool) bool {
	for start := time.Now(); time.Since(start) < d; time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// Three Clients hold the three permits of a key at once, each its own; the fourth is
// refused HELD, then given the permit a release frees, under a greater token. A Client's
// second acquire nests on its permit (nothing sent) and the service hears the last release
// only, with mode PERMIT. The wrong class either way is ErrMalformedRequest.
func TestPermitsAreNumberedNestedAndReleasedWithModePermit(t *testing.T) {
	f, endpoint := startFake(t, 5)
	a := dialFake(t, endpoint)
	b := dialFake(t, endpoint)
	c := dialFake(t, endpoint)
	d := dialFake(t, endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	none := WithOnFence(func() {})
	if _, err := a.AcquirePermit(ctx, "sem/p"); !errors.Is(err, ErrOnFenceRequired) || f.calledN("OpenSession") != 0 {
		t.Fatalf("without WithOnFence: %v", err)
	}
	pa, err := a.AcquirePermit(ctx, "sem/p", none)
	if err != nil {
		t.Fatal(err)
	}
	nested, err := a.AcquirePermit(ctx, "sem/p", none)
	if err != nil {
		t.Fatal(err)
	}
	if nested.Permit() != pa.Permit() || nested.Token() != pa.Token() || f.calledN("Acquire") != 1 {
		t.Fatalf("nested: permit %d vs %d, same token %v, acquires %d",
			nested.Permit(), pa.Permit(), nested.Token() == pa.Token(), f.calledN("Acquire"))
	}
	pb, err := b.AcquirePermit(ctx, "sem/p", none)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := c.TryAcquirePermit(ctx, "sem/p", none)
	if err != nil {
		t.Fatal(err)
	}
	permits := []uint32{pa.Permit(), pb.Permit(), pc.Permit()}
	slices.Sort(permits)
	if !slices.Equal(permits, []uint32{0, 1, 2}) || pa.Token() == pb.Token() || pb.Token() == pc.Token() || pa.Token() == pc.Token() {
		t.Fatalf("three holders: permits %v, tokens distinct: %v", permits, pa.Token() != pb.Token())
	}
	if _, err := d.TryAcquirePermit(ctx, "sem/p", none); !errors.Is(err, ErrHeld) {
		t.Fatalf("a fourth: %v", err)
	}
	if err := nested.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := nested.Release(ctx); err != nil {
		t.Fatal("a second release of one Permit does nothing")
	}
	if f.calledN("Release") != 0 || f.permitHolders("sem/p") != 3 {
		t.Fatal("the nested release reached the service")
	}
	if err := pa.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if f.calledN("Release") != 1 || f.permitHolders("sem/p") != 2 {
		t.Fatalf("the last release: %d calls", f.calledN("Release"))
	}
	pd, err := d.TryAcquirePermit(ctx, "sem/p", none)
	if err != nil {
		t.Fatal(err)
	}
	if pd.Permit() != pa.Permit() || pd.Token() <= pa.Token() {
		t.Fatalf("the freed permit %d, got %d; greater token: %v", pa.Permit(), pd.Permit(), pd.Token() > pa.Token())
	}
	for _, p := range []*Permit{pb, pc, pd} {
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.AcquirePermit(ctx, "pay/x", none); !errors.Is(err, ErrMalformedRequest) {
		t.Fatalf("a permit of a class that is no semaphore: %v", err)
	}
	if _, err := a.Acquire(ctx, "sem/p", none); !errors.Is(err, ErrMalformedRequest) {
		t.Fatalf("an exclusive hold of a semaphore's key: %v", err)
	}
	f.mu.Lock()
	for i, m := range f.modes { // the exclusive acquire went on a Hold stream
		if m != lockv1.HoldMode_HOLD_MODE_PERMIT {
			t.Errorf("call %d in mode %v", i, m)
		}
	}
	f.mu.Unlock()
	for _, s := range []string{fmtV(pd), fmtSharpV(pd)} {
		if strings.Contains(s, strconv.FormatUint(pd.Token(), 10)) || !strings.Contains(s, "permit: "+strconv.Itoa(int(pd.Permit()))) {
			t.Fatalf("%s", s)
		}
	}
}

// Two acquires of one Client racing past the re-entry check get the same grant from the
// service (a session's second acquire is answered its permit): the second nests on the
// first, and the service hears one release.
func TestASecondGrantOfTheSamePermitNests(t *testing.T) {
	f, endpoint := startFake(t, 5)
	c := dialFake(t, endpoint)
	ctx := context.Background()
	first, err := c.AcquirePermit(ctx, "sem/race", WithOnFence(func() {}))
	if err != nil {
		t.Fatal(err)
	}
	cfg, id, err := c.newAcquire([]AcquireOption{WithOnFence(func() {})})
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.askPermit(ctx, "sem/race", id, false, cfg) // past reenterPermit
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	count := c.permits["sem/race"].count
	c.mu.Unlock()
	if second.Token() != first.Token() || count != 2 {
		t.Fatal("the same grant twice is one nested permit")
	}
	_ = first.Release(ctx)
	if f.calledN("Release") != 0 {
		t.Fatal("released under the second")
	}
	_ = second.Release(ctx)
	if f.calledN("Release") != 1 || f.permitHolders("sem/race") != 0 {
		t.Fatal("the last release")
	}
}

// A fenced permit runs every nested OnFence, each Release is ErrFenced, and the next
// acquire is a new grant on a new session, not a re-entry of the dead one.
func TestAFencedPermitIsNotReentered(t *testing.T) {
	f, endpoint := startFake(t, 3)
	c := dialFake(t, endpoint)
	ctx := context.Background()
	var fenced atomic.Int64
	onFence := WithOnFence(func() { fenced.Add(1) })
	outer, err := c.AcquirePermit(ctx, "sem/f", onFence)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := c.AcquirePermit(ctx, "sem/f", onFence)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.dropRenewal = true
	f.mu.Unlock()
	if !waitUntil(5*time.Second, func() bool { return fenced.Load() == 2 }) || !outer.Fenced() || outer.CanStart() {
		t.Fatalf("fenced %d", fenced.Load())
	}
	if err := inner.Release(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("the nested release: %v", err)
	}
	f.mu.Lock()
	f.dropRenewal = false
	f.mu.Unlock()
	next, err := c.AcquirePermit(ctx, "sem/f", WithOnFence(func() {}))
	if err != nil || next.Token() == outer.Token() || f.calledN("OpenSession") != 2 {
		t.Fatalf("after the fence: %v, sessions %d", err, f.calledN("OpenSession"))
	}
	if err := outer.Release(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("the outer release: %v", err)
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A caller that gives up while the service hands it a permit: the permit is reclaimed
// and released in the background, not left held for the session's life.
func TestAPermitGrantedAfterTheCallerGaveUpIsReleased(t *testing.T) {
	f, endpoint := startFake(t, 5)
	c := dialFake(t, endpoint)
	f.mu.Lock()
	f.lateGrant = true
	f.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		waitUntil(5*time.Second, func() bool { return f.permitHolders("sem/late") == 1 })
		cancel() // once granted, before the answer
	}()
	if _, err := c.AcquirePermit(ctx, "sem/late", WithOnFence(func() {})); !errors.Is(err, context.Canceled) {
		t.Fatalf("%v", err)
	}
	if !waitUntil(5*time.Second, func() bool { return f.permitHolders("sem/late") == 0 && f.calledN("Release") == 1 }) {
		t.Fatalf("the lost grant is still held: %d permits, %d releases", f.permitHolders("sem/late"), f.calledN("Release"))
	}
}

// A permit's grant, a refusal, its release and a fenced permit are recorded as any hold's,
// with exactly the attributes class and outcome; a nested acquire records nothing.
func TestPermitMetrics(t *testing.T) {
	f, endpoint := startFake(t, 3)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	clients := []*Client{}
	for range 4 {
		clients = append(clients, dialFake(t, endpoint, WithMeterProvider(mp)))
	}
	ctx := context.Background()
	none := WithOnFence(func() {})
	var fenced atomic.Int64 // OnFence runs after the fence is recorded
	secrets := []string{"sem/m"}
	var held []*Permit
	for _, c := range clients[:3] {
		p, err := c.AcquirePermit(ctx, "sem/m", WithOnFence(func() { fenced.Add(1) }))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, p)
		secrets = append(secrets, c.Instance(), strconv.FormatUint(p.Token(), 10))
	}
	nested, err := clients[0].AcquirePermit(ctx, "sem/m", none)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := clients[3].TryAcquirePermit(ctx, "sem/m", none); !errors.Is(err, ErrHeld) {
		t.Fatalf("%v", err)
	}
	for _, p := range []*Permit{nested, held[0], held[1]} {
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	f.mu.Lock()
	f.dropRenewal = true
	f.mu.Unlock()
	if !waitUntil(5*time.Second, func() bool { return fenced.Load() == 1 }) {
		t.Fatal("not fenced")
	}
	got := collect(t, reader)
	for name, points := range got {
		for _, p := range points {
			want := []string{attrClass, attrOutcome}
			if name == MetricHoldsLost {
				want = []string{attrClass}
			}
			if keys := slices.Sorted(maps.Keys(p.attrs)); !slices.Equal(keys, want) {
				t.Fatalf("%s: attributes %v", name, keys)
			}
			for _, v := range p.attrs {
				if slices.Contains(secrets, v) {
					t.Fatalf("%s: attribute value %q is a key, a token or an instance", name, v)
				}
			}
		}
	}
	wait := func(outcome string) uint64 {
		return countOf(got[MetricWaitDuration], map[string]string{attrClass: "fake", attrOutcome: outcome})
	}
	hold := func(outcome string) uint64 {
		return countOf(got[MetricHoldDuration], map[string]string{attrClass: "fake", attrOutcome: outcome})
	}
	if wait("granted") != 3 || wait("held") != 1 {
		t.Errorf("waits: %v", got[MetricWaitDuration])
	}
	if hold("released") != 2 || hold("fenced") != 1 {
		t.Errorf("holds: %v", got[MetricHoldDuration])
	}
	if n := countOf(got[MetricHoldsLost], map[string]string{attrClass: "fake"}); n != 1 {
		t.Errorf("lost: %v", got[MetricHoldsLost])
	}
}

// An acquire is not sent while a reclaim of its key is releasing, and one whose call
// overlapped a reclaim's decision asks again rather than trust an answer that may name the
// grant the reclaim released.
func TestAPermitAcquireStaysClearOfAReclaim(t *testing.T) {
	f, endpoint := startFake(t, 5)
	c := dialFake(t, endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	releasing := make(chan struct{})
	c.mu.Lock()
	c.reclaiming["sem/rc"] = releasing
	c.mu.Unlock()
	got := make(chan permitted, 1)
	go func() {
		p, err := c.AcquirePermit(ctx, "sem/rc", WithOnFence(func() {}))
		got <- permitted{p, err}
	}()
	time.Sleep(300 * time.Millisecond)
	if n := f.calledN("Acquire"); n != 0 {
		t.Fatalf("%d acquires sent while a reclaim of the key releases", n)
	}
	// The reclaim ends; the next reclaim decision lands while the acquire is in flight.
	var once atomic.Bool
	f.mu.Lock()
	f.onPermit = func() {
		if once.CompareAndSwap(false, true) {
			c.mu.Lock()
			c.reclaimEpoch++
			c.mu.Unlock()
		}
	}
	f.mu.Unlock()
	c.mu.Lock()
	delete(c.reclaiming, "sem/rc")
	c.mu.Unlock()
	close(releasing)
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if n := f.calledN("Acquire"); n != 2 {
		t.Fatalf("%d acquires: the overlapped answer is asked again", n)
	}
	if err := r.permit.Release(ctx); err != nil || f.permitHolders("sem/rc") != 0 {
		t.Fatalf("release: %v", err)
	}
}
