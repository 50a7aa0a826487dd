package lock

import "time"

// FenceMargin is the safety margin under the TTL (ADR-12): a hold is fenced at the send
// time of its session's last successful keepalive + TTL − FenceMargin.
const FenceMargin = time.Second

// liveness is drain-then-fence (ADR-12) as a pure rule on the monotonic clock: the same
// rule as lock-client's liveness.rs. The deadline is the SEND time of the last successful
// keepalive plus the TTL minus FenceMargin: the store restarts the lease no earlier than
// it receives that keepalive, so the holder always believes it has lost the lock before
// the store says so. At the first failed keepalive canStart turns false; at the deadline
// the holds are fenced.
type liveness struct {
	ttl        time.Duration
	lastOKSend time.Time
	failing    bool
	fenced     bool
}

// newLiveness starts at openedAt: when the OpenSession request was sent.
func newLiveness(ttl time.Duration, openedAt time.Time) liveness {
	return liveness{ttl: ttl, lastOKSend: openedAt}
}

func (l *liveness) deadline() time.Time {
	m := l.ttl - FenceMargin
	if m < 0 {
		m = 0
	}
	return l.lastOKSend.Add(m)
}

// renewed records that a keepalive sent at sentAt succeeded.
func (l *liveness) renewed(sentAt time.Time) {
	if l.fenced {
		return
	}
	if sentAt.After(l.lastOKSend) {
		l.lastOKSend = sentAt
	}
	l.failing = false
}

// failed records a failed keepalive: start nothing new.
func (l *liveness) failed() { l.failing = true }

// fenceDue is true once, when the deadline has passed: the caller fences the holds.
func (l *liveness) fenceDue(now time.Time) bool {
	if !l.fenced && !now.Before(l.deadline()) {
		l.fenced = true
		return true
	}
	return false
}

// expire ends the session at once (the service said it expired); true the first time.
func (l *liveness) expire() bool {
	first := !l.fenced
	l.fenced = true
	return first
}

func (l *liveness) canStart(now time.Time) bool {
	return !l.failing && !l.fenced && now.Before(l.deadline())
}

// continuous reports whether the session covered every instant up to now: never fenced
// and its deadline not passed (a process frozen past it may wake before the renewal
// goroutine has fenced).
func (l *liveness) continuous(now time.Time) bool {
	return !l.fenced && now.Before(l.deadline())
}

func (l *liveness) remaining(now time.Time) time.Duration {
	if l.fenced {
		return 0
	}
	d := l.deadline().Sub(now)
	if d < 0 {
		return 0
	}
	return d
}
