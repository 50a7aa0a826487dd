//! Holds of one of many: shared holds (reader–writer) of keys of a `shared: true` class, and
//! a semaphore's permits (`permits: N` class, `permit.rs`). Both are a grant of their own
//! on the key, released by the mode they were taken in; [`ModeHold`] is their one
//! lifecycle (renewed by the session, fenced with it, released on drop).

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
pub struct SharedHold(ModeHold);

impl SharedHold {
    pub fn key(&self) -> &str {
        &self.0.key
    }

    /// This shared hold's token.
    pub fn token(&self) -> FencingToken {
        self.0.token
    }

    /// False from the first failed renewal on: finish in-flight work, start nothing new.
    pub fn can_start(&self) -> bool {
        self.0.session.can_start()
    }

    pub fn is_fenced(&self) -> bool {
        self.0.session.is_fenced()
    }

    /// True if the hold covered every instant from its grant until now.
    pub fn was_continuous(&self) -> bool {
        self.0.session.lapse().is_none()
    }

    pub async fn release(self) -> Result<(), LockError> {
        self.0.release().await
    }
}

/// A grant taken in a mode other than exclusive (SHARED or PERMIT): its key, token and
/// session, released in that mode.
pub(crate) struct ModeHold {
    client: Arc<Inner>,
    pub(crate) key: String,
    id: u64,
    pub(crate) token: FencingToken,
    pub(crate) session: Arc<Session>,
    mode: HoldMode,
    done: bool,
}

impl ModeHold {
    /// The hold id its grant was attached to the session under.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) async fn release(mut self) -> Result<(), LockError> {
        self.done = true;
        finish(
            &self.client,
            &self.key,
            self.id,
            self.token,
            &self.session,
            self.mode,
        )
        .await
    }
}

impl Drop for ModeHold {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let (client, key, id, token, session, mode) = (
            self.client.clone(),
            std::mem::take(&mut self.key),
            self.id,
            self.token,
            self.session.clone(),
            self.mode,
        );
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = finish(&client, &key, id, token, &session, mode).await;
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
    mode: HoldMode,
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
        mode: mode.into(),
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
        self.acquire_in_mode(key, wait, Arc::new(on_fence), HoldMode::Shared)
            .await
            .map(|(hold, _)| SharedHold(hold))
    }

    /// An Acquire in `mode` (SHARED or PERMIT), timed for the client's metrics; the hold
    /// and the permit the service answered (0 unless PERMIT).
    pub(crate) async fn acquire_in_mode(
        &self,
        key: &str,
        wait: Duration,
        on_fence: FenceFn,
        mode: HoldMode,
    ) -> Result<(ModeHold, u32), LockError> {
        let id = self.inner.next_hold.fetch_add(1, Ordering::Relaxed);
        let timer = WaitTimer::start(self.inner.metrics.as_ref(), key);
        let held = self.acquire_mode_call(key, wait, id, on_fence, mode).await;
        timer.finish(&held);
        held
    }

    /// The Acquire of `key` in `mode` (the service answers it), for hold `id`.
    async fn acquire_mode_call(
        &self,
        key: &str,
        wait: Duration,
        id: u64,
        on_fence: FenceFn,
        mode: HoldMode,
    ) -> Result<(ModeHold, u32), LockError> {
        let deadline = Instant::now() + wait.min(Duration::from_secs(24 * 3600));
        let inner = self.inner.clone();
        let ((token, class, permit), s) = self
            .on_session(key, deadline, |s, left| {
                let inner = inner.clone();
                async move {
                    let req = AcquireRequest {
                        key: key.to_owned(),
                        session_id: s.id,
                        wait_millis: u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
                        mode: mode.into(),
                    };
                    let r = inner.rpc()?.acquire(crate::stub::keyed(req, key)).await?;
                    let r = r.into_inner();
                    Ok((r.token, r.class_name, r.permit))
                }
            })
            .await?;
        let token =
            FencingToken::from_u64(token).map_err(|e| LockError::InvalidRequest(e.to_string()))?;
        self.inner.learn_class(key, &class);
        s.attach(id, on_fence);
        self.inner.granted(&s, id, key);
        let hold = ModeHold {
            client: self.inner.clone(),
            key: key.to_owned(),
            id,
            token,
            session: s,
            mode,
            done: false,
        };
        Ok((hold, permit))
    }
}
