package lock

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/fenced-lock/fenced-lock/clients/go/lockv1"
)

// session is one lease of this Client per (TTL, cluster), renewed by one KeepAlive
// stream however many holds it carries (ADR-10). Its goroutine sends a keepalive every
// TTL/3, records the SEND time of each success, and fences every hold of the session at
// the deadline (send time of the last success + TTL − FenceMargin).
type session struct {
	id  int64
	ttl time.Duration

	mu     sync.Mutex
	live   liveness
	fences map[uint64]attachment

	stop chan struct{}
	once sync.Once
	done chan struct{}
}

func newSession(id int64, ttl time.Duration, openedAt time.Time) *session {
	return &session{
		id:     id,
		ttl:    ttl,
		live:   newLiveness(ttl, openedAt),
		fences: map[uint64]attachment{},
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
}

// tagOf is the cluster tag in a session id (bits 55..62; lock_config::shards::tag_of).
func tagOf(sessionID int64) uint8 { return uint8((sessionID >> 55) & 0xff) }

func (s *session) canStart() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live.canStart(time.Now())
}

func (s *session) remaining() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live.remaining(time.Now())
}

func (s *session) continuous() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live.continuous(time.Now())
}

func (s *session) fenced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live.fenced
}

// attachment is a hold on the session: its OnFence, and its grant's hold time.
type attachment struct {
	onFence func()
	tenure  *tenure
}

func (s *session) attach(hold uint64, onFence func(), t *tenure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fences[hold] = attachment{onFence, t}
}

func (s *session) detach(hold uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.fences, hold)
}

// close ends the session by its owner: dead from now on, and no OnFence runs (nothing was
// lost that the owner did not end: the holds still attached end as `shutdown`). Stops the
// keepalive goroutine.
func (s *session) close() {
	s.mu.Lock()
	s.live.expire()
	ended := make([]attachment, 0, len(s.fences))
	for _, a := range s.fences {
		ended = append(ended, a)
	}
	clear(s.fences)
	s.mu.Unlock()
	for _, a := range ended {
		a.tenure.end(outShutdown)
	}
	s.once.Do(func() { close(s.stop) })
}

// fenceAll runs every hold's OnFence once, outside the lock, if due says so.
func (s *session) fenceAll(due func(*liveness) bool) {
	s.mu.Lock()
	var fenced []attachment
	if due(&s.live) {
		for _, a := range s.fences {
			fenced = append(fenced, a)
		}
		clear(s.fences)
	}
	s.mu.Unlock()
	for _, a := range fenced {
		a.tenure.end(outFenced)
		a.onFence()
	}
}

// keepAlive renews the session until it is fenced or closed; ctx is the Client's.
func (s *session) keepAlive(ctx context.Context, rpc lockv1.LockClient) {
	defer close(s.done)
	period := s.ttl / 3
	var stream *kaStream
	defer func() {
		if stream != nil {
			stream.close()
		}
	}()
	next := time.Now().Add(period)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		s.mu.Lock()
		deadline := s.live.deadline()
		s.mu.Unlock()
		wake := next
		if deadline.Before(wake) {
			wake = deadline
		}
		timer.Reset(time.Until(wake))
		select {
		case <-timer.C:
		case <-s.stop:
			return
		case <-ctx.Done():
			return
		}
		now := time.Now()
		s.fenceAll(func(l *liveness) bool { return l.fenceDue(now) })
		if s.fenced() {
			return
		}
		if now.Before(next) {
			continue
		}
		sent := time.Now()
		wait := deadline.Sub(sent)
		if period < wait {
			wait = period
		}
		err := s.renew(ctx, rpc, &stream, wait)
		switch {
		case err == nil:
			s.mu.Lock()
			s.live.renewed(sent)
			s.mu.Unlock()
			next = sent.Add(period)
		case errors.Is(err, ErrSessionExpired):
			s.fenceAll(func(l *liveness) bool { return l.expire() })
			return
		default:
			s.mu.Lock()
			s.live.failed()
			s.mu.Unlock()
			if stream != nil {
				stream.close()
				stream = nil
			}
			// Retry sooner than a full period while the deadline allows.
			next = time.Now().Add(period / 3)
		}
	}
}

// renew is one keepalive round trip within wait, on the session's stream (opened if
// needed). A stream the server ended cleanly (an arbiter draining) is reopened at once,
// through the edge, on another arbiter: one retry within the same wait.
func (s *session) renew(ctx context.Context, rpc lockv1.LockClient, stream **kaStream, wait time.Duration) error {
	if wait <= 0 {
		return clientError(ErrUnavailable, "keepalive: no time left before the deadline")
	}
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	for _, retry := range []bool{true, false} {
		if *stream == nil {
			st, err := openKeepAlive(ctx, rpc)
			if err != nil {
				return err
			}
			*stream = st
		}
		st := *stream
		if err := st.stream.Send(&lockv1.KeepAliveRequest{SessionId: s.id}); err != nil {
			// The real error, if any, comes with the next Recv.
			if !errors.Is(err, io.EOF) {
				st.close()
				*stream = nil
				return wrap(ctx, err)
			}
		}
		select {
		case a := <-st.answers:
			switch {
			case a.err == nil && a.resp.GetTtlSeconds() > 0:
				return nil
			case a.err == nil:
				return clientError(ErrSessionExpired, "the session's lease is gone")
			case errors.Is(a.err, io.EOF) && retry:
				st.close()
				*stream = nil
				continue
			case errors.Is(a.err, io.EOF):
				return clientError(ErrUnavailable, "keepalive stream ended")
			default:
				return wrap(ctx, a.err)
			}
		case <-timeout.C:
			return clientError(ErrUnavailable, "keepalive timed out")
		case <-s.stop:
			return clientError(ErrClosed, "session closed")
		}
	}
	return clientError(ErrUnavailable, "keepalive stream ended")
}

// kaStream is one KeepAlive call with a goroutine reading its answers, so a renewal can
// wait for its answer with a timeout.
type kaStream struct {
	stream  lockv1.Lock_KeepAliveClient
	answers chan kaAnswer
	cancel  context.CancelFunc
}

type kaAnswer struct {
	resp *lockv1.KeepAliveResponse
	err  error
}

func openKeepAlive(parent context.Context, rpc lockv1.LockClient) (*kaStream, error) {
	ctx, cancel := context.WithCancel(parent)
	st, err := rpc.KeepAlive(ctx)
	if err != nil {
		cancel()
		return nil, wrap(parent, err)
	}
	k := &kaStream{stream: st, answers: make(chan kaAnswer, 1), cancel: cancel}
	go func() {
		for {
			r, err := st.Recv()
			select {
			case k.answers <- kaAnswer{r, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return k, nil
}

func (k *kaStream) close() {
	_ = k.stream.CloseSend()
	k.cancel()
}
