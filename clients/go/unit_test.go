package lock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestDeadlineIsSendTimeOfLastRenewalPlusTTLMinusMargin(t *testing.T) {
	t0 := time.Now()
	l := newLiveness(15*time.Second, t0)
	if !l.canStart(t0) {
		t.Fatal("a new session can start work")
	}
	if got, want := l.deadline(), t0.Add(14*time.Second); !got.Equal(want) {
		t.Fatalf("deadline %v, want open time + TTL - 1 s %v", got, want)
	}
	// A keepalive sent at t0+5s whose answer arrived at t0+7s: the deadline counts from
	// the send, never the receipt.
	l.renewed(t0.Add(5 * time.Second))
	if got, want := l.deadline(), t0.Add(19*time.Second); !got.Equal(want) {
		t.Fatalf("deadline %v, want send time + 14 s %v", got, want)
	}
	// An older send (a late answer to an earlier keepalive) never moves it back.
	l.renewed(t0.Add(3 * time.Second))
	if got := l.deadline(); !got.Equal(t0.Add(19 * time.Second)) {
		t.Fatalf("deadline moved back to %v", got)
	}
	l.failed()
	if l.canStart(t0.Add(6 * time.Second)) {
		t.Fatal("after a failed renewal, nothing new starts (drain)")
	}
	if !l.continuous(t0.Add(18 * time.Second)) {
		t.Fatal("still covered before the deadline")
	}
	if l.fenceDue(t0.Add(18 * time.Second)) {
		t.Fatal("fenced before the deadline")
	}
	if got := l.remaining(t0.Add(18 * time.Second)); got != time.Second {
		t.Fatalf("remaining %v, want 1s", got)
	}
	if !l.fenceDue(t0.Add(19 * time.Second)) {
		t.Fatal("not fenced at the deadline")
	}
	if l.fenceDue(t0.Add(20 * time.Second)) {
		t.Fatal("fenced twice")
	}
	l.renewed(t0.Add(30 * time.Second))
	if l.canStart(t0.Add(31*time.Second)) || l.remaining(t0.Add(31*time.Second)) != 0 || l.continuous(t0.Add(31*time.Second)) {
		t.Fatal("a fenced session never comes back")
	}
	l2 := newLiveness(500*time.Millisecond, t0)
	if !l2.deadline().Equal(t0) {
		t.Fatal("a TTL under the margin has its deadline at once")
	}
}

func TestWaitAskedOfTheServiceEndsBeforeTheContext(t *testing.T) {
	now := time.Now()
	if got := waitFor(context.Background(), false, now); got != 0 {
		t.Fatalf("TryAcquire waits %v", got)
	}
	if got := waitFor(context.Background(), true, now); got != maxWaitPerCall {
		t.Fatalf("no deadline: %v, want %v", got, maxWaitPerCall)
	}
	for _, c := range []struct{ left, want time.Duration }{
		{5 * time.Second, 4500 * time.Millisecond},
		{20 * time.Second, 19 * time.Second},
		{time.Hour, maxWaitPerCall},
		{-time.Second, 0},
	} {
		ctx, cancel := context.WithDeadline(context.Background(), now.Add(c.left))
		if got := waitFor(ctx, true, now); got != c.want {
			t.Errorf("ctx with %v left asks %v, want %v", c.left, got, c.want)
		}
		cancel()
	}
}

func TestInstanceNames(t *testing.T) {
	const fb = "p-0123456789abcdef"
	// The longest LOCK_INSTANCE that fits with ":42:7" (5 characters).
	fits := strings.Repeat("a", MaxInstanceLen-5)
	for _, c := range []struct {
		name, env string
		pid       int
		n         uint64
		want      string
	}{
		{"pod UID", "3f2a9c1e-8b7d-4c11-9a0e-5d6f7a8b9c0d", 42, 1, "3f2a9c1e-8b7d-4c11-9a0e-5d6f7a8b9c0d:42:1"},
		{"every allowed character", "Pod_1.a:b-c", 1, 2, "Pod_1.a:b-c:1:2"},
		{"no env", "", 42, 1, fb + ":42:1"},
		{"slash", "pod/with/slash", 42, 1, fb + ":42:1"},
		{"space", "with space", 42, 3, fb + ":42:3"},
		{"not ASCII", "café", 7, 1, fb + ":7:1"},
		{"newline", "pod\n", 7, 1, fb + ":7:1"},
		{"just fits", fits, 42, 7, fits + ":42:7"},
		{"too long with the tail", fits + "a", 42, 7, fb + ":42:7"},
		{"too long alone", strings.Repeat("a", MaxInstanceLen+1), 42, 7, fb + ":42:7"},
		{"a restarted pid 1", "pod-uid", 1, 1, "pod-uid:1:1"},
	} {
		got := InstanceName(c.env, c.pid, c.n, fb)
		if got != c.want {
			t.Errorf("%s: InstanceName(%q, %d, %d) = %q, want %q", c.name, c.env, c.pid, c.n, got, c.want)
		}
		if !ValidInstance(got) {
			t.Errorf("%s: %q is not a valid instance", c.name, got)
		}
	}
	for v, ok := range map[string]bool{
		"ledger-7d9f8c-x2x4q": true, "node-1.pod:pay_ledger": true, "": false,
		"slash/y": false, "café": false, "new\nline": false,
		strings.Repeat("a", MaxInstanceLen): true, strings.Repeat("a", MaxInstanceLen+1): false,
	} {
		if ValidInstance(v) != ok {
			t.Errorf("ValidInstance(%q) != %v", v, ok)
		}
	}
}

func TestClientsAreNumberedFromOne(t *testing.T) {
	var s instanceSeq
	for want := uint64(1); want <= 3; want++ {
		if got := s.next(); got != want {
			t.Fatalf("Client number %d, want %d", got, want)
		}
	}
	// This process's Clients: one prefix and pid, the next number each.
	t.Setenv(InstanceEnv, "pod-uid-1")
	a, b := newInstance(), newInstance()
	prefix := fmt.Sprintf("pod-uid-1:%d:", os.Getpid())
	if !strings.HasPrefix(a, prefix) || !strings.HasPrefix(b, prefix) {
		t.Fatalf("instances %q %q, want the prefix %q", a, b, prefix)
	}
	na, errA := strconv.ParseUint(strings.TrimPrefix(a, prefix), 10, 64)
	nb, errB := strconv.ParseUint(strings.TrimPrefix(b, prefix), 10, 64)
	if errA != nil || errB != nil || na < 1 || nb != na+1 {
		t.Fatalf("two Clients of one process are numbered %q then %q", a, b)
	}
	// Without LOCK_INSTANCE: the process's one random prefix.
	t.Setenv(InstanceEnv, "")
	c, d := newInstance(), newInstance()
	fb := fallbackPrefix()
	if len(fb) != 18 || !strings.HasPrefix(fb, "p-") || !ValidInstance(fb) {
		t.Fatalf("fallback prefix %q", fb)
	}
	if want := fmt.Sprintf("%s:%d:%d", fb, os.Getpid(), nb+1); c != want {
		t.Fatalf("instance %q, want %q", c, want)
	}
	if want := fmt.Sprintf("%s:%d:%d", fb, os.Getpid(), nb+2); d != want {
		t.Fatalf("instance %q, want %q", d, want)
	}
}

func TestEveryReasonMapsToItsSentinel(t *testing.T) {
	cases := []struct {
		code   codes.Code
		reason string
		want   error
	}{
		{codes.Unauthenticated, "UNAUTHENTICATED", ErrUnauthenticated},
		{codes.PermissionDenied, "NOT_GRANTED", ErrNotGranted},
		{codes.FailedPrecondition, "REGION_REDIRECT", ErrRegionRedirect},
		{codes.ResourceExhausted, "RATE_LIMITED", ErrRateLimited},
		{codes.InvalidArgument, "INVALID_KEY", ErrInvalidKey},
		{codes.InvalidArgument, "MALFORMED_REQUEST", ErrMalformedRequest},
		{codes.Aborted, "HELD", ErrHeld},
		{codes.DeadlineExceeded, "HELD", ErrHeld},
		{codes.FailedPrecondition, "LEAKED_HOLD", ErrLeakedHold},
		{codes.FailedPrecondition, "STALE_TOKEN", ErrStaleToken},
		{codes.NotFound, "SESSION_EXPIRED", ErrSessionExpired},
		{codes.FailedPrecondition, "WRONG_SESSION_TTL", ErrWrongSessionTTL},
		{codes.FailedPrecondition, "WRONG_SESSION_PLACE", ErrWrongSessionPlace},
		{codes.Unavailable, "SEALED", ErrSealed},
		{codes.Unavailable, "NO_QUORUM", ErrNoQuorum},
		{codes.Unavailable, "STORE_FULL", ErrStoreFull},
		{codes.Unavailable, "DRAINING", ErrDraining},
		{codes.Unavailable, "DRAINING", ErrUnavailable},
		{codes.Unavailable, "MOVING", ErrMoving},
		{codes.ResourceExhausted, "STREAM_FULL", ErrStreamFull},
		{codes.OutOfRange, "HISTORY_COMPACTED", ErrHistoryCompacted},
		{codes.FailedPrecondition, "KEY_SET_REFUSED", ErrKeySetRefused},
		{codes.Unimplemented, "UNKNOWN_METHOD", ErrUnknownMethod},
		{codes.Internal, "INTERNAL", ErrInternal},
	}
	for _, c := range cases {
		st := refusal(c.code, c.reason, "why it was refused", map[string]string{"region": "eu-1"})
		var err error = FromStatus(st)
		if !errors.Is(err, c.want) {
			t.Errorf("%s/%s: %v is not %v", c.code, c.reason, err, c.want)
		}
		var e *Error
		if !errors.As(err, &e) || e.Reason != c.reason || e.Code != c.code || e.Metadata["region"] != "eu-1" {
			t.Errorf("%s: %+v", c.reason, e)
		}
		if c.want != ErrUnavailable && SentinelOf(c.reason) != c.want {
			t.Errorf("SentinelOf(%s)", c.reason)
		}
		if got := ReasonOf(fmt.Errorf("wrapped: %w", err)); got != c.reason {
			t.Errorf("ReasonOf: %q, want %q", got, c.reason)
		}
		// An error the client raises itself stands for its sentinel's reason.
		if c.want != ErrUnavailable && ReasonOf(clientError(c.want, "")) != c.reason {
			t.Errorf("ReasonOf(clientError(%v))", c.want)
		}
	}
	for _, err := range []error{clientError(ErrUnavailable, ""), clientError(ErrFenced, ""), clientError(ErrClosed, ""),
		ErrOnFenceRequired, context.Canceled, FromStatus(status.New(codes.Unavailable, "broken"))} {
		if got := ReasonOf(err); got != "" {
			t.Errorf("ReasonOf(%v) = %q: no lock.v1 reason", err, got)
		}
	}
	// Every reason of the table is distinct from every other's sentinel.
	if errors.Is(FromStatus(refusal(codes.Aborted, "HELD", "", nil)), ErrLeakedHold) {
		t.Error("HELD is not LEAKED_HOLD")
	}
	// Another domain's ErrorInfo is not a refusal of ours.
	other, _ := status.New(codes.Aborted, "x").WithDetails()
	if e := FromStatus(other); e.Reason != "" || errors.Is(e, ErrHeld) {
		t.Errorf("no details: %+v", e)
	}
	for _, code := range []codes.Code{codes.Unavailable, codes.Unknown, codes.Canceled, codes.DeadlineExceeded} {
		if !errors.Is(FromStatus(status.New(code, "broken")), ErrUnavailable) {
			t.Errorf("%s without details is ErrUnavailable", code)
		}
	}
	if e := FromStatus(status.New(codes.PermissionDenied, "no")); errors.Is(e, ErrNotGranted) || e.Reason != "" {
		t.Error("a code without a reason is not a contract refusal")
	}
	rl := FromStatus(refusal(codes.ResourceExhausted, "RATE_LIMITED", "", map[string]string{"retry_after_ms": "250"}))
	if rl.RetryAfter() != 250*time.Millisecond || !rl.transient() {
		t.Errorf("retry after %v", rl.RetryAfter())
	}
	ttl := FromStatus(refusal(codes.FailedPrecondition, "WRONG_SESSION_TTL", "", map[string]string{"ttl_seconds": "30"}))
	if ttl.ttlSeconds() != 30 {
		t.Error("ttl_seconds")
	}
	if FromStatus(status.New(codes.OK, "")) != nil {
		t.Error("OK is no error")
	}
}

func TestEncodeKey(t *testing.T) {
	for in, want := range map[string]string{
		"pay/ledger/42":  "pay/ledger/42",
		"pay/100%":       "pay/100%25",
		"pay/café":       "pay/caf%C3%A9",
		"pay/with space": "pay/with%20space",
	} {
		if got := EncodeKey(in); got != want {
			t.Errorf("EncodeKey(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestEndpoints(t *testing.T) {
	for _, c := range []struct {
		endpoint  string
		plaintext bool
		ok        bool
	}{
		{"https://lock-edge:8443", false, true},
		{"https://127.0.0.1:8443", false, true},
		{"http://127.0.0.1:15001", true, true},
		{"http://localhost:15001/", true, true},
		{"http://[::1]:15001", true, true},
		{"http://10.0.0.5:15001", true, false},
		{"http://127.0.0.1.evil.example:80", true, false},
		{"http://127.0.0.1:8443", false, false},
		{"https://127.0.0.1:15001", true, false},
		{"127.0.0.1:8443", false, false},
	} {
		if _, err := checkEndpoint(c.endpoint, c.plaintext); (err == nil) != c.ok {
			t.Errorf("%s plaintext=%v: %v", c.endpoint, c.plaintext, err)
		}
	}
}

// The status message reaches the caller decoded (grpc-message is percent-encoded on the
// wire) and a token never appears in an error or a Hold's String.
func TestMessagesAreDecodedAndCarryNoToken(t *testing.T) {
	f, endpoint := startFake(t, 5)
	c := dialFake(t, endpoint, WithMaxHoldStreams(0))
	f.refuse = refusal(codes.PermissionDenied, "NOT_GRANTED", "100% refusé: no grant\ncovers this key", nil)
	_, err := c.TryAcquire(context.Background(), "pay/a", WithOnFence(func() {}))
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrNotGranted) {
		t.Fatalf("%v", err)
	}
	if e.Message != "100% refusé: no grant\ncovers this key" || strings.Contains(err.Error(), "%25") {
		t.Fatalf("message %q (error %q)", e.Message, err)
	}
	h, err := c.TryAcquire(context.Background(), "pay/a", WithOnFence(func() {}))
	if err != nil {
		t.Fatal(err)
	}
	tok := fmt.Sprint(h.Token())
	for _, s := range []string{fmt.Sprint(h), fmt.Sprintf("%v %+v %#v %s", h, h, h, h)} {
		if strings.Contains(s, tok) {
			t.Fatalf("%q shows the token", s)
		}
	}
}

func TestAcquireNeedsOnFence(t *testing.T) {
	f, endpoint := startFake(t, 5)
	c := dialFake(t, endpoint)
	if _, err := c.Acquire(context.Background(), "pay/a"); !errors.Is(err, ErrOnFenceRequired) {
		t.Fatalf("%v", err)
	}
	if _, err := c.Acquire(context.Background(), "pay/a", WithOnFence(nil)); !errors.Is(err, ErrOnFenceRequired) {
		t.Fatalf("%v", err)
	}
	if f.calledN("OpenSession") != 0 {
		t.Fatal("a refused acquire sent something")
	}
}

func TestReentryCountsLocally(t *testing.T) {
	for _, streams := range []int{DefaultMaxHoldStreams, 0} {
		f, endpoint := startFake(t, 5)
		c := dialFake(t, endpoint, WithMaxHoldStreams(streams))
		ctx := context.Background()
		outer, err := c.Acquire(ctx, "pay/re", WithOnFence(func() {}))
		if err != nil {
			t.Fatal(err)
		}
		inner, err := c.Acquire(ctx, "pay/re", WithOnFence(func() {}))
		if err != nil {
			t.Fatal(err)
		}
		if inner.Token() != outer.Token() || c.HoldCount("pay/re") != 2 {
			t.Fatalf("nested: token %d vs %d, count %d", inner.Token(), outer.Token(), c.HoldCount("pay/re"))
		}
		grants := f.calledN("Acquire") + f.calledN("Hold")
		if grants != 1 {
			t.Fatalf("%d grants asked for two nested acquires", grants)
		}
		if err := inner.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := inner.Release(ctx); err != nil {
			t.Fatal("a second release of one Hold does nothing")
		}
		if c.HoldCount("pay/re") != 1 || f.calledN("Release")+f.calledN("HoldRelease") != 0 {
			t.Fatal("the inner release called the service or lost the count")
		}
		if err := outer.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if c.HoldCount("pay/re") != 0 || f.calledN("Release")+f.calledN("HoldRelease") != 1 {
			t.Fatalf("the outer release: count %d", c.HoldCount("pay/re"))
		}
		if streams > 0 && (f.calledN("Hold") != 1 || c.OpenHoldStreams() != 0) {
			t.Fatalf("the hold stream carried the lock: %v, open %d", f.calls, c.OpenHoldStreams())
		}
		for _, k := range f.keyHeaders {
			if k != "pay/re" {
				t.Fatalf("lock-key %q", k)
			}
		}
		if len(f.instances) != 1 || f.instances[0] != c.Instance() {
			t.Fatalf("lock-instance %v, want %q", f.instances, c.Instance())
		}
		if len(f.keyHeaders) == 0 {
			t.Fatal("no lock-key sent")
		}
		next, err := c.TryAcquire(ctx, "pay/re", WithOnFence(func() {}))
		if err != nil || next.Token() <= outer.Token() {
			t.Fatalf("the next grant's token must be greater: %v", err)
		}
	}
}

// One session per TTL for many holds; a failed renewal drains at once and fences at the
// send time of the last success + TTL - 1 s.
func TestDrainThenFenceAtTheDeadline(t *testing.T) {
	f, endpoint := startFake(t, 3)
	c := dialFake(t, endpoint)
	ctx := context.Background()
	var fenced atomic.Int64
	h1, err := c.Acquire(ctx, "pay/f1", WithOnFence(func() { fenced.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	h2, err := c.Acquire(ctx, "pay/f2", WithOnFence(func() { fenced.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	if f.calledN("OpenSession") != 1 {
		t.Fatal("two holds of one TTL share one session")
	}
	time.Sleep(1500 * time.Millisecond) // a renewal or more at TTL/3 = 1 s
	if f.calledN("KeepAlive") < 1 || !h1.CanStart() {
		t.Fatalf("renewed %d times", f.calledN("KeepAlive"))
	}
	f.mu.Lock()
	f.dropRenewal = true
	f.mu.Unlock()
	start := time.Now()
	for h1.CanStart() && time.Since(start) < 3*time.Second {
		time.Sleep(20 * time.Millisecond)
	}
	if h1.CanStart() {
		t.Fatal("a failed renewal must drain")
	}
	for fenced.Load() < 2 && time.Since(start) < 4*time.Second {
		time.Sleep(20 * time.Millisecond)
	}
	if fenced.Load() != 2 || !h1.Fenced() || !h2.Fenced() || h1.WasContinuous() || h1.RemainingTTL() != 0 {
		t.Fatalf("fenced %d", fenced.Load())
	}
	if err := h1.Release(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("release of a fenced hold: %v", err)
	}
	// The next acquire opens a new session.
	f.mu.Lock()
	f.dropRenewal = false
	f.holders = map[string]int64{}
	f.mu.Unlock()
	h3, err := c.Acquire(ctx, "pay/f1", WithOnFence(func() {}))
	if err != nil || !h3.CanStart() || f.calledN("OpenSession") != 2 {
		t.Fatalf("after a fence: %v, sessions %d", err, f.calledN("OpenSession"))
	}
}

func TestHeldByAnotherClientAndTransientRetries(t *testing.T) {
	f, endpoint := startFake(t, 5)
	a := dialFake(t, endpoint)
	b := dialFake(t, endpoint)
	if a.Instance() == b.Instance() {
		t.Fatal("two Clients, two instances")
	}
	ctx := context.Background()
	if _, err := a.Acquire(ctx, "pay/h", WithOnFence(func() {})); err != nil {
		t.Fatal(err)
	}
	_, err := b.TryAcquire(ctx, "pay/h", WithOnFence(func() {}))
	if !errors.Is(err, ErrHeld) {
		t.Fatalf("%v", err)
	}
	noQuorum := func() {
		f.mu.Lock()
		f.refuse = refusal(codes.Unavailable, "NO_QUORUM", "store unavailable or without quorum", nil)
		f.mu.Unlock()
	}
	// Without a wait, a transient refusal is the answer (as lock-client's zero wait);
	// a caller that waits has it retried inside its context.
	noQuorum()
	if _, err := b.TryAcquire(ctx, "pay/other", WithOnFence(func() {})); !errors.Is(err, ErrNoQuorum) {
		t.Fatalf("TryAcquire answers NO_QUORUM: %v", err)
	}
	noQuorum()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := b.Acquire(wctx, "pay/other", WithOnFence(func() {})); err != nil {
		t.Fatalf("NO_QUORUM is retried within the wait: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Acquire(ctx, "pay/h", WithOnFence(func() {})); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
	if _, err := b.TryAcquire(ctx, "pay/h", WithOnFence(func() {})); err != nil {
		t.Fatalf("Close ended a's session: %v", err)
	}
}
