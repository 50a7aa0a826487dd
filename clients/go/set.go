package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/fenced-lock/fenced-lock/clients/go/lockv1"
)

// MaxSetKeys is the most keys one AcquireAll takes.
const MaxSetKeys = 16

// AcquireAll takes every key of keys together (lock.v1 AcquireAll), waiting in ctx until
// all are free at once: all or nothing, in one etcd transaction, one token for every key.
// Waiting holds nothing, so callers asking for overlapping sets in any order cannot
// deadlock. WithOnFence is required, as for Acquire.
//
// The keys (1..=MaxSetKeys, distinct) must be of classes with one TTL, on one store, none
// of a `fairness: durable` or shared class, and not held by this Client already:
// ErrKeySetRefused otherwise (its metadata `why` says which). Sets are not re-entrant.
func (c *Client) AcquireAll(ctx context.Context, keys []string, opts ...AcquireOption) (*HeldSet, error) {
	return c.acquireAll(ctx, keys, true, opts)
}

// TryAcquireAll is AcquireAll without waiting: ErrHeld at once when a key of the set is
// not free; a transient refusal is the answer, as for TryAcquire.
func (c *Client) TryAcquireAll(ctx context.Context, keys []string, opts ...AcquireOption) (*HeldSet, error) {
	return c.acquireAll(ctx, keys, false, opts)
}

func (c *Client) acquireAll(ctx context.Context, keys []string, wait bool, opts []AcquireOption) (*HeldSet, error) {
	var cfg acquireConfig
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.onFence == nil {
		return nil, ErrOnFenceRequired
	}
	if len(keys) == 0 || len(keys) > MaxSetKeys {
		return nil, clientError(ErrMalformedRequest, fmt.Sprintf("a key set has 1..=%d keys", MaxSetKeys))
	}
	id, err := c.newHoldID()
	if err != nil {
		return nil, err
	}
	// AcquireAllResponse names no class: a set is recorded under its first key's, as the
	// session opened for that key learned it.
	first := slices.Min(keys)
	start := time.Now()
	h, err := c.askAll(ctx, keys, first, id, wait, cfg)
	c.metrics.waited(ctx, start, c.classOf(first), err)
	return h, err
}

func (c *Client) askAll(ctx context.Context, keys []string, first string, id uint64, wait bool, cfg acquireConfig) (*HeldSet, error) {
	for {
		var asked time.Duration
		r, s, err := onSession(ctx, c, first, wait, func(s *session) (*lockv1.AcquireAllResponse, error) {
			asked = waitFor(ctx, wait, time.Now())
			// No `lock-key` metadata: the edge decides a set on every key of its body.
			cctx, cancel := context.WithTimeout(ctx, asked+callSlack)
			defer cancel()
			r, err := c.rpc.AcquireAll(cctx, &lockv1.AcquireAllRequest{
				Keys:       keys,
				SessionId:  s.id,
				WaitMillis: uint64(asked / time.Millisecond),
			})
			return r, wrap(ctx, err)
		})
		if err == nil {
			for _, k := range r.GetKeys() {
				c.learnPlace(k, tagOf(s.id))
			}
			t := c.metrics.granted(c.classOf(first))
			s.attach(id, cfg.onFence, t)
			return &HeldSet{c: c, keys: r.GetKeys(), id: id, token: r.GetToken(), s: s, tenure: t}, nil
		}
		// The service's wait ended before ctx did: ask again.
		if asked > 0 && errors.Is(err, ErrHeld) && ctx.Err() == nil {
			if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > time.Second {
				continue
			}
		}
		return nil, err
	}
}

func (c *Client) newHoldID() (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, clientError(ErrClosed, "")
	}
	c.nextHold++
	return c.nextHold, nil
}

// HeldSet is a set of keys AcquireAll granted together. Every key's token is Token: write
// to each key's resource with it. Check CanStart before each unit of work, as for a Hold;
// Release ends every key in one transaction. Its String never shows the token.
type HeldSet struct {
	c        *Client
	keys     []string
	id       uint64
	token    uint64
	s        *session
	tenure   *tenure
	released atomic.Bool
}

// Keys are the keys held, sorted.
func (h *HeldSet) Keys() []string { return slices.Clone(h.keys) }

// Token is the fencing token of every key of the set. A capability: never log it.
func (h *HeldSet) Token() uint64 { return h.token }

// CanStart is false from the first failed renewal on: finish in-flight work, start
// nothing new.
func (h *HeldSet) CanStart() bool { return h.s.canStart() }

// RemainingTTL is the time left before the local deadline at which the set is fenced.
func (h *HeldSet) RemainingTTL() time.Duration { return h.s.remaining() }

// Fenced reports whether the holds were fenced: they are dead.
func (h *HeldSet) Fenced() bool { return h.s.fenced() }

// WasContinuous reports whether the holds covered every instant from the grant until now.
func (h *HeldSet) WasContinuous() bool { return h.s.continuous() }

// String describes the set without its token.
func (h *HeldSet) String() string {
	return fmt.Sprintf("lock.HeldSet{keys: %q, session: %d}", h.keys, h.s.id)
}

// GoString is String.
func (h *HeldSet) GoString() string { return h.String() }

// Release ends every key of the set still of this grant, in one transaction (ReleaseAll).
// ErrFenced when the set was fenced before. A second Release does nothing.
func (h *HeldSet) Release(ctx context.Context) error {
	if !h.released.CompareAndSwap(false, true) {
		return nil
	}
	h.s.detach(h.id)
	if h.s.fenced() {
		if h.c.isClosed() {
			return nil
		}
		h.tenure.end(outFenced) // if the fence did not record it first
		return clientError(ErrFenced, "the set was fenced before its release")
	}
	h.tenure.end(outReleased)
	cctx, cancel := context.WithTimeout(ctx, callSlack)
	defer cancel()
	_, err := h.c.rpc.ReleaseAll(cctx, &lockv1.ReleaseAllRequest{Keys: h.keys, Token: h.token, SessionId: h.s.id})
	return wrap(ctx, err)
}
