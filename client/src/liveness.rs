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
