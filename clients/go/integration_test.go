package lock

// Integration tests against a real stack (etcd, arbiters, Envoy), configured through the
// environment by integration/tests/go_client.rs: they skip when LOCK_ENDPOINT is unset,
// and that harness fails if any of them skipped.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The dev stack's edge identity (integration/src/pki.rs ENVOY_ID), unless LOCK_SERVER_ID.
const devEdgeID = "spiffe://dev.lock.local/ns/edge/sa/envoy"

const childEnv = "LOCK_GO_CHILD_KEY"

func TestMain(m *testing.M) {
	if key := os.Getenv(childEnv); key != "" {
		os.Exit(childAcquire(key))
	}
	os.Exit(m.Run())
}

// childAcquire is the second process of TestStackProcessesSharingAnInstanceQueue: it
// acquires key (waiting), says so on stdout, releases and exits.
func childAcquire(key string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, os.Getenv("LOCK_ENDPOINT"),
		WithSVIDFiles(os.Getenv("LOCK_SVID"), os.Getenv("LOCK_SVID_KEY"), os.Getenv("LOCK_CA")),
		WithServerID(serverID()))
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	defer c.Close()
	fmt.Println("INSTANCE", c.Instance())
	h, err := c.Acquire(ctx, key, WithOnFence(func() {}))
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	fmt.Println("ACQUIRED", h.Token())
	if err := h.Release(ctx); err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	return 0
}

func serverID() string {
	if id := os.Getenv("LOCK_SERVER_ID"); id != "" {
		return id
	}
	return devEdgeID
}

func env(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Skipf("%s is not set: run through integration/tests/go_client.rs", name)
	}
	return v
}

// stackClient dials the stack as identity "LOCK" or "LOCK_OTHER".
func stackClient(t *testing.T, who string, opts ...DialOption) *Client {
	t.Helper()
	base := []DialOption{
		WithSVIDFiles(env(t, who+"_SVID"), env(t, who+"_SVID_KEY"), env(t, "LOCK_CA")),
		WithServerID(serverID()),
	}
	c, err := Dial(context.Background(), env(t, "LOCK_ENDPOINT"), append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// testKey is a fresh key under LOCK_TEST_PREFIX (or the named prefix variable).
func testKey(t *testing.T, prefixVar string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.ReplaceAll(strings.TrimPrefix(t.Name(), "TestStack"), "/", "-")
	return env(t, prefixVar) + "/go-" + name + "-" + hex.EncodeToString(b[:])
}

func noFence(t *testing.T) AcquireOption {
	return WithOnFence(func() { t.Errorf("fenced unexpectedly") })
}

func TestStackAcquireReleaseAndTheTokenIncreases(t *testing.T) {
	c := stackClient(t, "LOCK")
	key := testKey(t, "LOCK_TEST_PREFIX")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h1, err := c.Acquire(ctx, key, noFence(t))
	if err != nil {
		t.Fatal(err)
	}
	if !h1.CanStart() || h1.RemainingTTL() <= 0 || h1.Token() == 0 {
		t.Fatalf("a fresh hold: can start %v, remaining %v", h1.CanStart(), h1.RemainingTTL())
	}
	if err := h1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	h2, err := c.TryAcquire(ctx, key, noFence(t))
	if err != nil {
		t.Fatal(err)
	}
	if h2.Token() <= h1.Token() {
		t.Fatal("the second grant's token is not greater than the first's")
	}
	// Held across more than a TTL: renewed, never fenced.
	ttl, _ := strconv.Atoi(env(t, "LOCK_TEST_TTL"))
	time.Sleep(time.Duration(ttl)*time.Second + time.Second)
	if !h2.CanStart() || !h2.WasContinuous() {
		t.Fatal("the hold lapsed although its session was renewed")
	}
	if err := h2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestStackAnotherIdentityIsRefusedThenQueues(t *testing.T) {
	me := stackClient(t, "LOCK")
	other := stackClient(t, "LOCK_OTHER")
	key := testKey(t, "LOCK_TEST_PREFIX")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := me.Acquire(ctx, key, noFence(t))
	if err != nil {
		t.Fatal(err)
	}
	_, err = other.TryAcquire(ctx, key, noFence(t))
	var e *Error
	if !errors.Is(err, ErrHeld) || !errors.As(err, &e) || e.Reason != "HELD" {
		t.Fatalf("TryAcquire of a held key: %v", err)
	}
	short, cancelShort := context.WithTimeout(ctx, 1500*time.Millisecond)
	_, err = other.Acquire(short, key, noFence(t))
	cancelShort()
	if !errors.Is(err, ErrHeld) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a wait that ends first: %v", err)
	}
	got := queue(ctx, t, other, key)
	assertWaiting(t, got, time.Second)
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("the waiter: %v", r.err)
	}
	if r.hold.Token() <= h.Token() {
		t.Fatal("the waiter's token is not greater")
	}
	if err := r.hold.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

type acquired struct {
	hold *Hold
	err  error
}

func queue(ctx context.Context, t *testing.T, c *Client, key string) chan acquired {
	got := make(chan acquired, 1)
	go func() {
		h, err := c.Acquire(ctx, key, noFence(t))
		got <- acquired{h, err}
	}()
	return got
}

func assertWaiting(t *testing.T, got chan acquired, d time.Duration) {
	t.Helper()
	select {
	case r := <-got:
		t.Fatalf("the second contender did not wait: %+v", r.err)
	case <-time.After(d):
	}
}

// Two Clients of one process are two contenders (their numbers differ): the second waits,
// never LEAKED_HOLD.
func TestStackTwoClientsOfOneProcessQueue(t *testing.T) {
	a := stackClient(t, "LOCK")
	b := stackClient(t, "LOCK")
	if a.Instance() == b.Instance() {
		t.Fatal("two Clients share an instance")
	}
	key := testKey(t, "LOCK_TEST_PREFIX")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := a.Acquire(ctx, key, noFence(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquire(ctx, key, noFence(t)); !errors.Is(err, ErrHeld) {
		t.Fatalf("the sibling Client is told %v, want ErrHeld", err)
	}
	got := queue(ctx, t, b, key)
	assertWaiting(t, got, time.Second)
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("the second Client: %v", r.err)
	}
	if r.hold.Token() <= h.Token() {
		t.Fatal("token")
	}
	_ = r.hold.Release(ctx)
}

// Processes sharing one LOCK_INSTANCE (one pod) queue behind each other: their pids differ.
func TestStackProcessesSharingAnInstanceQueue(t *testing.T) {
	env(t, "LOCK_ENDPOINT")
	t.Setenv(InstanceEnv, "go-test-pod-"+strconv.Itoa(os.Getpid()))
	c := stackClient(t, "LOCK")
	key := testKey(t, "LOCK_TEST_PREFIX")
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	h, err := c.Acquire(ctx, key, noFence(t))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+key)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 8)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	first := <-lines
	// The child's first Client: the shared prefix, its own pid, number 1.
	want := fmt.Sprintf("INSTANCE %s:%d:1", os.Getenv(InstanceEnv), cmd.Process.Pid)
	if first != want || first == "INSTANCE "+c.Instance() {
		t.Fatalf("the child's instance: %q, want %q (mine %q)", first, want, c.Instance())
	}
	select {
	case l := <-lines:
		t.Fatalf("the child did not wait: %q", l)
	case <-time.After(1500 * time.Millisecond):
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-lines
	if !strings.HasPrefix(l, "ACQUIRED ") {
		t.Fatalf("the child: %q", l)
	}
	if tok, _ := strconv.ParseUint(strings.TrimPrefix(l, "ACQUIRED "), 10, 64); tok <= h.Token() {
		t.Fatal("the child's token is not greater")
	}
	for l := range lines {
		t.Logf("child: %s", l)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the child failed: %v", err)
	}
}

func TestStackReentry(t *testing.T) {
	c := stackClient(t, "LOCK")
	other := stackClient(t, "LOCK_OTHER")
	key := testKey(t, "LOCK_TEST_PREFIX")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	outer, err := c.Acquire(ctx, key, noFence(t))
	if err != nil {
		t.Fatal(err)
	}
	inner, err := c.TryAcquire(ctx, key, noFence(t))
	if err != nil {
		t.Fatal(err)
	}
	if inner.Token() != outer.Token() || c.HoldCount(key) != 2 {
		t.Fatal("the nested acquire is the same grant, counted")
	}
	if err := inner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := other.TryAcquire(ctx, key, noFence(t)); !errors.Is(err, ErrHeld) {
		t.Fatalf("after the inner release the key is still held: %v", err)
	}
	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := other.TryAcquire(ctx, key, noFence(t))
	if err != nil {
		t.Fatalf("after the outer release: %v", err)
	}
	_ = h.Release(ctx)
}

// Refusals arrive as their typed errors: LEAKED_HOLD (one identity and instance under
// two sessions), NOT_GRANTED, and STALE_TOKEN is never what a clean release says.
func TestStackRefusalsAreTyped(t *testing.T) {
	a := stackClient(t, "LOCK", WithInstance("go-same-instance"))
	b := stackClient(t, "LOCK", WithInstance("go-same-instance"))
	key := testKey(t, "LOCK_TEST_PREFIX")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := a.Acquire(ctx, key, noFence(t))
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.TryAcquire(ctx, key, noFence(t))
	var e *Error
	if !errors.Is(err, ErrLeakedHold) || !errors.As(err, &e) || e.Reason != "LEAKED_HOLD" {
		t.Fatalf("one instance under two sessions: %v", err)
	}
	if strings.Contains(err.Error(), strconv.FormatUint(h.Token(), 10)) {
		t.Fatal("an error shows a token")
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = a.TryAcquire(ctx, "archive/go", noFence(t))
	if !errors.Is(err, ErrNotGranted) || !errors.As(err, &e) || e.Reason != "NOT_GRANTED" {
		t.Fatalf("a key without a grant: %v", err)
	}
	_, err = a.TryAcquire(ctx, env(t, "LOCK_TEST_PREFIX")+"//bad", noFence(t))
	if !errors.Is(err, ErrInvalidKey) && !errors.Is(err, ErrMalformedRequest) {
		t.Fatalf("an invalid key: %v", err)
	}
}

// A key of another class's TTL: WRONG_SESSION_TTL is handled by opening its session.
func TestStackASessionPerTTL(t *testing.T) {
	c := stackClient(t, "LOCK")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fast, err := c.Acquire(ctx, testKey(t, "LOCK_TEST_PREFIX"), noFence(t))
	if err != nil {
		t.Fatal(err)
	}
	slow, err := c.Acquire(ctx, testKey(t, "LOCK_TEST_SLOW_PREFIX"), noFence(t))
	if err != nil {
		t.Fatal(err)
	}
	if fast.s == slow.s || slow.RemainingTTL() <= fast.RemainingTTL() {
		t.Fatalf("one session per TTL: remaining %v and %v", fast.RemainingTTL(), slow.RemainingTTL())
	}
	_ = fast.Release(ctx)
	_ = slow.Release(ctx)
}
