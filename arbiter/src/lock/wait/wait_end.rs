//! Where a wait ends: the caller's deadline or this arbiter's drain, whichever comes first.
//!
//! Only the waiting points consult it (a place in the queue, the release watch, a poll's
//! pause), never a grant transaction in flight: a transaction handed to the store may
//! commit after its caller stops listening, so a waiter cut off mid-transaction could be
//! told DRAINING while a holder record names it (the gate found exactly that when the drain
//! raced the whole Acquire). Ending only where nothing is in flight keeps both refusals
//! definite: a waiter answered `HELD` (deadline) or `DRAINING` holds nothing.
//!
//! The deadline is monotonic (`tokio::time::Instant`): a wall clock stepped by NTP or an
//! operator moves no wait (issue 34's clock test jumps it ten minutes each way).

use crate::ops::bugs::{Bug, Bugs};
use crate::ops::drain::Drain;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// Why a wait ended: beside the refusals it becomes (`error.rs`), so the store's watch
/// hub (`watch_hub.rs`) can carry it without importing the wait.
pub use crate::error::Ended;

pub struct WaitEnd {
    deadline: Instant,
    drain: Drain,
    /// Debug builds only (`Bug::WallClockDeadline`): the deadline again, in wall time.
    wall: Option<std::time::SystemTime>,
}

impl WaitEnd {
    /// Tests only: the arbiter always passes its bugs ([`WaitEnd::after_with`]).
    #[cfg(test)]
    pub fn after(wait: Duration, drain: &Drain) -> Self {
        Self::after_with(wait, drain, &Bugs::default())
    }

    /// The wait's end (`WaitEnd::after` in tests) in a process that may carry debug-only bugs.
    pub fn after_with(wait: Duration, drain: &Drain, bugs: &Bugs) -> Self {
        Self {
            deadline: Instant::now() + wait,
            drain: drain.clone(),
            wall: bugs
                .has(Bug::WallClockDeadline)
                .then(|| std::time::SystemTime::now() + wait),
        }
    }

    fn wall_passed(&self) -> bool {
        self.wall
            .is_some_and(|until| std::time::SystemTime::now() >= until)
    }

    /// The bug's wall-clock deadline, polled (never resolves without the bug).
    async fn wall_reached(&self) {
        if self.wall.is_none() {
            return std::future::pending().await;
        }
        while !self.wall_passed() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[expect(dead_code, reason = "called by nothing in the crate (issue 51 item 4)")]
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Whether the wait is over already (checked between two transactions).
    pub fn passed(&self) -> Option<Ended> {
        if self.drain.is_draining() {
            Some(Ended::Draining)
        } else if Instant::now() >= self.deadline || self.wall_passed() {
            Some(Ended::Deadline)
        } else {
            None
        }
    }

    /// Resolves when the wait is over.
    pub async fn reached(&self) -> Ended {
        tokio::select! {
            biased;
            () = self.drain.started() => Ended::Draining,
            () = tokio::time::sleep_until(self.deadline) => Ended::Deadline,
            () = self.wall_reached() => Ended::Deadline,
        }
    }

    /// Runs `waiting` (a wait, never a transaction) until it finishes or the wait is over;
    /// an output that is ready wins over an end that is ready.
    pub async fn bound<F: Future>(&self, waiting: F) -> Result<F::Output, Ended> {
        tokio::select! {
            biased;
            out = waiting => Ok(out),
            ended = self.reached() => Err(ended),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ArbiterError;

    #[tokio::test]
    async fn the_first_of_deadline_and_drain_ends_the_wait() {
        let drain = Drain::default();
        let end = WaitEnd::after(Duration::from_millis(50), &drain);
        assert_eq!(end.passed(), None);
        // A finished wait wins even when the end is also due.
        assert_eq!(end.bound(async { 7 }).await, Ok(7));
        // The deadline ends a wait that never finishes.
        assert_eq!(
            end.bound(std::future::pending::<()>()).await,
            Err(Ended::Deadline)
        );
        assert_eq!(end.passed(), Some(Ended::Deadline));

        let end = WaitEnd::after(Duration::from_secs(60), &drain);
        let waiting = tokio::spawn(async move { end.bound(std::future::pending::<()>()).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drain.start();
        assert_eq!(waiting.await.unwrap(), Err(Ended::Draining));
        let end = WaitEnd::after(Duration::from_secs(60), &drain);
        assert_eq!(end.passed(), Some(Ended::Draining));
        assert_eq!(end.reached().await, Ended::Draining);
    }

    #[test]
    fn each_end_has_its_refusal() {
        assert!(matches!(
            Ended::Deadline.refusal(),
            ArbiterError::HeldDeadline
        ));
        assert!(matches!(Ended::Draining.refusal(), ArbiterError::Draining));
    }
}
