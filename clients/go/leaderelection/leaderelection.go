// Package leaderelection is fenced leader election for Kubernetes controllers (and any
// singleton) on the lock service, shaped like client-go's
// k8s.io/client-go/tools/leaderelection: a Config with callbacks and RunOrDie. The
// differences are what the fence needs:
//
//   - OnStartedLeading(ctx, term) receives the term: a *lock.Leadership whose Term() is
//     the hold's fencing token. Every write the leader makes carries it, and the resource
//     refuses a write under an older term (`UPDATE ... SET ..., fence = $term WHERE id = $1
//     AND fence <= $term`, 0 rows: deposed). term.CanLead() turns false at the first failed
//     renewal: start nothing new.
//   - Leadership ends by the hold's drain-then-fence rule (ADR-12): at the session's local
//     deadline (the send time of the last successful keepalive + TTL − 1 s, before the
//     store can grant the key to anyone else) the leader's ctx is cancelled and
//     OnStoppedLeading is called, on the lock client's renewal goroutine: never later
//     than the fence.
//   - Candidates wait in the key's FIFO queue (lock.Client.Campaign): a resign or an
//     expiry hands the key to the next candidate at once, with no polling period.
//   - OnNewLeader(identity) comes from lock.v1 Observe; an identity is the holder's
//     `lock-instance` (replicas of one Deployment share one SPIFFE ID, so the instance is
//     what tells them apart), and Identity() is this elector's.
//
// # Why not a client-go resourcelock.Interface
//
// A lock.Interface for client-go's RunOrDie (Get, Create, Update, RecordEvent, Identity,
// Describe; read in client-go v0.37.2, tools/leaderelection/leaderelection.go) was the
// first choice, so that a controller would change only the Lock it passes. It cannot keep
// the fence's two promises:
//
//  1. It cannot end leadership on the fence. RunOrDie decides leadership by its own clock:
//     renew() retries tryAcquireOrRenew every RetryPeriod inside
//     wait.PollUntilContextTimeout(..., RenewDeadline, ...), and only when a whole
//     RenewDeadline has passed without success does it cancel the OnStartedLeading ctx;
//     OnStoppedLeading runs later still, deferred in Run, after ReleaseOnCancel's release.
//     A resourcelock implementation can only make Get and Update fail: it has no way to
//     cancel the leader's ctx. After the session's deadline the controller would go on
//     leading for up to RenewDeadline (+ RetryPeriod) while the store may already have
//     granted the key to another replica: OnStoppedLeading after the fence, not before.
//  2. It cannot carry the term. OnStartedLeading(ctx) receives only a context, and
//     LeaderElectionRecord has no field for a token (HolderIdentity,
//     LeaseDurationSeconds, AcquireTime, RenewTime, LeaderTransitions, Strategy,
//     PreferredHolder). The controller would read the token from the lock object out of
//     band, racing the end of one term and the start of the next.
//
// Also, RunOrDie's candidates do not queue: they Get every RetryPeriod and take over only
// after seeing the record unchanged for LeaseDuration by their own clock, which a lock
// service that grants in FIFO order can only imitate with synthetic records.
//
// The package depends on nothing but the lock client (no client-go), so it lives in the
// client's module. The sample controller (example/controller) is a module of its own so
// that its PostgreSQL driver does not enter the client's go.mod.
//
// Moving from client-go:
//
//	leaderelection.RunOrDie(ctx, leaderelection.Config{
//		Client: locks, // *lock.Client, dialled with the pod's SVID
//		Key:    "ops/controllers/my-controller",
//		Callbacks: leaderelection.LeaderCallbacks{
//			OnStartedLeading: func(ctx context.Context, term *lock.Leadership) {
//				run(ctx, term) // every write: ... fence = term.Term() ... AND fence <= term
//			},
//			OnStoppedLeading: func() { log.Print("stopped leading") },
//			OnNewLeader:      func(id string) { log.Printf("leader: %s", id) },
//		},
//	})
package leaderelection

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	lock "github.com/fenced-lock/fenced-lock/clients/go"
)

// resignTimeout bounds the Resign when Run's context ends while leading.
const resignTimeout = 5 * time.Second

// LeaderCallbacks are the functions the elector calls, as client-go's.
type LeaderCallbacks struct {
	// OnStartedLeading runs in its own goroutine when this elector leads. ctx is
	// cancelled when the leadership ends (the fence, or Run's ctx ending); term.Term()
	// is the fencing token to put on every write, term.CanLead() is false from the first
	// failed renewal. Required.
	OnStartedLeading func(ctx context.Context, term *lock.Leadership)
	// OnStoppedLeading runs once per Run: at the fence (on the lock client's renewal
	// goroutine: do not block), or when Run's ctx ended (after OnStartedLeading returned
	// and before the term is resigned), or when Run returns without having led. Required.
	OnStoppedLeading func()
	// OnNewLeader runs when the leader observed changes (this elector included: compare
	// with Identity). Optional.
	OnNewLeader func(identity string)
}

// Config configures an elector.
type Config struct {
	// Client is the lock client the elector campaigns with; its Instance is the
	// elector's Identity. One elector per Client and key.
	Client *lock.Client
	// Key is the leadership key (a grant of the workload's SPIFFE ID must cover it).
	Key string
	// Callbacks are required (OnNewLeader optional).
	Callbacks LeaderCallbacks
}

// LeaderElector campaigns for and holds one key's leadership.
type LeaderElector struct {
	cfg     Config
	leading atomic.Bool
	mu      sync.Mutex
	leader  string
}

// NewLeaderElector checks cfg and returns its elector.
func NewLeaderElector(cfg Config) (*LeaderElector, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("leaderelection: Client is required")
	case cfg.Key == "":
		return nil, errors.New("leaderelection: Key is required")
	case cfg.Callbacks.OnStartedLeading == nil:
		return nil, errors.New("leaderelection: OnStartedLeading is required")
	case cfg.Callbacks.OnStoppedLeading == nil:
		return nil, errors.New("leaderelection: OnStoppedLeading is required")
	}
	return &LeaderElector{cfg: cfg}, nil
}

// RunOrDie is NewLeaderElector, panicking on an invalid config, then Run.
func RunOrDie(ctx context.Context, cfg Config) error {
	le, err := NewLeaderElector(cfg)
	if err != nil {
		panic(err)
	}
	return le.Run(ctx)
}

// Identity is this elector's identity: its Client's instance.
func (le *LeaderElector) Identity() string { return le.cfg.Client.Instance() }

// IsLeader reports whether this elector leads now.
func (le *LeaderElector) IsLeader() bool { return le.leading.Load() }

// GetLeader is the identity of the last leader observed ("" before the first).
func (le *LeaderElector) GetLeader() string {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.leader
}

// Run campaigns for the key and, once leading, leads until the term is fenced or ctx
// ends; then it returns (campaign again by calling it again, as a client-go controller
// runs RunOrDie in a loop or exits). It returns nil when a term ended or ctx ended, else
// the refusal that ended the campaign (lock.ErrNotGranted, lock.ErrInvalidKey...). It
// returns only after OnStartedLeading has returned, so one process never runs two terms
// at once.
func (le *LeaderElector) Run(ctx context.Context) error {
	cb := le.cfg.Callbacks
	var stopOnce sync.Once
	stop := func() {
		stopOnce.Do(func() {
			le.leading.Store(false)
			cb.OnStoppedLeading()
		})
	}
	defer stop()

	runCtx, cancelRun := context.WithCancel(ctx)
	var watching sync.WaitGroup
	defer func() {
		cancelRun()
		watching.Wait() // no OnNewLeader after Run returns
	}()
	if cb.OnNewLeader != nil {
		watching.Add(1)
		go func() {
			defer watching.Done()
			le.watch(runCtx)
		}()
	}

	leaderCtx, cancelLeader := context.WithCancel(runCtx)
	defer cancelLeader()
	fenced := make(chan struct{})
	term, err := le.cfg.Client.Campaign(runCtx, le.cfg.Key, lock.WithOnFence(func() {
		// The hold's local deadline: the store may grant the key to another candidate
		// from now on. Stop leading here, before that can happen.
		cancelLeader()
		stop()
		close(fenced)
	}))
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("leaderelection: campaign for %q: %w", le.cfg.Key, err)
	}
	le.leading.Store(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		cb.OnStartedLeading(leaderCtx, term)
	}()
	select {
	case <-fenced:
		<-done
		return nil
	case <-ctx.Done():
	}
	cancelLeader()
	select {
	case <-done:
	case <-fenced:
		<-done
		return nil
	}
	stop()
	rctx, cancel := context.WithTimeout(context.Background(), resignTimeout)
	defer cancel()
	if err := term.Resign(rctx); err != nil && !errors.Is(err, lock.ErrFenced) {
		return fmt.Errorf("leaderelection: resign %q: %w", le.cfg.Key, err)
	}
	return nil
}

// watch reports each new leader of the key to OnNewLeader, from an Observe of it.
func (le *LeaderElector) watch(ctx context.Context) {
	obs := le.cfg.Client.Observe(ctx, le.cfg.Key)
	defer obs.Close()
	for {
		ev, err := obs.Next()
		if err != nil {
			return
		}
		if !ev.Held || ev.Holder == nil {
			continue
		}
		if ev.Change != lock.ChangeCurrent && ev.Change != lock.ChangeGranted {
			continue
		}
		id := ev.Holder.Instance
		if id == "" {
			id = ev.Holder.SPIFFEID
		}
		le.mu.Lock()
		changed := id != le.leader
		le.leader = id
		le.mu.Unlock()
		if changed && ctx.Err() == nil {
			le.cfg.Callbacks.OnNewLeader(id)
		}
	}
}
