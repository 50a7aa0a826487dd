//! One call on a session, retried as every acquire is: a session opened for the key's
//! class when there is none, a session of the TTL or on the cluster the service asks for
//! (WRONG_SESSION_TTL, WRONG_SESSION_PLACE), a new one when it expired, and transient
//! refusals waited out inside the caller's deadline.

use crate::client::{LockClient, jitter};
use crate::error::LockError;
use crate::session::Session;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Attempts of one call (transient errors, session changes), within its deadline.
pub(crate) const MAX_TRIES: usize = 32;

impl LockClient {
    /// Runs `call(session, time left)` for `key` until it answers, the deadline passes or
    /// a refusal no retry can cure; returns its answer and the session it ran on.
    pub(crate) async fn on_session<T, F, Fut>(
        &self,
        key: &str,
        deadline: Instant,
        mut call: F,
    ) -> Result<(T, Arc<Session>), LockError>
    where
        F: FnMut(Arc<Session>, Duration) -> Fut,
        Fut: Future<Output = Result<T, LockError>>,
    {
        let mut session = self.session_for_key(key);
        let mut wanted: Option<(u32, Option<u8>)> = None;
        let mut backoff = Duration::from_millis(50);
        for _ in 0..MAX_TRIES {
            let s = match session.take() {
                Some(s) => s,
                None => self.session_or_open(key, wanted).await?,
            };
            let left = deadline.saturating_duration_since(Instant::now());
            let err = match call(s.clone(), left).await {
                Ok(answer) => {
                    self.learn_place(key, lock_config::shards::tag_of(s.id));
                    return Ok((answer, s));
                }
                Err(e) => e,
            };
            let pause = match &err {
                LockError::WrongSessionTtl { ttl_seconds, .. } => {
                    wanted = Some((*ttl_seconds, self.place_of(key)));
                    session = self.session_for(*ttl_seconds, self.place_of(key));
                    continue;
                }
                // The key lives on another cluster than this session (tiers, shards, or
                // a move): a session there, or a new one opened for this key.
                LockError::WrongSessionPlace { cluster } => {
                    let tag = lock_config::shards::lease_tag(cluster);
                    self.learn_place(key, tag);
                    let ttl = u32::try_from(s.ttl().as_secs()).unwrap_or(0);
                    wanted = Some((ttl, Some(tag)));
                    session = self.session_for(ttl, Some(tag));
                    continue;
                }
                LockError::SessionExpired => {
                    self.forget_session(&s);
                    continue;
                }
                LockError::RateLimited { retry_after } => *retry_after,
                e if e.is_transient() => {
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                    jitter(backoff)
                }
                _ => return Err(err),
            };
            if Instant::now() + pause >= deadline {
                return Err(err);
            }
            tokio::time::sleep(pause).await;
            session = Some(s);
        }
        Err(LockError::Unavailable(
            "gave up after repeated retries".into(),
        ))
    }
}
