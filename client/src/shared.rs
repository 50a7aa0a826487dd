//! Shared holds (reader–writer) of keys of a `shared: true` class: many sessions hold a
//! key `SHARED` at once; an exclusive [`crate::Hold`] of it excludes them all.

use crate::client::LockClient;
use crate::error::LockError;
use crate::metrics::WaitTimer;
use crate::session::{FenceFn, Session};
use crate::state::Inner;
use lock_config::FencingToken;
use lock_config::proto::v1::{AcquireRequest, HoldMode, ReleaseRequest};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// A shared hold. Its token is its own grant's: above the last exclusive grant of the key
/// before it. A resource that records its last writer's token serves a read only under a
/// token at least that one; a reader paused past its session while a writer came and went
/// is then refused. Dropping it releases it in a background task; prefer
/// [`SharedHold::release`] to see the outcome.
pub struct SharedHold {
    client: Arc<Inner>,
    key: String,
    id: u64,
    token: FencingToken,
    session: Arc<Session>,
    done: bool,
}

impl SharedHold {
    pub fn key(&self) -> &str {
        &self.key
    }

    /// This shared hold's token.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// False from the first failed renewal on: finish in-flight work, start nothing new.
    pub fn can_start(&self) -> bool {
        self.session.can_start()
    }

    pub fn is_fenced(&self) -> bool {
        self.session.is_fenced()
    }

    /// True if the hold covered every instant from its grant until now.
    pub fn was_continuous(&self) -> bool {
        self.session.lapse().is_none()
    }

    pub async fn release(mut self) -> Result<(), LockError> {
        self.done = true;
        finish(&self.client, &self.key, self.id, self.token, &self.session).await
    }
}

impl Drop for SharedHold {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let (client, key, id, token, session) = (
            self.client.clone(),
            std::mem::take(&mut self.key),
            self.id,
            self.token,
            self.session.clone(),
        );
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = finish(&client, &key, id, token, &session).await;
            });
        }
    }
}

async fn finish(
    client: &Inner,
    key: &str,
    id: u64,
    token: FencingToken,
    session: &Arc<Session>,
) -> Result<(), LockError> {
    session.detach(id);
    if session.is_fenced() {
        return Err(LockError::Fenced);
    }
    // Ended by its owner, whatever the call answers (as an exclusive hold's release).
    session.released(id);
    let req = ReleaseRequest {
        key: key.to_owned(),
        token: token.as_u64(),
        session_id: session.id,
        mode: HoldMode::Shared.into(),
    };
    client.rpc()?.release(crate::stub::keyed(req, key)).await?;
    Ok(())
}

impl LockClient {
    /// Takes `key` shared, waiting up to `wait`: many sessions (other identities, sibling
    /// replicas, this client's other shared holds) hold it at once; an exclusive hold of it
    /// waits for all of them, and while one waits, new shared holds wait behind it. The
    /// key's class must be `shared: true` ([`LockError::InvalidRequest`] otherwise).
    /// `on_fence` runs if the hold is lost.
    pub async fn acquire_shared(
        &self,
        key: &str,
        wait: Duration,
        on_fence: impl Fn() + Send + Sync + 'static,
    ) -> Result<SharedHold, LockError> {
        let on_fence: FenceFn = Arc::new(on_fence);
        let id = self.inner.next_hold.fetch_add(1, Ordering::Relaxed);
        let timer = WaitTimer::start(self.inner.metrics.as_ref(), key);
        let held = self.acquire_shared_call(key, wait, id, on_fence).await;
        timer.finish(&held);
        held
    }

    /// The shared Acquire of `key` (the service answers it), for hold `id`.
    async fn acquire_shared_call(
        &self,
        key: &str,
        wait: Duration,
        id: u64,
        on_fence: FenceFn,
    ) -> Result<SharedHold, LockError> {
        let deadline = Instant::now() + wait.min(Duration::from_secs(24 * 3600));
        let inner = self.inner.clone();
        let ((token, class), s) = self
            .on_session(key, deadline, |s, left| {
                let inner = inner.clone();
                async move {
                    let req = AcquireRequest {
                        key: key.to_owned(),
                        session_id: s.id,
                        wait_millis: u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
                        mode: HoldMode::Shared.into(),
                    };
                    let r = inner.rpc()?.acquire(crate::stub::keyed(req, key)).await?;
                    let r = r.into_inner();
                    Ok((r.token, r.class_name))
                }
            })
            .await?;
        let token =
            FencingToken::from_u64(token).map_err(|e| LockError::InvalidRequest(e.to_string()))?;
        self.inner.learn_class(key, &class);
        s.attach(id, on_fence);
        self.inner.granted(&s, id, key);
        Ok(SharedHold {
            client: self.inner.clone(),
            key: key.to_owned(),
            id,
            token,
            session: s,
            done: false,
        })
    }
}
