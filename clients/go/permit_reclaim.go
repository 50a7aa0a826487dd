package lock

import (
	"context"
	"fmt"

	"github.com/fenced-lock/fenced-lock/clients/go/lockv1"
)

// Reclaiming a permit whose answer was lost. A caller that gives up while the service
// hands it a permit leaves a grant no Permit stands for, held as long as the session (the
// Client's life): one of only N. reclaimPermit asks again on the same session without
// waiting (a session holds at most one permit of a key, so the answer is that grant if
// there is one) and releases it.
//
// The grant is the session's, not the call's: every acquire of the key on that session is
// answered the same grant, so the release must not take it from another acquire of this
// Client that the service answered meanwhile. Two rules keep them apart: an acquire is not
// sent while a reclaim of its key is releasing (reclaimSettled), and an acquire whose call
// overlapped a reclaim's decision to release does not trust its answer and asks again
// (heldPermit compares reclaimEpoch), getting the grant back if it survived, else a new
// one or a place in the queue.

// reclaimSettled waits until no reclaim of key is releasing, and returns the reclaim epoch
// an acquire sent now starts in.
func (c *Client) reclaimSettled(ctx context.Context, key string) (uint64, error) {
	for {
		c.mu.Lock()
		done, busy := c.reclaiming[key]
		epoch := c.reclaimEpoch
		c.mu.Unlock()
		if !busy {
			return epoch, nil
		}
		select {
		case <-done:
		case <-ctx.Done():
			return 0, fmt.Errorf("lock: %w", ctx.Err())
		}
	}
}

// reclaimPermit releases the permit of key the service may have handed to s after its
// caller gave up, unless a Permit of this Client holds it now.
func (c *Client) reclaimPermit(key string, s *session) {
	ctx, cancel := context.WithTimeout(c.ctx, callSlack)
	defer cancel()
	for range maxTries {
		r, err := c.rpc.Acquire(keyed(ctx, key), &lockv1.AcquireRequest{
			Key: key, SessionId: s.id, Mode: lockv1.HoldMode_HOLD_MODE_PERMIT,
		})
		if err != nil {
			return // none to reclaim, or the session is gone (and its grants with it)
		}
		c.mu.Lock()
		if e, mine := c.permits[key]; mine && e.session == s {
			c.mu.Unlock()
			return // a later acquire of this Client holds it now
		}
		if other, busy := c.reclaiming[key]; busy {
			// Another reclaim is releasing a grant of the key: ours may be a newer one.
			c.mu.Unlock()
			select {
			case <-other:
				continue
			case <-ctx.Done():
				return
			}
		}
		done := make(chan struct{})
		c.reclaiming[key] = done
		c.reclaimEpoch++
		c.mu.Unlock()
		_, _ = c.rpc.Release(keyed(ctx, key), &lockv1.ReleaseRequest{
			Key: key, Token: r.GetToken(), SessionId: s.id, Mode: lockv1.HoldMode_HOLD_MODE_PERMIT,
		})
		c.mu.Lock()
		delete(c.reclaiming, key)
		c.mu.Unlock()
		close(done)
		return
	}
}
