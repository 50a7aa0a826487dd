package lock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fenced-lock/fenced-lock/clients/go/lockv1"
)

// AcquireOption configures Acquire and TryAcquire.
type AcquireOption func(*acquireConfig)

type acquireConfig struct {
	onFence func()
}

// WithOnFence sets the function that runs if the hold is lost: its session could not be
// renewed before the local deadline (the send time of the last successful keepalive +
// TTL − 1 s), or the service said the session expired. It must stop the guarded work; it
// runs once, on the Client's renewal goroutine, and must not block. Required (ADR-12):
// Acquire without it returns ErrOnFenceRequired before anything is sent.
func WithOnFence(f func()) AcquireOption {
	return func(c *acquireConfig) { c.onFence = f }
}

// Acquire takes key, waiting in the key's queue until it is granted or ctx ends (a held
// key's refusal is then ErrHeld, or ctx's error). Transient refusals (NO_QUORUM,
// UNAVAILABLE, DRAINING, MOVING, RATE_LIMITED) are retried within ctx, and the right
// session is opened for the key's class. A key this Client holds already is re-entered:
// the returned Hold shares the grant (and token), nothing is sent, and the key stays held
// until every Hold of it is released.
func (c *Client) Acquire(ctx context.Context, key string, opts ...AcquireOption) (*Hold, error) {
	return c.acquireTimed(ctx, key, true, opts)
}

// TryAcquire is Acquire without waiting: ErrHeld at once when another session holds key,
// and a transient refusal (ErrNoQuorum, ErrRateLimited, ErrUnavailable...) is its answer
// as well, not retried: waiting it out is Acquire's.
func (c *Client) TryAcquire(ctx context.Context, key string, opts ...AcquireOption) (*Hold, error) {
	return c.acquireTimed(ctx, key, false, opts)
}

// acquireTimed is Acquire or TryAcquire, its wait recorded when it called the service.
func (c *Client) acquireTimed(ctx context.Context, key string, wait bool, opts []AcquireOption) (*Hold, error) {
	cfg, id, err := c.newAcquire(opts)
	if err != nil {
		return nil, err
	}
	if h := c.reenter(key, id, cfg.onFence); h != nil {
		return h, nil
	}
	start := time.Now()
	h, err := c.acquire(ctx, key, id, wait, cfg)
	c.metrics.waited(ctx, start, c.classOf(key), err)
	return h, err
}

// newAcquire checks an acquire's options and numbers its hold; nothing is sent (and
// nothing recorded) when it fails.
func (c *Client) newAcquire(opts []AcquireOption) (acquireConfig, uint64, error) {
	var cfg acquireConfig
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.onFence == nil {
		return cfg, 0, ErrOnFenceRequired
	}
	id, err := c.newHoldID()
	return cfg, id, err
}

// waitFor is the wait one Acquire asks the service for: 0 without waiting; else the time
// ctx leaves, less a tenth (at most 1 s) so the service answers before ctx ends, capped
// at what the service grants.
func waitFor(ctx context.Context, wait bool, now time.Time) time.Duration {
	if !wait {
		return 0
	}
	dl, ok := ctx.Deadline()
	if !ok {
		return maxWaitPerCall
	}
	left := dl.Sub(now)
	left -= min(left/10, time.Second)
	return max(min(left, maxWaitPerCall), 0)
}

type grant struct {
	token uint64
	class string // the lock class the service named (empty: none)
	link  *holdLink
}

// acquire asks the service for key (not held by this Client) until it answers.
func (c *Client) acquire(ctx context.Context, key string, id uint64, wait bool, cfg acquireConfig) (*Hold, error) {
	for {
		var asked time.Duration
		g, s, err := onSession(ctx, c, key, wait, func(s *session) (grant, error) {
			asked = waitFor(ctx, wait, time.Now())
			return c.grant(ctx, s, &lockv1.AcquireRequest{
				Key:        key,
				SessionId:  s.id,
				WaitMillis: uint64(asked / time.Millisecond),
			})
		})
		if err == nil {
			c.learnClass(key, g.class)
			return c.held(key, id, g, s, cfg.onFence), nil
		}
		// The service's wait ended before ctx did (a context longer than 300 s, or
		// none): queue again.
		if wait && asked > 0 && errors.Is(err, ErrHeld) && ctx.Err() == nil {
			if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > time.Second {
				continue
			}
		}
		return nil, err
	}
}

// reenter counts a nested acquire of a key this Client holds (nothing is sent).
func (c *Client) reenter(key string, id uint64, onFence func()) *Hold {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.holds[key]
	if !ok {
		return nil
	}
	if e.session.fenced() {
		delete(c.holds, key)
		if e.link != nil {
			c.dropLinkLocked(e.link)
		}
		return nil
	}
	e.count++
	e.session.attach(id, onFence, e.tenure)
	return &Hold{c: c, key: key, id: id, token: e.token, s: e.session, tenure: e.tenure}
}

func (c *Client) held(key string, id uint64, g grant, s *session, onFence func()) *Hold {
	t := c.metrics.granted(c.classOf(key))
	s.attach(id, onFence, t)
	c.mu.Lock()
	c.holds[key] = &reentry{count: 1, token: g.token, session: s, link: g.link, tenure: t}
	c.mu.Unlock()
	return &Hold{c: c, key: key, id: id, token: g.token, s: s, tenure: t}
}

// grant is one acquire on session s: on a Hold stream when the budget allows (the stream
// kept for the release), else the unary call. If ctx ends while the service may be
// granting, the grant is reclaimed in the background (a retried acquire on the same
// session gets it back, and it is released) so that no hold outlives its caller.
func (c *Client) grant(ctx context.Context, s *session, req *lockv1.AcquireRequest) (grant, error) {
	timeout := time.Duration(req.WaitMillis)*time.Millisecond + callSlack
	c.mu.Lock()
	stream := c.openStreams < c.maxStreams
	if stream {
		c.openStreams++
	}
	c.mu.Unlock()
	if !stream {
		cctx, cancel := context.WithTimeout(keyed(ctx, req.Key), timeout)
		defer cancel()
		r, err := c.rpc.Acquire(cctx, req)
		if err != nil {
			if ctx.Err() != nil {
				go c.reclaim(req.Key, s)
			}
			return grant{}, wrap(ctx, err)
		}
		return grant{token: r.GetToken(), class: r.GetClassName()}, nil
	}
	link, err := c.openLink(req.Key)
	if err != nil {
		c.releaseSlot()
		return grant{}, err
	}
	a, err := link.ask(ctx, &lockv1.HoldRequest{Step: &lockv1.HoldRequest_Acquire{Acquire: req}}, timeout)
	if err == nil {
		if acq := a.GetAcquired(); acq != nil {
			return grant{token: acq.GetToken(), class: acq.GetClassName(), link: link}, nil
		}
		err = clientError(ErrUnavailable, "the hold stream ended without answering the acquire")
	}
	c.dropLink(link)
	if ctx.Err() != nil {
		go c.reclaim(req.Key, s)
	}
	return grant{}, err
}

// reclaim releases a grant the service may have made to s for key after its caller gave
// up: an acquire without waiting on the same session gets the grant back if there is one.
func (c *Client) reclaim(key string, s *session) {
	ctx, cancel := context.WithTimeout(c.ctx, callSlack)
	defer cancel()
	r, err := c.rpc.Acquire(keyed(ctx, key), &lockv1.AcquireRequest{Key: key, SessionId: s.id})
	if err != nil {
		return
	}
	c.mu.Lock()
	e, mine := c.holds[key]
	c.mu.Unlock()
	if mine && e.session == s {
		return // a later acquire of this Client holds it now
	}
	_, _ = c.rpc.Release(keyed(ctx, key), &lockv1.ReleaseRequest{Key: key, Token: r.GetToken(), SessionId: s.id})
}

func (c *Client) releaseSlot() {
	c.mu.Lock()
	c.openStreams--
	c.mu.Unlock()
}

func (c *Client) dropLink(l *holdLink) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropLinkLocked(l)
}

func (c *Client) dropLinkLocked(l *holdLink) {
	if l.close() && !c.closed {
		c.openStreams--
	}
}

// Hold is a granted lock. Pass Token to the guarded write and compare it there; check
// CanStart before each unit of work; Release when done. A Hold's String never shows its
// token.
type Hold struct {
	c        *Client
	key      string
	id       uint64
	token    uint64
	s        *session
	tenure   *tenure
	released atomic.Bool
}

// Key is the held key.
func (h *Hold) Key() string { return h.key }

// Token is the fencing token: epoch << 48 | the etcd revision of the grant, greater than
// every earlier grant's of the key. The resource stores it with each write and accepts a
// write only when its token is greater than the stored one, in its own conditional write.
// A capability: never log it.
func (h *Hold) Token() uint64 { return h.token }

// CanStart is false from the first failed renewal on: finish in-flight work, start
// nothing new.
func (h *Hold) CanStart() bool { return h.s.canStart() }

// RemainingTTL is the time left before the local deadline at which the hold is fenced.
func (h *Hold) RemainingTTL() time.Duration { return h.s.remaining() }

// Fenced reports whether the hold was fenced (its OnFence ran or its Client was closed):
// it is dead.
func (h *Hold) Fenced() bool { return h.s.fenced() }

// WasContinuous reports whether the hold covered every instant from its grant until now:
// ask when the guarded work ends, before Release. False once the session passed its local
// deadline, even if the renewal goroutine has not fenced yet (a process frozen past the
// TTL): that work may not have been exclusive, and only the resource's fence kept it safe.
func (h *Hold) WasContinuous() bool { return h.s.continuous() }

// String describes the hold without its token.
func (h *Hold) String() string {
	return fmt.Sprintf("lock.Hold{key: %q, session: %d}", h.key, h.s.id)
}

// GoString is String: %#v never shows the token either.
func (h *Hold) GoString() string { return h.String() }

// Release ends this acquire. Only the outermost hold of a key calls the service; a
// nested one only counts down. ErrFenced when the hold was fenced before (its work may
// not have been exclusive). A second Release of the same Hold does nothing.
func (h *Hold) Release(ctx context.Context) error {
	if !h.released.CompareAndSwap(false, true) {
		return nil
	}
	c := h.c
	h.s.detach(h.id)
	c.mu.Lock()
	e, ok := c.holds[h.key]
	if !ok || e.session != h.s || e.token != h.token {
		// Not this grant's entry: the Client was closed, or the grant was fenced and
		// another took its place.
		c.mu.Unlock()
		if h.s.fenced() && !c.isClosedOrShut() {
			return clientError(ErrFenced, "the hold was fenced before its release")
		}
		return nil
	}
	if e.count > 1 {
		e.count--
		c.mu.Unlock()
		return nil
	}
	delete(c.holds, h.key)
	link := e.link
	c.mu.Unlock()
	if link != nil {
		defer c.dropLink(link)
	}
	if h.s.fenced() {
		h.tenure.end(outFenced) // if the fence did not record it first
		return clientError(ErrFenced, "the hold was fenced before its release")
	}
	// The hold ends for its owner now, whatever the release's answer.
	h.tenure.end(outReleased)
	req := &lockv1.ReleaseRequest{Key: h.key, Token: h.token, SessionId: h.s.id}
	if link != nil {
		a, err := link.ask(ctx, &lockv1.HoldRequest{Step: &lockv1.HoldRequest_Release{Release: req}}, callSlack)
		switch {
		case err == nil && a.GetReleased() != nil:
			return nil
		case err != nil && ctx.Err() != nil:
			return err
		case err != nil && !errors.Is(err, ErrUnavailable) && !brokenStream(err):
			return err
		}
		// The stream ended or broke without releasing: the unary call.
	}
	cctx, cancel := context.WithTimeout(keyed(ctx, h.key), callSlack)
	defer cancel()
	_, err := c.rpc.Release(cctx, req)
	return wrap(ctx, err)
}

func (c *Client) isClosedOrShut() bool { return c.isClosed() }

// holdLink is a hold as one Hold stream (issue 33): the acquire and, later, its release
// on one HTTP/2 stream, one request at the edge instead of two. Only a transport: the
// hold lives on the session, so a release the stream cannot carry goes as the unary call.
type holdLink struct {
	stream  lockv1.Lock_HoldClient
	cancel  context.CancelFunc
	answers chan holdAnswer
	once    sync.Once
}

type holdAnswer struct {
	resp *lockv1.HoldResponse
	err  error
}

// openLink opens a Hold stream for key on the Client's life (not the caller's ctx: the
// stream outlives the acquire until the release).
func (c *Client) openLink(key string) (*holdLink, error) {
	ctx, cancel := context.WithCancel(c.ctx)
	st, err := c.rpc.Hold(keyed(ctx, key))
	if err != nil {
		cancel()
		return nil, wrap(c.ctx, err)
	}
	l := &holdLink{stream: st, cancel: cancel, answers: make(chan holdAnswer, 2)}
	go func() {
		for {
			r, err := st.Recv()
			select {
			case l.answers <- holdAnswer{r, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return l, nil
}

// ask sends msg and waits (within ctx and timeout) for its one answer. A stream that
// ended without one, or broke, is ErrUnavailable; a refusal its *Error.
func (l *holdLink) ask(ctx context.Context, msg *lockv1.HoldRequest, timeout time.Duration) (*lockv1.HoldResponse, error) {
	if err := l.stream.Send(msg); err != nil && !errors.Is(err, io.EOF) {
		return nil, wrap(ctx, err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case a := <-l.answers:
		if errors.Is(a.err, io.EOF) {
			return nil, clientError(ErrUnavailable, "the hold stream ended")
		}
		if a.err != nil {
			return nil, wrap(ctx, a.err)
		}
		return a.resp, nil
	case <-t.C:
		return nil, clientError(ErrUnavailable, "the hold stream did not answer in time")
	case <-ctx.Done():
		return nil, fmt.Errorf("lock: %w", ctx.Err())
	}
}

// close ends the stream; true the first time.
func (l *holdLink) close() bool {
	first := false
	l.once.Do(func() {
		first = true
		_ = l.stream.CloseSend()
		l.cancel()
	})
	return first
}

// brokenStream reports a stream that failed without a lock.v1 refusal: Envoy resets the
// stream of an arbiter that was killed (RST_STREAM INTERNAL_ERROR), which is no answer of
// the service. The hold lives on the session, not on the stream, so its release still
// goes, as the unary call (conformance observe-resume restarts every arbiter under a hold).
func brokenStream(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Reason == ""
}
