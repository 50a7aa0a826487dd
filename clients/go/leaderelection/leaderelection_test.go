package leaderelection

// Stack tests: skipped unless LOCK_ENDPOINT is set (integration/tests/go_client.rs sets
// it and fails on any skip). The fence itself (a frozen leader) is proven with processes
// in integration/tests/go_election.rs.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	lock "github.com/fenced-lock/fenced-lock/clients/go"
)

func env(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Skipf("%s is not set: run through integration/tests/go_client.rs", name)
	}
	return v
}

func client(t *testing.T) *lock.Client {
	t.Helper()
	c, err := lock.Dial(context.Background(), env(t, "LOCK_ENDPOINT"),
		lock.WithSVIDFiles(env(t, "LOCK_SVID"), env(t, "LOCK_SVID_KEY"), env(t, "LOCK_CA")),
		lock.WithServerID(env(t, "LOCK_SERVER_ID")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestConfigIsChecked(t *testing.T) {
	if _, err := NewLeaderElector(Config{Key: "pay/x"}); err == nil {
		t.Fatal("no client")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("RunOrDie did not panic on a bad config")
		}
	}()
	_ = RunOrDie(context.Background(), Config{})
}

// recorder is one replica's callbacks, recorded.
type recorder struct {
	mu      sync.Mutex
	events  []string
	terms   []uint64
	leading chan struct{}
}

func (r *recorder) add(e string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) callbacks() LeaderCallbacks {
	return LeaderCallbacks{
		OnStartedLeading: func(ctx context.Context, term *lock.Leadership) {
			r.mu.Lock()
			r.terms = append(r.terms, term.Term())
			r.mu.Unlock()
			r.add("started")
			close(r.leading)
			<-ctx.Done()
			r.add("ctx done")
		},
		OnStoppedLeading: func() { r.add("stopped") },
		OnNewLeader:      func(id string) { r.add("leader " + id) },
	}
}

func (r *recorder) has(e string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range r.events {
		if x == e {
			return true
		}
	}
	return false
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 15 s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Two replicas of one identity: one leads, both are told who; cancelling the leader's
// Run stops it (its ctx first, then OnStoppedLeading, then the resign) and the other
// leads at once under a higher term, and both are told.
func TestStackTwoReplicasElectOneLeaderAndHandOver(t *testing.T) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	key := env(t, "LOCK_TEST_PREFIX") + "/go-elector-" + hex.EncodeToString(b[:])
	ca, cb := client(t), client(t)
	ra := &recorder{leading: make(chan struct{})}
	rb := &recorder{leading: make(chan struct{})}
	ctxA, stopA := context.WithCancel(context.Background())
	defer stopA()
	ea, err := NewLeaderElector(Config{Client: ca, Key: key, Callbacks: ra.callbacks()})
	if err != nil {
		t.Fatal(err)
	}
	doneA := make(chan error, 1)
	go func() { doneA <- ea.Run(ctxA) }()
	<-ra.leading
	ctxB, stopB := context.WithCancel(context.Background())
	defer stopB()
	eb, _ := NewLeaderElector(Config{Client: cb, Key: key, Callbacks: rb.callbacks()})
	doneB := make(chan error, 1)
	go func() { doneB <- eb.Run(ctxB) }()
	eventually(t, "both told A leads", func() bool {
		return ra.has("leader "+ea.Identity()) && rb.has("leader "+ea.Identity())
	})
	if !ea.IsLeader() || eb.IsLeader() || eb.GetLeader() != ea.Identity() {
		t.Fatal("IsLeader/GetLeader")
	}
	select {
	case <-rb.leading:
		t.Fatal("two leaders")
	case <-time.After(time.Second):
	}
	stopA()
	if err := <-doneA; err != nil {
		t.Fatal(err)
	}
	ra.mu.Lock()
	order := append([]string(nil), ra.events...)
	ra.mu.Unlock()
	if n := len(order); n < 2 || order[n-2] != "ctx done" || order[n-1] != "stopped" {
		t.Fatalf("A's end: %v", order)
	}
	select {
	case <-rb.leading:
	case <-time.After(5 * time.Second):
		t.Fatal("B did not lead after A resigned")
	}
	eventually(t, "B told it leads", func() bool { return rb.has("leader " + eb.Identity()) })
	if rb.terms[0] <= ra.terms[0] {
		t.Fatal("B's term is not above A's")
	}
	stopB()
	if err := <-doneB; err != nil {
		t.Fatal(err)
	}
	if !rb.has("stopped") {
		t.Fatal("B's OnStoppedLeading")
	}
}
