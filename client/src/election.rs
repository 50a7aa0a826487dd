//! Leader election on the lock (issue 35, item 2): leadership *is* the hold of the key, and
//! the term is its fencing token.
//!
//! A candidate campaigns by waiting in the key's FIFO queue. The service waits at most
//! 300 s per Acquire, so the campaign asks again until it leads, or until a refusal that
//! waiting cannot cure (NOT_GRANTED, INVALID_KEY...). The leader writes with its term, so
//! the guarded resource refuses a deposed leader that writes late: a leader frozen past its
//! TTL wakes after another was elected, and its write carries the older term. That is the
//! fence etcd's `Election`, Curator's `LeaderLatch` and Kubernetes' Leases do not have.
//!
//! Deposed without resigning (renewals failed until the local deadline: drain then fence),
//! the leader's `on_deposed` runs. Followers learn who leads with
//! [`crate::LockClient::observe`].

use crate::client::LockClient;
use crate::error::LockError;
use crate::hold::Hold;
use crate::metrics::WaitTimer;
use crate::session::FenceFn;
use lock_config::FencingToken;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// One round of the campaign: the longest wait the service grants.
const ROUND: Duration = Duration::from_secs(300);
/// A round shorter than this is followed by a pause of as long.
const MIN_ROUND: Duration = Duration::from_secs(1);

/// This process leads `key` while it holds this.
pub struct Leadership {
    hold: Hold,
}

impl Leadership {
    /// The term: the hold's fencing token. Every write of this leader carries it, and the
    /// resource accepts a write only above the last term it saw.
    pub fn term(&self) -> FencingToken {
        self.hold.token()
    }

    /// False from the first failed renewal: start nothing new as leader.
    pub fn can_lead(&self) -> bool {
        self.hold.can_start()
    }

    /// Whether the leadership lasted, without a gap, until now (false after a freeze past
    /// the TTL): check it before reporting work done as leader.
    pub fn was_continuous(&self) -> bool {
        self.hold.was_continuous()
    }

    /// The key this leadership is of.
    pub fn key(&self) -> &str {
        self.hold.key()
    }

    /// The hold underneath, for callers that manage it as a lock (`lockctl elect`).
    pub fn into_hold(self) -> Hold {
        self.hold
    }

    /// Steps down: the next candidate in the queue leads at once.
    pub async fn resign(self) -> Result<(), LockError> {
        self.hold.release().await
    }
}

impl LockClient {
    /// Campaigns for the leadership of `key`: waits in its FIFO queue for as long as it
    /// takes and returns when this process leads. `on_deposed` runs if the leadership is
    /// lost without [`Leadership::resign`] (the session could not be renewed in time):
    /// stop acting as leader.
    ///
    /// Each 300 s the service ends a wait; the campaign asks again, behind candidates that
    /// queued meanwhile. Replicas of one identity campaign like any candidates.
    pub async fn campaign(
        &self,
        key: &str,
        on_deposed: impl Fn() + Send + Sync + 'static,
    ) -> Result<Leadership, LockError> {
        let on_deposed: Arc<dyn Fn() + Send + Sync> = Arc::new(on_deposed);
        // One wait for the whole campaign, its rounds included: a round's HELD is not an
        // answer to the caller.
        let timer = WaitTimer::start(self.inner.metrics.as_ref(), key);
        let mut first_round = true;
        loop {
            let deposed = on_deposed.clone();
            let on_fence: FenceFn = Arc::new(move || deposed());
            let id = self.inner.next_hold.fetch_add(1, Ordering::Relaxed);
            if let Some(hold) = self.reenter(key, id, on_fence.clone()) {
                // This client holds the key: a nested acquire, no call made for it,
                // unless earlier rounds waited.
                if first_round {
                    timer.discard();
                } else {
                    timer.finish(&Ok::<_, LockError>(()));
                }
                return Ok(Leadership { hold });
            }
            first_round = false;
            let started = Instant::now();
            match self.acquire_call(key, ROUND, id, on_fence).await {
                Ok(hold) => {
                    timer.finish(&Ok::<_, LockError>(()));
                    return Ok(Leadership { hold });
                }
                // The round ended with the key still held: still a candidate. A round
                // refused at once (a service that waits less) is not retried in a spin.
                Err(LockError::Held) => {
                    if started.elapsed() < MIN_ROUND {
                        tokio::time::sleep(MIN_ROUND).await;
                    }
                }
                Err(e) => {
                    let refused = Err(e);
                    timer.finish(&refused);
                    return refused;
                }
            }
        }
    }
}
