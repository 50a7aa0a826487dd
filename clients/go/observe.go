package lock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/fenced-lock/fenced-lock/clients/go/lockv1"
)

// maxObserveReconnects is how many reconnects in a row without an answer an Observation
// makes before Next gives up (about a minute with the back-off), as lock-client does.
const maxObserveReconnects = 40

// Change is what happened to an observed key.
type Change int

// The changes an Observation reports (lock.v1 ObserveEvent; PROGRESS marks are consumed
// as resume points and never reported).
const (
	// ChangeCurrent: the holder as of the observation's start (or a restart after a gap):
	// held or free.
	ChangeCurrent Change = iota + 1
	// ChangeGranted: granted to a session (free before, or handed on by a release).
	ChangeGranted
	// ChangeReleased: the holder released it.
	ChangeReleased
	// ChangeExpired: the holder's session was not renewed within its TTL.
	ChangeExpired
	// ChangeClosed: the holder closed its session.
	ChangeClosed
	// ChangeForced: two operators force-released it.
	ChangeForced
	// ChangeRevoked: an epoch advance revoked every hold of the store.
	ChangeRevoked
)

var changeNames = map[Change]string{
	ChangeCurrent: "current", ChangeGranted: "granted", ChangeReleased: "released",
	ChangeExpired: "expired", ChangeClosed: "closed", ChangeForced: "forced", ChangeRevoked: "revoked",
}

// String is the change's lower-case name.
func (c Change) String() string {
	if n, ok := changeNames[c]; ok {
		return n
	}
	return fmt.Sprintf("Change(%d)", int(c))
}

var changeOf = map[lockv1.ObserveEvent]Change{
	lockv1.ObserveEvent_OBSERVE_EVENT_CURRENT:  ChangeCurrent,
	lockv1.ObserveEvent_OBSERVE_EVENT_GRANTED:  ChangeGranted,
	lockv1.ObserveEvent_OBSERVE_EVENT_RELEASED: ChangeReleased,
	lockv1.ObserveEvent_OBSERVE_EVENT_EXPIRED:  ChangeExpired,
	lockv1.ObserveEvent_OBSERVE_EVENT_CLOSED:   ChangeClosed,
	lockv1.ObserveEvent_OBSERVE_EVENT_FORCED:   ChangeForced,
	lockv1.ObserveEvent_OBSERVE_EVENT_REVOKED:  ChangeRevoked,
}

// Holder is the hold a change names: the hold now, or the hold that ended.
type Holder struct {
	SPIFFEID string
	// Instance is the holding process's `lock-instance`, when its client sent one.
	Instance   string
	Class      string
	AcquiredAt time.Time
	// Epoch and GrantRevision are the token's parts: a later hold's are higher. The
	// token itself only in Observed.Token.
	Epoch         uint16
	GrantRevision int64
}

// Observed is one change of an observed key.
type Observed struct {
	Change Change
	// Revision is the store revision of the change.
	Revision int64
	// Held: whether the key is held after the change.
	Held bool
	// Holder is nil when the answer names no hold.
	Holder *Holder
	// Gap: changes before this one were missed (the store compacted them while the
	// stream was down, or the key's store is another since). Only on a ChangeCurrent.
	Gap bool
	// StoreEpoch is the epoch of the store Revision is of: with it, Revision is a
	// resume point (ResumeAfter).
	StoreEpoch uint32
	token      uint64
}

// Token is the hold's fencing token, only when the holder is this Client's own session
// (0 otherwise). A capability: never log it.
func (o Observed) Token() uint64 { return o.token }

// String describes the change without its token.
func (o Observed) String() string {
	who := "-"
	if o.Holder != nil {
		who = o.Holder.SPIFFEID
		if o.Holder.Instance != "" {
			who += " (" + o.Holder.Instance + ")"
		}
	}
	return fmt.Sprintf("%s at %d (store epoch %d): held %v by %s, gap %v", o.Change, o.Revision, o.StoreEpoch, o.Held, who, o.Gap)
}

// GoString is String: %#v never shows the token either.
func (o Observed) GoString() string { return o.String() }

// ObserveOption configures Observe.
type ObserveOption func(*Observation)

// ResumeAfter starts the observation after revision of the store of storeEpoch (a
// change's Revision and StoreEpoch from an earlier observation; storeEpoch 0: unchecked)
// instead of from the current holder: the changes after it follow, or, when the store
// compacted them away, a ChangeCurrent with Gap set.
func ResumeAfter(revision int64, storeEpoch uint32) ObserveOption {
	return func(o *Observation) {
		o.after = max(revision, 0)
		o.storeEpoch = storeEpoch
	}
}

// Observation is a key being observed: call Next for each change; Close when done.
// Not safe for concurrent use.
type Observation struct {
	c          *Client
	ctx        context.Context
	cancel     context.CancelFunc
	key        string
	after      int64
	storeEpoch uint32
	gap        bool
	stream     lockv1.Lock_ObserveClient
	streamEnd  context.CancelFunc
}

// Observe watches key: its holder now, then every change (granted, released, expired,
// closed, forced, revoked), for as long as ctx lasts. A hint, never a grant (ADR-15): to
// act on a key, acquire it and write with its token. The stream ends for reasons that are
// not the caller's (a proxy's idle timeout, an arbiter restarting): Next calls again
// with the last revision and store epoch seen (lock.v1 `after_revision`,
// `after_store_epoch`, as lock-client does), so the caller sees no gap; when the store
// compacted that revision away, the next change is a ChangeCurrent with Gap set.
//
// Answers about a hold of this Client's own session carry its token (Observed.Token);
// other observers, a sibling replica of the same identity included, never see it.
func (c *Client) Observe(ctx context.Context, key string, opts ...ObserveOption) *Observation {
	octx, cancel := context.WithCancel(ctx)
	o := &Observation{c: c, ctx: octx, cancel: cancel, key: key}
	for _, opt := range opts {
		opt(o)
	}
	return o
}

// Revision is the last revision seen (the resume point), StoreEpoch its store's epoch.
func (o *Observation) Revision() int64 { return o.after }

// StoreEpoch is the epoch of the store Revision is of.
func (o *Observation) StoreEpoch() uint32 { return o.storeEpoch }

// Close ends the observation.
func (o *Observation) Close() {
	o.dropStream()
	o.cancel()
}

func (o *Observation) dropStream() {
	if o.streamEnd != nil {
		o.streamEnd()
	}
	o.stream, o.streamEnd = nil, nil
}

// ownSession is the session this Client would hold the key on: the one it holds it on,
// else its session for the key's cluster (0: none).
func (c *Client) ownSession(key string) int64 {
	c.mu.Lock()
	e, ok := c.holds[key]
	c.mu.Unlock()
	if ok && !e.session.fenced() {
		return e.session.id
	}
	if s := c.sessionForKey(key); s != nil {
		return s.id
	}
	return 0
}

func (o *Observation) open() error {
	if o.c.isClosed() {
		return clientError(ErrClosed, "")
	}
	ctx, cancel := context.WithCancel(o.ctx)
	st, err := o.c.rpc.Observe(keyed(ctx, o.key), &lockv1.ObserveRequest{
		Key:             o.key,
		AfterRevision:   o.after,
		AfterStoreEpoch: o.storeEpoch,
		SessionId:       o.c.ownSession(o.key),
	})
	if err != nil {
		cancel()
		return wrap(o.ctx, err)
	}
	o.stream, o.streamEnd = st, cancel
	return nil
}

// Next is the next change, reconnecting as needed. Errors are the refusals a new call
// gets (ErrNotGranted, ErrInvalidKey...), the service unreachable for about a minute, or
// the context's error when it ends.
func (o *Observation) Next() (Observed, error) {
	failures := 0
	backoff := 50 * time.Millisecond
	// Whether the stream at hand has answered: one that ends without a word is a failure
	// to back off from, not a reason to reconnect at once.
	answered := true
	for {
		if err := o.ctx.Err(); err != nil {
			return Observed{}, fmt.Errorf("lock: %w", err)
		}
		var err error
		if o.stream == nil {
			if err = o.open(); err == nil {
				answered = false
				continue
			}
		} else {
			var a *lockv1.ObserveResponse
			if a, err = o.stream.Recv(); err == nil {
				failures, answered = 0, true
				if ev, ok := o.take(a); ok {
					return ev, nil
				}
				continue
			}
			o.dropStream()
			if errors.Is(err, io.EOF) {
				// The stream ended cleanly (a proxy's timeout, an arbiter draining): resume.
				if answered {
					continue
				}
				failures++
				if failures > maxObserveReconnects {
					return Observed{}, clientError(ErrUnavailable, "observe streams end without an answer")
				}
				backoff = min(backoff*2, 2*time.Second)
				if !sleep(o.ctx, backoff) {
					return Observed{}, fmt.Errorf("lock: %w", o.ctx.Err())
				}
				continue
			}
			err = wrap(o.ctx, err)
		}
		var e *Error
		if !errors.As(err, &e) {
			return Observed{}, err
		}
		var pause time.Duration
		switch {
		case errors.Is(e, ErrHistoryCompacted):
			// The gap cannot be replayed: start from the current state, and say so.
			o.after, o.storeEpoch, o.gap = 0, 0, true
			continue
		case errors.Is(e, ErrRateLimited):
			pause = e.RetryAfter()
		// A stream that broke without a lock.v1 refusal (Envoy's reset of a killed
		// arbiter's stream) is a broken connection, resumed like any other.
		case e.transient() || brokenStream(e):
			backoff = min(backoff*2, 2*time.Second)
			pause = backoff
		default:
			return Observed{}, err
		}
		failures++
		if failures > maxObserveReconnects {
			return Observed{}, err
		}
		if !sleep(o.ctx, pause) {
			return Observed{}, fmt.Errorf("lock: %w", o.ctx.Err())
		}
	}
}

// take records a's revision as the resume point and returns it as a change (false for a
// progress mark).
func (o *Observation) take(a *lockv1.ObserveResponse) (Observed, bool) {
	// A revision is a resume point only with its store's epoch.
	if a.GetStoreEpoch() != o.storeEpoch || a.GetRevision() > o.after {
		o.after, o.storeEpoch = a.GetRevision(), a.GetStoreEpoch()
	}
	change, ok := changeOf[a.GetEvent()]
	if !ok {
		return Observed{}, false
	}
	ev := Observed{
		Change:     change,
		Revision:   a.GetRevision(),
		Held:       a.GetHeld(),
		StoreEpoch: a.GetStoreEpoch(),
		token:      a.GetToken(),
	}
	if a.GetHolderSpiffeId() != "" {
		ev.Holder = &Holder{
			SPIFFEID:      a.GetHolderSpiffeId(),
			Instance:      a.GetHolderInstance(),
			Class:         a.GetClassName(),
			AcquiredAt:    time.UnixMilli(int64(a.GetAcquiredAtUnixMs())),
			Epoch:         uint16(min(a.GetEpoch(), 0xffff)),
			GrantRevision: a.GetGrantRevision(),
		}
	}
	if change == ChangeCurrent && o.gap {
		ev.Gap, o.gap = true, false
	}
	return ev, true
}
