//! Drain for a restart (SIGTERM): the health service turns NOT_SERVING so Envoy stops
//! routing here; every queued waiter and every new request is answered DRAINING
//! (UNAVAILABLE, retryable: nothing was done, and the key's next owner answers the same
//! request; a waiter is answered at its next waiting point, never while its grant
//! transaction is in flight, `wait_end.rs`); KeepAlive streams end cleanly so clients reopen them on another arbiter;
//! transactions in flight finish; then the process exits, within a bound
//! (`--drain-timeout`). Nothing is lost: a waiter's answer is DRAINING, never silence,
//! and lock-client retries it inside the caller's deadline.

use std::sync::Arc;
use tokio::sync::watch;

#[derive(Clone)]
pub struct Drain(Arc<watch::Sender<bool>>);

impl Default for Drain {
    fn default() -> Self {
        Self(Arc::new(watch::Sender::new(false)))
    }
}

impl Drain {
    /// Starts draining (idempotent).
    pub fn start(&self) {
        self.0.send_replace(true);
    }

    pub fn is_draining(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once draining has started (at once if it has).
    pub async fn started(&self) {
        let mut rx = self.0.subscribe();
        // The sender lives as long as `self`, so wait_for cannot fail while we wait.
        let _ = rx.wait_for(|draining| *draining).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn started_resolves_for_waiters_before_and_after_the_start() {
        let d = Drain::default();
        assert!(!d.is_draining());
        let early = tokio::spawn({
            let d = d.clone();
            async move { d.started().await }
        });
        d.start();
        d.start();
        early.await.unwrap();
        d.started().await;
        assert!(d.is_draining());
    }
}
