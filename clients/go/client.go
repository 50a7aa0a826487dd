package lock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/fenced-lock/fenced-lock/clients/go/lockv1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

const (
	// DefaultMaxHoldStreams is how many holds per Client keep their Hold stream open
	// before acquires fall back to the unary calls (WithMaxHoldStreams).
	DefaultMaxHoldStreams = 1024
	// maxTries bounds the attempts of one call (transient errors, session changes).
	maxTries = 32
	// maxPlaces bounds the keys whose cluster the client remembers.
	maxPlaces = 4096
	// maxWaitPerCall is the longest wait one Acquire asks the service for (it grants at
	// most 300 s); a longer context asks again.
	maxWaitPerCall = 300 * time.Second
	// callSlack bounds a call beyond the wait it asked for.
	callSlack = 10 * time.Second
	// closeTimeout bounds one CloseSession.
	closeTimeout = 5 * time.Second
)

// Client is a connection to the lock service and this process's contender for locks:
// its sessions (one per TTL and cluster, renewed in the background), its holds and its
// instance. It is safe for concurrent use. Close it before exiting: its sessions end at
// once and waiters are granted without waiting for the TTL.
type Client struct {
	conn     *grpc.ClientConn
	rpc      lockv1.LockClient
	instance string
	closeSrc func() error
	metrics  *metrics

	ctx    context.Context // the Client's life: keepalives and hold streams
	cancel context.CancelFunc

	opening chan struct{} // a mutex a context can give up on: one session opened at a time

	mu          sync.Mutex
	closed      bool
	sessions    map[slot]*session
	places      map[string]uint8  // key -> cluster tag, as last learned
	classes     map[string]string // key -> lock class, as the service last named it (metrics)
	clusterTags map[string]uint8  // cluster name -> tag, learned on WRONG_SESSION_PLACE
	holds       map[string]*reentry
	permits     map[string]*permitEntry // semaphore permits held, by key (permit.go)
	nextHold    uint64
	maxStreams  int
	openStreams int

	// Permit reclaims (permit_reclaim.go): how many decided to release a grant so far, and
	// per key the one whose release is under way.
	reclaimEpoch uint64
	reclaiming   map[string]chan struct{}
}

// slot names a session: its TTL and the cluster tag of its id.
type slot struct {
	ttl uint32
	tag uint8
}

// reentry is the outermost hold of a key in this Client; nested acquires only count.
type reentry struct {
	count   int
	token   uint64
	session *session
	link    *holdLink // the hold's open Hold stream (nil: unary release)
	tenure  *tenure   // the grant's hold time, shared by its nested holds
}

// Dial returns a Client of the lock service at endpoint (`https://lock-edge:8443`, or
// with WithMeshSidecar `http://127.0.0.1:15001`). It connects lazily; ctx bounds only the
// setup (the Workload API's first SVID). Credentials come from exactly one of
// WithSVIDFiles, WithX509Source, WithWorkloadAPI or WithMeshSidecar; TLS modes need
// WithServerID (or WithServerTrustDomain).
func Dial(ctx context.Context, endpoint string, opts ...DialOption) (*Client, error) {
	cfg := dialConfig{maxHoldStreams: DefaultMaxHoldStreams}
	for _, o := range opts {
		o(&cfg)
	}
	authority, err := checkEndpoint(endpoint, cfg.meshSidecar)
	if err != nil {
		return nil, err
	}
	instance := cfg.instance
	if instance == "" {
		instance = newInstance()
	} else if !ValidInstance(instance) {
		return nil, fmt.Errorf("lock: instance %q: 1..=%d characters of A-Z a-z 0-9 . _ : -", instance, MaxInstanceLen)
	}
	creds, closeSrc, err := cfg.transport(ctx)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(grpcTarget(authority), cfg.grpcDialOptions(creds)...)
	if err != nil {
		_ = closeSrc()
		return nil, fmt.Errorf("lock: %w", err)
	}
	life, cancel := context.WithCancel(context.Background())
	return &Client{
		conn:        conn,
		rpc:         lockv1.NewLockClient(conn),
		instance:    instance,
		closeSrc:    closeSrc,
		metrics:     newMetrics(cfg.meterProvider),
		ctx:         life,
		cancel:      cancel,
		opening:     make(chan struct{}, 1),
		sessions:    map[slot]*session{},
		places:      map[string]uint8{},
		classes:     map[string]string{},
		clusterTags: map[string]uint8{},
		holds:       map[string]*reentry{},
		permits:     map[string]*permitEntry{},
		reclaiming:  map[string]chan struct{}{},
		maxStreams:  cfg.maxHoldStreams,
	}, nil
}

// Instance is the `lock-instance` this Client sends with OpenSession.
func (c *Client) Instance() string { return c.instance }

// RPC is the raw lock.v1 stub on this Client's connection, for calls the Client does not
// wrap (Inspect, ValidateToken). Send keyed calls with their key as `lock-key` metadata
// (EncodeKey).
func (c *Client) RPC() lockv1.LockClient { return c.rpc }

// HoldCount is how many nested holds of key this Client has (0: not held).
func (c *Client) HoldCount(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.holds[key]; ok {
		return e.count
	}
	return 0
}

// OpenHoldStreams is how many holds keep their Hold stream open now.
func (c *Client) OpenHoldStreams() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.openStreams
}

// Close is Shutdown with a background context (each CloseSession bounded by 5 s).
func (c *Client) Close() error { return c.Shutdown(context.Background()) }

// Shutdown ends every hold of this Client now and closes its sessions: one CloseSession
// per session revokes its lease, so the next waiter of each key is granted at once
// instead of when the TTL runs out. No OnFence runs: the owner ended the holds. The
// Client cannot be used afterwards. A second call does nothing.
func (c *Client) Shutdown(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	sessions := make([]*session, 0, len(c.sessions))
	for _, s := range c.sessions {
		sessions = append(sessions, s)
	}
	clear(c.sessions)
	for _, h := range c.holds {
		if h.link != nil {
			h.link.close()
		}
	}
	clear(c.holds)
	clear(c.permits)
	c.openStreams = 0
	c.mu.Unlock()
	var first error
	for _, s := range sessions {
		wasFenced := s.fenced()
		s.close()
		if wasFenced {
			continue // its holds are dead already and its lease lapses within the margin
		}
		cctx, cancel := context.WithTimeout(ctx, closeTimeout)
		_, err := c.rpc.CloseSession(cctx, &lockv1.CloseSessionRequest{SessionId: s.id})
		cancel()
		if err = wrap(cctx, err); err != nil && !errors.Is(err, ErrSessionExpired) && first == nil {
			first = err
		}
	}
	c.cancel()
	if err := c.conn.Close(); err != nil && first == nil {
		first = fmt.Errorf("lock: %w", err)
	}
	if err := c.closeSrc(); err != nil && first == nil {
		first = fmt.Errorf("lock: %w", err)
	}
	return first
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// liveSessionLocked is a live session matching ok, if any. c.mu held.
func (c *Client) liveSessionLocked(ok func(slot) bool) *session {
	for k, s := range c.sessions {
		if ok(k) && !s.fenced() {
			return s
		}
	}
	return nil
}

// sessionForKey is a live session on the cluster key was last seen on, else any.
func (c *Client) sessionForKey(key string) *session {
	c.mu.Lock()
	defer c.mu.Unlock()
	if tag, ok := c.places[key]; ok {
		if s := c.liveSessionLocked(func(k slot) bool { return k.tag == tag }); s != nil {
			return s
		}
	}
	return c.liveSessionLocked(func(slot) bool { return true })
}

func (c *Client) sessionForTTL(ttl uint32) *session {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.liveSessionLocked(func(k slot) bool { return k.ttl == ttl })
}

func (c *Client) sessionOnCluster(cluster string) *session {
	c.mu.Lock()
	defer c.mu.Unlock()
	tag, ok := c.clusterTags[cluster]
	if !ok {
		return nil
	}
	return c.liveSessionLocked(func(k slot) bool { return k.tag == tag })
}

func (c *Client) learnPlace(key string, tag uint8) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.places[key]; !ok && len(c.places) >= maxPlaces {
		clear(c.places)
	}
	c.places[key] = tag
}

func (c *Client) forgetSession(s *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, x := range c.sessions {
		if x == s {
			delete(c.sessions, k)
		}
	}
}

// sessionOrOpen is the session to use when none was at hand: one another acquire opened
// meanwhile, or a new one. Opening is serialised per Client, so acquires racing on a
// Client without a session share the one opened first (ADR-10: one session per TTL).
func (c *Client) sessionOrOpen(ctx context.Context, key string, wanted func() *session, opened func(*session)) (*session, error) {
	select {
	case c.opening <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("lock: %w", ctx.Err())
	}
	defer func() { <-c.opening }()
	var found *session
	if wanted != nil {
		found = wanted()
	} else {
		found = c.sessionForKey(key)
	}
	if found != nil {
		return found, nil
	}
	s, err := c.openSession(ctx, key)
	if err != nil {
		return nil, err
	}
	if opened != nil {
		opened(s)
	}
	return s, nil
}

// openSession opens the session for key's class (its TTL) and starts renewing it.
func (c *Client) openSession(ctx context.Context, key string) (*session, error) {
	sent := time.Now()
	cctx, cancel := context.WithTimeout(keyed(ctx, key), callSlack)
	defer cancel()
	cctx = metadata.AppendToOutgoingContext(cctx, instanceHeader, c.instance)
	r, err := c.rpc.OpenSession(cctx, &lockv1.OpenSessionRequest{Key: key})
	if err != nil {
		return nil, wrap(ctx, err)
	}
	c.learnClass(key, r.GetClassName())
	s := newSession(r.GetSessionId(), time.Duration(r.GetTtlSeconds())*time.Second, sent)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		s.close()
		return nil, clientError(ErrClosed, "")
	}
	k := slot{ttl: r.GetTtlSeconds(), tag: tagOf(r.GetSessionId())}
	old := c.sessions[k]
	c.sessions[k] = s
	c.mu.Unlock()
	if old != nil && old.fenced() {
		old.close()
	}
	go s.keepAlive(c.ctx, c.rpc)
	return s, nil
}

// jitter is d with up to ±25 % jitter, so retrying clients do not align.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.75 + rand.Float64()*0.5))
}

// onSession runs call(session) for key until it answers, ctx ends or a refusal no retry
// cures: a session opened for the key's class when there is none, one of the TTL or on
// the cluster the service asks for (WRONG_SESSION_TTL, WRONG_SESSION_PLACE), a new one
// when it expired, and, when the caller waits, transient refusals waited out inside ctx.
// A call without a wait (TryAcquire...) answers the first transient refusal as it is, as
// lock-client does with a zero wait: NO_QUORUM or RATE_LIMITED at once, not after
// retrying for as long as ctx allows.
func onSession[T any](ctx context.Context, c *Client, key string, wait bool, call func(*session) (T, error)) (T, *session, error) {
	var zero T
	s := c.sessionForKey(key)
	var wanted func() *session
	var opened func(*session)
	backoff := 50 * time.Millisecond
	var last error
	for range maxTries {
		if c.isClosed() {
			return zero, nil, clientError(ErrClosed, "")
		}
		if s == nil {
			var err error
			if s, err = c.sessionOrOpen(ctx, key, wanted, opened); err != nil {
				if !wait || !retryable(err) {
					return zero, nil, err
				}
				last = err
				if !sleep(ctx, jitter(backoff)) {
					return zero, nil, last
				}
				continue
			}
		}
		answer, err := call(s)
		if err == nil {
			c.learnPlace(key, tagOf(s.id))
			return answer, s, nil
		}
		last = err
		var e *Error
		if !errors.As(err, &e) {
			return zero, nil, err
		}
		var pause time.Duration
		switch {
		case errors.Is(e, ErrWrongSessionTTL):
			ttl := e.ttlSeconds()
			wanted = func() *session { return c.sessionForTTL(ttl) }
			s = wanted()
			continue
		case errors.Is(e, ErrWrongSessionPlace):
			cluster := e.Metadata["cluster"]
			wanted = func() *session { return c.sessionOnCluster(cluster) }
			opened = func(o *session) {
				c.mu.Lock()
				c.clusterTags[cluster] = tagOf(o.id)
				c.mu.Unlock()
			}
			s = wanted()
			continue
		case errors.Is(e, ErrSessionExpired):
			c.forgetSession(s)
			s = nil
			continue
		case errors.Is(e, ErrRateLimited):
			pause = e.RetryAfter()
		case e.transient():
			backoff = min(backoff*2, time.Second)
			pause = jitter(backoff)
		default:
			return zero, nil, err
		}
		if !wait {
			return zero, nil, err
		}
		if dl, ok := ctx.Deadline(); ok && time.Now().Add(pause).After(dl) {
			return zero, nil, err
		}
		if !sleep(ctx, pause) {
			return zero, nil, err
		}
	}
	return zero, nil, last
}

func retryable(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.transient()
}

func (e *Error) ttlSeconds() uint32 {
	var n uint32
	_, _ = fmt.Sscan(e.Metadata["ttl_seconds"], &n)
	return n
}

// sleep waits d or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
