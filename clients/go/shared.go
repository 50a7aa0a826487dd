package lock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/fenced-lock/fenced-lock/clients/go/lockv1"
)

// AcquireShared takes key shared (HOLD_MODE_SHARED), waiting in ctx: many sessions (other
// identities, sibling replicas, this Client's other shared holds) hold it at once; an
// exclusive hold of it waits for all of them, and while one waits, new shared holds wait
// behind it. The key's class must be `shared: true` (ErrMalformedRequest otherwise).
// WithOnFence is required. Shared holds are not re-entrant: each is its own grant.
func (c *Client) AcquireShared(ctx context.Context, key string, opts ...AcquireOption) (*SharedHold, error) {
	return c.acquireShared(ctx, key, true, opts)
}

// TryAcquireShared is AcquireShared without waiting: ErrHeld at once when the key is held
// exclusive or a writer waits for it; a transient refusal is the answer, as for TryAcquire.
func (c *Client) TryAcquireShared(ctx context.Context, key string, opts ...AcquireOption) (*SharedHold, error) {
	return c.acquireShared(ctx, key, false, opts)
}

func (c *Client) acquireShared(ctx context.Context, key string, wait bool, opts []AcquireOption) (*SharedHold, error) {
	cfg, id, err := c.newAcquire(opts)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	h, err := c.askShared(ctx, key, id, wait, cfg)
	c.metrics.waited(ctx, start, c.classOf(key), err)
	return h, err
}

func (c *Client) askShared(ctx context.Context, key string, id uint64, wait bool, cfg acquireConfig) (*SharedHold, error) {
	for {
		var asked time.Duration
		r, s, err := onSession(ctx, c, key, wait, func(s *session) (*lockv1.AcquireResponse, error) {
			asked = waitFor(ctx, wait, time.Now())
			cctx, cancel := context.WithTimeout(keyed(ctx, key), asked+callSlack)
			defer cancel()
			r, err := c.rpc.Acquire(cctx, &lockv1.AcquireRequest{
				Key:        key,
				SessionId:  s.id,
				WaitMillis: uint64(asked / time.Millisecond),
				Mode:       lockv1.HoldMode_HOLD_MODE_SHARED,
			})
			return r, wrap(ctx, err)
		})
		if err == nil {
			c.learnClass(key, r.GetClassName())
			t := c.metrics.granted(c.classOf(key))
			s.attach(id, cfg.onFence, t)
			return &SharedHold{c: c, key: key, id: id, token: r.GetToken(), s: s, tenure: t}, nil
		}
		if asked > 0 && errors.Is(err, ErrHeld) && ctx.Err() == nil {
			if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > time.Second {
				continue
			}
		}
		return nil, err
	}
}

// SharedHold is a shared hold. Its token is its own grant's: above the last exclusive
// grant of the key before it, below the next one. A resource that records its last
// writer's token serves a read only under a token at least that one, so a reader paused
// past its session while a writer came and went is refused.
type SharedHold struct {
	c        *Client
	key      string
	id       uint64
	token    uint64
	s        *session
	tenure   *tenure
	released atomic.Bool
}

// Key is the held key.
func (h *SharedHold) Key() string { return h.key }

// Token is this shared hold's token. A capability: never log it.
func (h *SharedHold) Token() uint64 { return h.token }

// CanStart is false from the first failed renewal on.
func (h *SharedHold) CanStart() bool { return h.s.canStart() }

// RemainingTTL is the time left before the local deadline at which the hold is fenced.
func (h *SharedHold) RemainingTTL() time.Duration { return h.s.remaining() }

// Fenced reports whether the hold was fenced.
func (h *SharedHold) Fenced() bool { return h.s.fenced() }

// WasContinuous reports whether the hold covered every instant from its grant until now.
func (h *SharedHold) WasContinuous() bool { return h.s.continuous() }

// String describes the hold without its token.
func (h *SharedHold) String() string {
	return fmt.Sprintf("lock.SharedHold{key: %q, session: %d}", h.key, h.s.id)
}

// GoString is String.
func (h *SharedHold) GoString() string { return h.String() }

// Release ends the shared hold (a Release with mode SHARED). ErrFenced when it was
// fenced before. A second Release does nothing.
func (h *SharedHold) Release(ctx context.Context) error {
	if !h.released.CompareAndSwap(false, true) {
		return nil
	}
	h.s.detach(h.id)
	if h.s.fenced() {
		if h.c.isClosed() {
			return nil
		}
		h.tenure.end(outFenced) // if the fence did not record it first
		return clientError(ErrFenced, "the shared hold was fenced before its release")
	}
	h.tenure.end(outReleased)
	cctx, cancel := context.WithTimeout(keyed(ctx, h.key), callSlack)
	defer cancel()
	_, err := h.c.rpc.Release(cctx, &lockv1.ReleaseRequest{
		Key: h.key, Token: h.token, SessionId: h.s.id, Mode: lockv1.HoldMode_HOLD_MODE_SHARED,
	})
	return wrap(ctx, err)
}
