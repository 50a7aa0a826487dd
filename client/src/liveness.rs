//! Drain then fence (ADR-12), as a pure rule on a monotonic clock.
//!
//! The deadline is the *send* time of the last successful keepalive plus the TTL minus a
//! margin: the leader restarts the lease no earlier than it receives that keepalive, so the
//! holder always believes it has lost the lock before the store says so. At the first
//! failed keepalive `can_start` turns false (in-flight work may finish); at the deadline
//! the holds are fenced.

use std::time::{Duration, Instant};

/// Safety margin under the TTL (ADR-12).
pub const MARGIN: Duration = Duration::from_secs(1);

/// A hold that did not cover the whole of some work: how long the session had gone
/// without a successful renewal when the work ended, and how far past its local deadline
/// (send time of the last renewal + TTL − margin) that was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lapse {
    pub unrenewed: Duration,
    pub past_deadline: Duration,
    pub ttl: Duration,
}

impl std::fmt::Display for Lapse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "no successful renewal for {:.1} s (TTL {} s): {:.1} s past the hold's deadline",
            self.unrenewed.as_secs_f64(),
            self.ttl.as_secs(),
            self.past_deadline.as_secs_f64()
        )
    }
}

#[derive(Debug, Clone)]
pub struct Liveness {
    ttl: Duration,
    last_ok_send: Instant,
    failing: bool,
    fenced: bool,
}

impl Liveness {
    /// `opened_at`: when the OpenSession request was sent (the lease starts after it).
    pub fn new(ttl: Duration, opened_at: Instant) -> Self {
        Self {
            ttl,
            last_ok_send: opened_at,
            failing: false,
            fenced: false,
        }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    pub fn deadline(&self) -> Instant {
        self.last_ok_send + self.ttl.saturating_sub(MARGIN)
    }

    /// A keepalive sent at `sent_at` succeeded.
    pub fn renewed(&mut self, sent_at: Instant) {
        if self.fenced {
            return;
        }
        self.last_ok_send = self.last_ok_send.max(sent_at);
        self.failing = false;
    }

    /// A keepalive failed: stop starting new work.
    pub fn failed(&mut self) {
        self.failing = true;
    }

    /// True once, when the deadline has passed: the caller fences the holds.
    pub fn fence_due(&mut self, now: Instant) -> bool {
        if !self.fenced && now >= self.deadline() {
            self.fenced = true;
            return true;
        }
        false
    }

    /// Ends the session at once (the service said it expired).
    pub fn expire(&mut self) -> bool {
        let first = !self.fenced;
        self.fenced = true;
        first
    }

    pub fn is_fenced(&self) -> bool {
        self.fenced
    }

    pub fn can_start(&self, now: Instant) -> bool {
        !self.failing && !self.fenced && now < self.deadline()
    }

    /// Whether the session covered every instant up to `now` (issue 32): never fenced and
    /// its deadline not yet passed. Checked when work that ran under a hold ends, because
    /// a process frozen past its deadline (SIGSTOP, a VM pause, a long GC) may wake and
    /// finish before the renewal task has run to fence it. The deadline only moves with a
    /// renewal sent before it, and a fenced session never renews again, so "covered at
    /// `now`" means covered throughout. Err says by how much it was not.
    pub fn covered_until(&self, now: Instant) -> Result<(), Lapse> {
        let deadline = self.deadline();
        if !self.fenced && now < deadline {
            return Ok(());
        }
        Err(Lapse {
            unrenewed: now.saturating_duration_since(self.last_ok_send),
            past_deadline: now.saturating_duration_since(deadline),
            ttl: self.ttl,
        })
    }

    pub fn remaining(&self, now: Instant) -> Duration {
        if self.fenced {
            return Duration::ZERO;
        }
        self.deadline().saturating_duration_since(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn drain_at_first_failure_fence_at_send_time_deadline() {
        let t0 = Instant::now();
        let mut l = Liveness::new(15 * S, t0);
        assert!(l.can_start(t0));
        assert_eq!(l.deadline(), t0 + 14 * S);
        l.renewed(t0 + 5 * S);
        assert_eq!(l.deadline(), t0 + 19 * S);
        l.failed();
        assert!(
            !l.can_start(t0 + 6 * S),
            "drain: no new work after a failure"
        );
        assert!(!l.fence_due(t0 + 18 * S));
        assert!(l.remaining(t0 + 18 * S) == S);
        assert!(
            l.fence_due(t0 + 19 * S),
            "fence at send time + TTL - margin"
        );
        assert!(!l.fence_due(t0 + 20 * S), "once");
        assert!(l.is_fenced() && !l.can_start(t0 + 19 * S));
        // A late success cannot revive a fenced session.
        l.renewed(t0 + 19 * S);
        assert!(!l.can_start(t0 + 19 * S));
    }

    /// Issue 32: work that ends after the deadline did not run under the hold the whole
    /// time, whether or not the renewal task has fenced yet (a frozen process wakes and may
    /// see its command's exit first).
    #[test]
    fn covered_until_table() {
        let t0 = Instant::now();
        let ttl = 30 * S;
        let fresh = Liveness::new(ttl, t0);
        let mut renewed = Liveness::new(ttl, t0);
        renewed.renewed(t0 + 10 * S);
        let mut fenced = Liveness::new(ttl, t0);
        assert!(fenced.fence_due(t0 + 29 * S));
        let mut expired = Liveness::new(ttl, t0);
        expired.expire();
        let cases: Vec<(&str, &Liveness, Duration, Option<Lapse>)> = vec![
            ("well inside the deadline", &fresh, 5 * S, None),
            (
                "a moment before it",
                &fresh,
                29 * S - Duration::from_millis(1),
                None,
            ),
            (
                "at the deadline, not yet fenced (frozen, just woken)",
                &fresh,
                29 * S,
                Some(Lapse {
                    unrenewed: 29 * S,
                    past_deadline: Duration::ZERO,
                    ttl,
                }),
            ),
            (
                "37 s frozen, not yet fenced",
                &fresh,
                37 * S,
                Some(Lapse {
                    unrenewed: 37 * S,
                    past_deadline: 8 * S,
                    ttl,
                }),
            ),
            ("a renewal moved the deadline", &renewed, 37 * S, None),
            (
                "fenced by the task",
                &fenced,
                30 * S,
                Some(Lapse {
                    unrenewed: 30 * S,
                    past_deadline: S,
                    ttl,
                }),
            ),
            (
                "the service said expired",
                &expired,
                2 * S,
                Some(Lapse {
                    unrenewed: 2 * S,
                    past_deadline: Duration::ZERO,
                    ttl,
                }),
            ),
        ];
        for (name, l, at, want) in cases {
            assert_eq!(l.covered_until(t0 + at).err(), want, "{name}");
        }
        // A success reported after the fence does not restore cover.
        let mut late = Liveness::new(ttl, t0);
        assert!(late.fence_due(t0 + 29 * S));
        late.renewed(t0 + 28 * S);
        assert!(late.covered_until(t0 + 29 * S).is_err());
    }

    #[test]
    fn recovery_before_the_deadline_resumes() {
        let t0 = Instant::now();
        let mut l = Liveness::new(6 * S, t0);
        l.failed();
        l.renewed(t0 + 2 * S);
        assert!(l.can_start(t0 + 3 * S));
        // An older success reported late does not move the deadline back.
        l.renewed(t0 + S);
        assert_eq!(l.deadline(), t0 + 7 * S);
    }
}
