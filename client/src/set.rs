//! Several keys as one hold (AcquireAll, ReleaseAll): granted in one transaction or not at
//! all, one token for every key, released together.

use crate::client::LockClient;
use crate::error::LockError;
use crate::metrics::WaitTimer;
use crate::session::{FenceFn, Session};
use crate::state::Inner;
use lock_config::FencingToken;
use lock_config::proto::v1::{AcquireAllRequest, ReleaseAllRequest};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// A granted set of keys. Every key's token is [`HeldSet::token`]: write to each key's
/// resource with it. Check [`HeldSet::can_start`] before each unit of work, as for a
/// [`crate::Hold`]. Dropping it releases the set in a background task; prefer
/// [`HeldSet::release`] to see the outcome.
pub struct HeldSet {
    client: Arc<Inner>,
    keys: Vec<String>,
    id: u64,
    token: FencingToken,
    session: Arc<Session>,
    done: bool,
}

impl HeldSet {
    /// The keys held, sorted.
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// The fencing token of every key of the set.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// False from the first failed renewal on: finish in-flight work, start nothing new.
    pub fn can_start(&self) -> bool {
        self.session.can_start()
    }

    /// The holds were fenced: dead.
    pub fn is_fenced(&self) -> bool {
        self.session.is_fenced()
    }

    /// True if the holds covered every instant from the grant until now.
    pub fn was_continuous(&self) -> bool {
        self.session.lapse().is_none()
    }

    /// Releases every key of the set in one transaction.
    pub async fn release(mut self) -> Result<(), LockError> {
        self.done = true;
        finish(&self.client, &self.keys, self.id, self.token, &self.session).await
    }
}

impl Drop for HeldSet {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let (client, keys, id, token, session) = (
            self.client.clone(),
            std::mem::take(&mut self.keys),
            self.id,
            self.token,
            self.session.clone(),
        );
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = finish(&client, &keys, id, token, &session).await;
            });
        }
    }
}

async fn finish(
    client: &Inner,
    keys: &[String],
    id: u64,
    token: FencingToken,
    session: &Arc<Session>,
) -> Result<(), LockError> {
    session.detach(id);
    if session.is_fenced() {
        return Err(LockError::Fenced);
    }
    // Ended by its owner, whatever the call answers (as a single hold's release).
    session.released(id);
    let mut rpc = client.rpc()?;
    rpc.release_all(set_request(ReleaseAllRequest {
        keys: keys.to_vec(),
        token: token.as_u64(),
        session_id: session.id,
    }))
    .await?;
    Ok(())
}

/// A set request carries no `lock-key` metadata: the edge decides a set on every key of
/// its body, never on one named in the headers.
fn set_request<T>(msg: T) -> tonic::Request<T> {
    tonic::Request::new(msg)
}

impl LockClient {
    /// Takes every key of `keys` together, waiting up to `wait` until all are free at
    /// once: all or nothing, one token for all. Waiting holds nothing, so callers asking
    /// for overlapping sets in any order cannot deadlock; a key with a standing queue of
    /// single-key waiters is handed to them first (the set waits its turn when the key is
    /// free, or until `wait` ends). `on_fence` runs if the holds are lost.
    ///
    /// The keys must be of classes with one TTL, on one store, none `fairness: durable`
    /// ([`LockError::KeySetRefused`] otherwise), and not held by this client already.
    pub async fn acquire_all<S: AsRef<str>>(
        &self,
        keys: &[S],
        wait: Duration,
        on_fence: impl Fn() + Send + Sync + 'static,
    ) -> Result<HeldSet, LockError> {
        let keys: Vec<String> = keys.iter().map(|k| k.as_ref().to_owned()).collect();
        let first = keys
            .iter()
            .min()
            .cloned()
            .ok_or_else(|| LockError::InvalidRequest("a key set has 1..=16 keys".into()))?;
        let on_fence: FenceFn = Arc::new(on_fence);
        let id = self.inner.next_hold.fetch_add(1, Ordering::Relaxed);
        // AcquireAll's answer names no class: the set is labelled with its first key's,
        // as the OpenSession answer for that key (or an earlier grant of it) named it.
        let timer = WaitTimer::start(self.inner.metrics.as_ref(), &first);
        let held = self
            .acquire_all_call(&first, keys, wait, id, on_fence)
            .await;
        timer.finish(&held);
        held
    }

    /// The AcquireAll of `keys` (the service answers it), its session chosen by `first`.
    async fn acquire_all_call(
        &self,
        first: &str,
        keys: Vec<String>,
        wait: Duration,
        id: u64,
        on_fence: FenceFn,
    ) -> Result<HeldSet, LockError> {
        let deadline = Instant::now() + wait.min(Duration::from_secs(24 * 3600));
        let inner = self.inner.clone();
        let (r, s) = self
            .on_session(first, deadline, |s, left| {
                let (inner, keys) = (inner.clone(), keys.clone());
                async move {
                    let req = AcquireAllRequest {
                        keys,
                        session_id: s.id,
                        wait_millis: u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
                    };
                    Ok(inner
                        .rpc()?
                        .acquire_all(set_request(req))
                        .await?
                        .into_inner())
                }
            })
            .await?;
        let token = FencingToken::from_u64(r.token)
            .map_err(|e| LockError::InvalidRequest(e.to_string()))?;
        for k in &r.keys {
            self.learn_place(k, lock_config::shards::tag_of(s.id));
        }
        s.attach(id, on_fence);
        self.inner.granted(&s, id, first);
        Ok(HeldSet {
            client: self.inner.clone(),
            keys: r.keys,
            id,
            token,
            session: s,
            done: false,
        })
    }
}
