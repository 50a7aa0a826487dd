package lock

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// The client's OpenTelemetry instruments (issue 50, the same in every client). Their
// attributes are `class` and `outcome` only: never a key, a token, an identity or an
// instance, which would be unbounded and, for the token, a capability.
const (
	// MeterName is the instrumentation scope of the client's metrics.
	MeterName = "github.com/fenced-lock/fenced-lock/clients/go"
	// MetricWaitDuration: from an acquire call (Acquire, TryAcquire, AcquireShared,
	// AcquirePermit, AcquireAll, Campaign) to its answer, in seconds; outcome `granted`,
	// the refusal's reason in lower case (`held`, `not_granted`, ...), `unavailable` or
	// `cancelled`.
	MetricWaitDuration = "lock.client.wait.duration"
	// MetricHoldDuration: from a grant to the hold's end, in seconds; outcome
	// `released`, `fenced` or `shutdown`.
	MetricHoldDuration = "lock.client.hold.duration"
	// MetricHoldsLost counts holds fenced before they were released (their OnFence ran).
	MetricHoldsLost = "lock.client.holds.lost"
)

// Attribute keys and the values the client sets itself.
const (
	attrClass     = "class"
	attrOutcome   = "outcome"
	unknownClass  = "unknown"
	outGranted    = "granted"
	outCancelled  = "cancelled"
	outUnavail    = "unavailable"
	outReleased   = "released"
	outFenced     = "fenced"
	outShutdown   = "shutdown"
	maxClassNames = maxPlaces
)

// Seconds, from a millisecond up to the service's longest wait (300 s) for waits, and
// up to a day for holds: the SDK's default boundaries are sized for milliseconds.
var (
	waitBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	holdBuckets = []float64{0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 600, 1800, 3600, 21600, 86400}
)

// WithMeterProvider records the client's metrics with mp instead of
// otel.GetMeterProvider() (a no-op until the application installs an SDK).
func WithMeterProvider(mp metric.MeterProvider) DialOption {
	return func(c *dialConfig) { c.meterProvider = mp }
}

// metrics are one Client's instruments.
type metrics struct {
	wait metric.Float64Histogram
	hold metric.Float64Histogram
	lost metric.Int64Counter
}

// newMetrics makes the instruments on mp (the global provider when nil). An instrument
// the provider refuses is reported to otel's error handler and replaced by a no-op one:
// metrics never stop the client from dialling.
func newMetrics(mp metric.MeterProvider) *metrics {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(MeterName)
	m := &metrics{}
	var err error
	if m.wait, err = meter.Float64Histogram(MetricWaitDuration,
		metric.WithUnit("s"),
		metric.WithDescription("Time from an acquire call to its answer, by lock class and outcome."),
		metric.WithExplicitBucketBoundaries(waitBuckets...)); err != nil {
		otel.Handle(err)
		m.wait = noop.Float64Histogram{}
	}
	if m.hold, err = meter.Float64Histogram(MetricHoldDuration,
		metric.WithUnit("s"),
		metric.WithDescription("Time from a grant to the hold's end, by lock class and outcome."),
		metric.WithExplicitBucketBoundaries(holdBuckets...)); err != nil {
		otel.Handle(err)
		m.hold = noop.Float64Histogram{}
	}
	if m.lost, err = meter.Int64Counter(MetricHoldsLost,
		metric.WithUnit("{hold}"),
		metric.WithDescription("Holds fenced before they were released, by lock class.")); err != nil {
		otel.Handle(err)
		m.lost = noop.Int64Counter{}
	}
	return m
}

// waitOutcome names an acquire's answer: granted, the refusal's reason in lower case,
// cancelled when the caller's context ended or the Client was closed, else unavailable.
func waitOutcome(err error) string {
	var e *Error
	switch {
	case err == nil:
		return outGranted
	case errors.As(err, &e) && e.Reason != "":
		return strings.ToLower(e.Reason)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, ErrClosed):
		return outCancelled
	default:
		return outUnavail
	}
}

// waited records one acquire call that went to the service, started at start.
func (m *metrics) waited(ctx context.Context, start time.Time, class string, err error) {
	m.wait.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(
		attribute.String(attrClass, class), attribute.String(attrOutcome, waitOutcome(err))))
}

// tenure is one grant's hold time, ended once by whichever comes first: its release,
// its fence or the Client's shutdown. Nested holds of a re-entered key share their
// grant's tenure.
type tenure struct {
	m       *metrics
	class   string
	granted time.Time
	ended   atomic.Bool
}

func (m *metrics) granted(class string) *tenure {
	return &tenure{m: m, class: class, granted: time.Now()}
}

// end records the hold's end with outcome (outReleased, outFenced, outShutdown), and a
// lost hold when fenced; later calls do nothing. A nil tenure records nothing.
func (t *tenure) end(outcome string) {
	if t == nil || !t.ended.CompareAndSwap(false, true) {
		return
	}
	// Not the caller's context: a fence ends the hold on the renewal goroutine.
	ctx := context.Background()
	class := attribute.String(attrClass, t.class)
	t.m.hold.Record(ctx, time.Since(t.granted).Seconds(), metric.WithAttributes(
		class, attribute.String(attrOutcome, outcome)))
	if outcome == outFenced {
		t.m.lost.Add(ctx, 1, metric.WithAttributes(class))
	}
}

// learnClass remembers the class the service named for key (OpenSessionResponse,
// AcquireResponse), so that a refusal of the key is recorded under it.
func (c *Client) learnClass(key, class string) {
	if class == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.classes[key]; !ok && len(c.classes) >= maxClassNames {
		clear(c.classes)
	}
	c.classes[key] = class
}

// classOf is the class the service last named for key, else "unknown".
func (c *Client) classOf(key string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if class, ok := c.classes[key]; ok {
		return class
	}
	return unknownClass
}
