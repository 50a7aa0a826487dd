package lock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/fenced-lock/fenced-lock/clients/go/lockv1"
)

// Semaphores: one of the N permits of a key of a `permits: N` class. Up to N sessions hold
// the key at once, each on its own permit (numbered 0..N-1) with its own token. A resource
// fences per permit: it keeps the last token seen for each (key, permit) and accepts a
// write only under a greater one
// (`UPDATE ... SET fence = $token WHERE key = $k AND permit = $p AND fence < $token`), so a
// paused permit holder's late write is refused once its permit has been given again.
//
// Re-entrancy follows the exclusive hold's rule (and the Rust client's): a Client that holds
// a permit of a key and asks again gets the same permit back, nested, and the service hears
// one release, the last one. The service agrees: a session holds at most one permit of a
// key, and the same session asking again is answered the same permit and token.

// permitEntry is the outermost permit grant of a key in this Client; nested acquires only
// count.
type permitEntry struct {
	count   int
	permit  uint32
	token   uint64
	session *session
	tenure  *tenure // the grant's hold time, shared by its nested Permits
}

// AcquirePermit takes one permit of key, a key of a semaphore class (`permits: N`),
// waiting in the key's FIFO queue while all N are held, until one is handed to it or ctx
// ends (then ErrHeld, or ctx's error). Transient refusals are retried within ctx, as for
// Acquire. A key of which this Client holds a permit already is re-entered: the returned
// Permit shares that grant (the same permit and token), nothing is sent, and the permit
// stays held until every Permit of it is released. A key of any other class is
// ErrMalformedRequest, as is Acquire or AcquireShared on a semaphore's key. WithOnFence is
// required.
func (c *Client) AcquirePermit(ctx context.Context, key string, opts ...AcquireOption) (*Permit, error) {
	return c.acquirePermit(ctx, key, true, opts)
}

// TryAcquirePermit is AcquirePermit without waiting: ErrHeld at once while all N permits
// are held (or others wait for one); a transient refusal is the answer, as for TryAcquire.
func (c *Client) TryAcquirePermit(ctx context.Context, key string, opts ...AcquireOption) (*Permit, error) {
	return c.acquirePermit(ctx, key, false, opts)
}

func (c *Client) acquirePermit(ctx context.Context, key string, wait bool, opts []AcquireOption) (*Permit, error) {
	cfg, id, err := c.newAcquire(opts)
	if err != nil {
		return nil, err
	}
	if p := c.reenterPermit(key, id, cfg.onFence); p != nil {
		return p, nil // nested: no call, nothing recorded
	}
	start := time.Now()
	p, err := c.askPermit(ctx, key, id, wait, cfg)
	c.metrics.waited(ctx, start, c.classOf(key), err)
	return p, err
}

// askPermit asks the service for a permit of key (none held by this Client) until it
// answers, as askShared does in mode PERMIT. An answer that a reclaim of the key may have
// released (permit_reclaim.go) is asked again.
func (c *Client) askPermit(ctx context.Context, key string, id uint64, wait bool, cfg acquireConfig) (*Permit, error) {
	for {
		var asked time.Duration
		var epoch uint64
		r, s, err := onSession(ctx, c, key, wait, func(s *session) (*lockv1.AcquireResponse, error) {
			var err error
			if epoch, err = c.reclaimSettled(ctx, key); err != nil {
				return nil, err
			}
			asked = waitFor(ctx, wait, time.Now())
			cctx, cancel := context.WithTimeout(keyed(ctx, key), asked+callSlack)
			defer cancel()
			r, err := c.rpc.Acquire(cctx, &lockv1.AcquireRequest{
				Key:        key,
				SessionId:  s.id,
				WaitMillis: uint64(asked / time.Millisecond),
				Mode:       lockv1.HoldMode_HOLD_MODE_PERMIT,
			})
			if err != nil && ctx.Err() != nil {
				// The caller gave up while the service may have been handing it a permit:
				// a permit no Permit stands for would stay held as long as the session.
				go c.reclaimPermit(key, s)
			}
			return r, wrap(ctx, err)
		})
		if err == nil {
			c.learnClass(key, r.GetClassName())
			if p := c.heldPermit(key, id, r, s, cfg.onFence, epoch); p != nil {
				return p, nil
			}
			continue // a reclaim overlapped the call: its answer may name a released grant
		}
		if asked > 0 && errors.Is(err, ErrHeld) && ctx.Err() == nil {
			if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > time.Second {
				continue // the service's wait ended before ctx did: queue again
			}
		}
		return nil, err
	}
}

// reenterPermit nests an acquire on the permit this Client holds of key (nothing is sent);
// nil when it holds none, or its grant was fenced.
func (c *Client) reenterPermit(key string, id uint64, onFence func()) *Permit {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.permits[key]
	if !ok {
		return nil
	}
	if e.session.fenced() {
		// The grant is gone; its Permits still end by their own Release (ErrFenced).
		delete(c.permits, key)
		return nil
	}
	e.count++
	e.session.attach(id, onFence, e.tenure)
	return &Permit{c: c, key: key, id: id, permit: e.permit, token: e.token, s: e.session, tenure: e.tenure}
}

// heldPermit records a permit the service granted to s as this Client's outermost Permit
// of key, or nests it on the entry of a concurrent acquire that got the same grant (the
// service answers a session's second acquire with its permit). Nil when a reclaim decided
// to release a grant since epoch (of any key: the epoch is the Client's, and reclaims are
// rare): this answer may name that grant.
func (c *Client) heldPermit(key string, id uint64, r *lockv1.AcquireResponse, s *session, onFence func(), epoch uint64) *Permit {
	class := c.classOf(key)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reclaimEpoch != epoch {
		return nil
	}
	e, ok := c.permits[key]
	if ok && e.session == s && e.token == r.GetToken() {
		e.count++
	} else {
		e = &permitEntry{count: 1, permit: r.GetPermit(), token: r.GetToken(), session: s, tenure: c.metrics.granted(class)}
		c.permits[key] = e
	}
	s.attach(id, onFence, e.tenure)
	return &Permit{c: c, key: key, id: id, permit: e.permit, token: e.token, s: s, tenure: e.tenure}
}

// Permit is a held permit of a semaphore: renewed with its session and fenced with it, as
// any hold. Pass Permit and Token to the guarded write and compare them there (the
// resource fences per permit); check CanStart before each unit of work; Release when done.
// Its String never shows its token.
type Permit struct {
	c        *Client
	key      string
	id       uint64
	permit   uint32
	token    uint64
	s        *session
	tenure   *tenure
	released atomic.Bool
}

// Key is the semaphore's key.
func (p *Permit) Key() string { return p.key }

// Permit is which of the key's N permits this is (0..N-1): the resource fences per permit.
func (p *Permit) Permit() uint32 { return p.permit }

// Token is this permit grant's token: strictly above every earlier grant of the same
// permit, and unlike every other grant of the key. A capability: never log it.
func (p *Permit) Token() uint64 { return p.token }

// CanStart is false from the first failed renewal on: finish in-flight work, start
// nothing new.
func (p *Permit) CanStart() bool { return p.s.canStart() }

// RemainingTTL is the time left before the local deadline at which the permit is fenced.
func (p *Permit) RemainingTTL() time.Duration { return p.s.remaining() }

// Fenced reports whether the permit was fenced (its OnFence ran or its Client was closed).
func (p *Permit) Fenced() bool { return p.s.fenced() }

// WasContinuous reports whether the permit was held at every instant from its grant until
// now (as Hold.WasContinuous).
func (p *Permit) WasContinuous() bool { return p.s.continuous() }

// String describes the permit without its token.
func (p *Permit) String() string {
	return fmt.Sprintf("lock.Permit{key: %q, permit: %d, session: %d}", p.key, p.permit, p.s.id)
}

// GoString is String: %#v never shows the token either.
func (p *Permit) GoString() string { return p.String() }

// Release ends this acquire. Only the outermost Permit of a key calls the service (a
// Release with mode PERMIT); a nested one only counts down. ErrFenced when the permit was
// fenced before (its work may have overlapped the permit's next holder). A second Release of the
// same Permit does nothing.
func (p *Permit) Release(ctx context.Context) error {
	if !p.released.CompareAndSwap(false, true) {
		return nil
	}
	c := p.c
	p.s.detach(p.id)
	c.mu.Lock()
	e, ok := c.permits[p.key]
	if !ok || e.session != p.s || e.token != p.token {
		// Not this grant's entry: the Client was closed, or the grant was fenced and
		// another took its place.
		c.mu.Unlock()
		if p.s.fenced() && !c.isClosed() {
			return clientError(ErrFenced, "the permit was fenced before its release")
		}
		return nil
	}
	if e.count > 1 {
		e.count--
		c.mu.Unlock()
		if p.s.fenced() {
			return clientError(ErrFenced, "the permit was fenced before its release")
		}
		return nil
	}
	delete(c.permits, p.key)
	c.mu.Unlock()
	if p.s.fenced() {
		p.tenure.end(outFenced) // if the fence did not record it first
		return clientError(ErrFenced, "the permit was fenced before its release")
	}
	// The permit ends for its owner now, whatever the release's answer.
	p.tenure.end(outReleased)
	cctx, cancel := context.WithTimeout(keyed(ctx, p.key), callSlack)
	defer cancel()
	_, err := c.rpc.Release(cctx, &lockv1.ReleaseRequest{
		Key: p.key, Token: p.token, SessionId: p.s.id, Mode: lockv1.HoldMode_HOLD_MODE_PERMIT,
	})
	return wrap(ctx, err)
}
