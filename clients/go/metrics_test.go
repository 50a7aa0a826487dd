package lock

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// point is one recorded series: its attributes and how many measurements it has.
type point struct {
	attrs map[string]string
	count uint64
}

func collect(t *testing.T, r *sdkmetric.ManualReader) map[string][]point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	attrs := func(s attribute.Set) map[string]string {
		m := map[string]string{}
		for _, kv := range s.ToSlice() {
			m[string(kv.Key)] = kv.Value.AsString()
		}
		return m
	}
	got := map[string][]point{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != MeterName {
			t.Fatalf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				if m.Unit != "s" {
					t.Fatalf("%s: unit %q", m.Name, m.Unit)
				}
				for _, p := range d.DataPoints {
					got[m.Name] = append(got[m.Name], point{attrs(p.Attributes), p.Count})
				}
			case metricdata.Sum[int64]:
				if m.Unit != "{hold}" || !d.IsMonotonic {
					t.Fatalf("%s: unit %q, monotonic %v", m.Name, m.Unit, d.IsMonotonic)
				}
				for _, p := range d.DataPoints {
					got[m.Name] = append(got[m.Name], point{attrs(p.Attributes), uint64(p.Value)})
				}
			default:
				t.Fatalf("%s: %T", m.Name, m.Data)
			}
		}
	}
	return got
}

// countOf is the measurements of name with exactly these attribute values.
func countOf(points []point, want map[string]string) uint64 {
	for _, p := range points {
		if maps.Equal(p.attrs, want) {
			return p.count
		}
	}
	return 0
}

// A grant, a re-entry, a refusal, a cancelled wait, releases, a shutdown and a fence are
// recorded under the class the service named and their outcome, with no other attribute
// and never the key, the token or the instance.
func TestMetricsRecordWaitsHoldsAndLostHolds(t *testing.T) {
	f, endpoint := startFake(t, 3)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	a := dialFake(t, endpoint, WithMeterProvider(mp))
	b := dialFake(t, endpoint, WithMeterProvider(mp), WithMaxHoldStreams(0))
	d := dialFake(t, endpoint, WithMeterProvider(mp))
	ctx := context.Background()
	none := WithOnFence(func() {})
	var secrets []string // keys, tokens and instances: never an attribute value
	for _, c := range []*Client{a, b, d} {
		secrets = append(secrets, c.Instance())
	}
	keep := func(key string, token uint64) {
		secrets = append(secrets, key, strconv.FormatUint(token, 10))
	}

	outer, err := a.Acquire(ctx, "pay/m1", none)
	if err != nil {
		t.Fatal(err)
	}
	keep("pay/m1", outer.Token())
	inner, err := a.Acquire(ctx, "pay/m1", none) // re-entered: no call, nothing recorded
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquire(ctx, "pay/m1", none); !errors.Is(err, ErrHeld) {
		t.Fatalf("%v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.Acquire(cancelled, "pay/m4", none); !errors.Is(err, context.Canceled) {
		t.Fatalf("%v", err)
	}
	secrets = append(secrets, "pay/m4")
	for _, h := range []*Hold{inner, outer} { // the grant ends at the outer release
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	shared, err := a.AcquireShared(ctx, "pay/m5", none)
	if err != nil {
		t.Fatal(err)
	}
	keep("pay/m5", shared.Token())
	set, err := a.AcquireAll(ctx, []string{"pay/m6", "pay/m7"}, none)
	if err != nil {
		t.Fatal(err)
	}
	keep("pay/m6", set.Token())
	secrets = append(secrets, "pay/m7")
	lead, err := a.Campaign(ctx, "pay/m8", none)
	if err != nil {
		t.Fatal(err)
	}
	keep("pay/m8", lead.Term())
	for _, release := range []func(context.Context) error{shared.Release, set.Release, lead.Resign} {
		if err := release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	closing, err := d.Acquire(ctx, "pay/m3", none)
	if err != nil {
		t.Fatal(err)
	}
	keep("pay/m3", closing.Token())
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	var fenced atomic.Bool
	lost, err := a.Acquire(ctx, "pay/m2", WithOnFence(func() { fenced.Store(true) }))
	if err != nil {
		t.Fatal(err)
	}
	keep("pay/m2", lost.Token())
	f.mu.Lock()
	f.dropRenewal = true
	f.mu.Unlock()
	for start := time.Now(); !fenced.Load() && time.Since(start) < 5*time.Second; {
		time.Sleep(20 * time.Millisecond)
	}
	if !fenced.Load() {
		t.Fatal("the hold was not fenced")
	}
	if err := lost.Release(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("%v", err)
	}

	got := collect(t, reader)
	for name, points := range got {
		wantKeys := []string{attrClass, attrOutcome}
		if name == MetricHoldsLost {
			wantKeys = []string{attrClass}
		}
		for _, p := range points {
			if keys := slices.Sorted(maps.Keys(p.attrs)); !slices.Equal(keys, wantKeys) {
				t.Fatalf("%s: attributes %v, want %v", name, keys, wantKeys)
			}
			for _, v := range p.attrs {
				if slices.Contains(secrets, v) {
					t.Fatalf("%s: attribute value %q is a key, a token or an instance", name, v)
				}
			}
		}
	}
	wait := func(class, outcome string) uint64 {
		return countOf(got[MetricWaitDuration], map[string]string{attrClass: class, attrOutcome: outcome})
	}
	hold := func(class, outcome string) uint64 {
		return countOf(got[MetricHoldDuration], map[string]string{attrClass: class, attrOutcome: outcome})
	}
	// Grants: pay/m1, the shared hold, the campaign, pay/m3, pay/m2, and the set; the
	// re-entry of pay/m1 is not one. No answer named the class of the set's first key
	// (AcquireAllResponse has none, and a's session was opened for pay/m1) nor of the
	// cancelled key: "unknown".
	if n := wait("fake", "granted"); n != 5 {
		t.Errorf("granted waits: %d, want 5 (%v)", n, got[MetricWaitDuration])
	}
	if n := wait("unknown", "granted"); n != 1 {
		t.Errorf("the set's wait: %d (%v)", n, got[MetricWaitDuration])
	}
	if n := wait("fake", "held"); n != 1 {
		t.Errorf("held: %d", n)
	}
	if n := wait("unknown", "cancelled"); n != 1 {
		t.Errorf("cancelled: %d (%v)", n, got[MetricWaitDuration])
	}
	if n := len(got[MetricWaitDuration]); n != 4 {
		t.Errorf("wait series: %v", got[MetricWaitDuration])
	}
	if hold("fake", "released") != 3 || hold("unknown", "released") != 1 || hold("fake", "shutdown") != 1 ||
		hold("fake", "fenced") != 1 || len(got[MetricHoldDuration]) != 4 {
		t.Errorf("holds: %v", got[MetricHoldDuration])
	}
	if n := countOf(got[MetricHoldsLost], map[string]string{attrClass: "fake"}); n != 1 || len(got[MetricHoldsLost]) != 1 {
		t.Errorf("lost: %v", got[MetricHoldsLost])
	}
}

// Without WithMeterProvider the client records on the global provider: a no-op until the
// application installs an SDK, so nothing is needed to use the client without metrics.
func TestMetricsDefaultToTheGlobalProvider(t *testing.T) {
	_, endpoint := startFake(t, 5)
	c := dialFake(t, endpoint)
	h, err := c.Acquire(context.Background(), "pay/g", WithOnFence(func() {}))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestWaitOutcomes(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, "granted"},
		{FromStatus(refusal(10, "NOT_GRANTED", "no", nil)), "not_granted"},
		{FromStatus(refusal(14, "NO_QUORUM", "no", nil)), "no_quorum"},
		{clientError(ErrUnavailable, "the hold stream ended"), "unavailable"},
		{wrap(context.Background(), errors.New("broken pipe")), "unavailable"},
		{clientError(ErrClosed, ""), "cancelled"},
		{errors.Join(errors.New("lock"), context.DeadlineExceeded), "cancelled"},
	} {
		if got := waitOutcome(c.err); got != c.want {
			t.Errorf("%v: %q, want %q", c.err, got, c.want)
		}
	}
}
