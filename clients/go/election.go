package lock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// minRound: a campaign round refused sooner than this is followed by a pause of as long.
const minRound = time.Second

// Campaign is leader election on the lock: leadership is the hold of key, and the term
// is its fencing token. It waits in key's FIFO queue until this Client leads or ctx ends
// (the service waits at most 300 s per Acquire; the campaign asks again), or a refusal
// waiting cannot cure (ErrNotGranted, ErrInvalidKey...). WithOnFence is required: it runs
// if the leadership is lost without Resign (the session could not be renewed before its
// local deadline: drain then fence); stop acting as leader there.
//
// The leader writes with its term, so the guarded resource refuses a deposed leader that
// writes late: a leader frozen past its TTL wakes after another was elected, and its write
// carries the older term. Replicas of one identity campaign like any candidates (each
// Client is its own instance). Followers learn who leads with Observe.
func (c *Client) Campaign(ctx context.Context, key string, opts ...AcquireOption) (*Leadership, error) {
	cfg, id, err := c.newAcquire(opts)
	if err != nil {
		return nil, err
	}
	// The wait is the whole campaign's, recorded once, from its first call to the service
	// (a key this Client holds already is re-entered: no call, nothing recorded).
	var start time.Time
	answer := func(l *Leadership, err error) (*Leadership, error) {
		if !start.IsZero() {
			c.metrics.waited(ctx, start, c.classOf(key), err)
		}
		return l, err
	}
	for {
		if h := c.reenter(key, id, cfg.onFence); h != nil {
			return answer(&Leadership{hold: h}, nil)
		}
		started := time.Now()
		if start.IsZero() {
			start = started
		}
		h, err := c.acquire(ctx, key, id, true, cfg)
		if err == nil {
			return answer(&Leadership{hold: h}, nil)
		}
		if !errors.Is(err, ErrHeld) || ctx.Err() != nil {
			return answer(nil, err)
		}
		// The round ended with the key still held: still a candidate, not in a spin.
		if time.Since(started) < minRound && !sleep(ctx, minRound) {
			return answer(nil, fmt.Errorf("lock: %w", ctx.Err()))
		}
	}
}

// Leadership is this Client's term as leader of a key: it leads while it holds this.
type Leadership struct {
	hold *Hold
}

// Term is the term: the hold's fencing token. Every write of this leader carries it, and
// the resource accepts a write only at or above the last term it saw. Never log it.
func (l *Leadership) Term() uint64 { return l.hold.Token() }

// CanLead is false from the first failed renewal: start nothing new as leader.
func (l *Leadership) CanLead() bool { return l.hold.CanStart() }

// WasContinuous reports whether the leadership lasted, without a gap, until now (false
// after a freeze past the TTL): check it before reporting work done as leader.
func (l *Leadership) WasContinuous() bool { return l.hold.WasContinuous() }

// Fenced reports whether the leadership was lost (its OnFence ran).
func (l *Leadership) Fenced() bool { return l.hold.Fenced() }

// RemainingTTL is the time left before the local deadline at which the term is fenced.
func (l *Leadership) RemainingTTL() time.Duration { return l.hold.RemainingTTL() }

// Key is the key this leadership is of.
func (l *Leadership) Key() string { return l.hold.Key() }

// Hold is the hold underneath.
func (l *Leadership) Hold() *Hold { return l.hold }

// String describes the leadership without its term.
func (l *Leadership) String() string { return "lock.Leadership{" + l.hold.String() + "}" }

// GoString is String.
func (l *Leadership) GoString() string { return l.String() }

// Resign steps down: the next candidate in the queue leads at once. ErrFenced when the
// term had ended already.
func (l *Leadership) Resign(ctx context.Context) error { return l.hold.Release(ctx) }
