//! The client: sessions per TTL, acquire with waiting and retries, re-entrancy.

use crate::connect::Config;
use crate::error::LockError;
use crate::hold::{Hold, Reentry};
use crate::proto::lock_client::LockClient as Rpc;
use crate::session::{FenceFn, Session};
use lock_config::FencingToken;
use lock_config::proto::v1::{AcquireRequest, OpenSessionRequest, ReleaseRequest};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::mpsc;
use tonic::transport::Channel;

/// Attempts of one acquire (transient errors, session changes), within its deadline.
const MAX_TRIES: usize = 32;

/// A session and the sender whose drop stops its keepalive task.
type Running = (Arc<Session>, mpsc::Sender<()>);

#[derive(Clone)]
pub struct LockClient {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    config: Config,
    rpc: Mutex<(Rpc<Channel>, Vec<Option<SystemTime>>)>,
    /// One session per TTL (seconds), with the sender that stops its keepalive task.
    sessions: Mutex<HashMap<u32, Running>>,
    /// Re-entrancy: outermost holds by key.
    pub(crate) holds: Mutex<HashMap<String, Reentry>>,
    next_hold: AtomicU64,
}

impl LockClient {
    /// Builds the client; connects lazily on first use.
    pub fn new(config: Config) -> Result<Self, LockError> {
        let rpc = Rpc::new(config.channel()?);
        let stamp = config.stamp();
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                rpc: Mutex::new((rpc, stamp)),
                sessions: Mutex::new(HashMap::new()),
                holds: Mutex::new(HashMap::new()),
                next_hold: AtomicU64::new(1),
            }),
        })
    }

    /// The RPC client, rebuilt when the SVID files changed (rotation).
    pub(crate) fn rpc(&self) -> Result<Rpc<Channel>, LockError> {
        let mut guard = self
            .inner
            .rpc
            .lock()
            .map_err(|_| LockError::Unavailable("client state poisoned".into()))?;
        let stamp = self.inner.config.stamp();
        if stamp != guard.1 {
            *guard = (Rpc::new(self.inner.config.channel()?), stamp);
        }
        Ok(guard.0.clone())
    }

    /// Takes `key`, waiting up to `wait` for it. `on_fence` runs if the hold is lost
    /// (the session could not be renewed before its deadline): stop touching the resource.
    /// Nested acquires of a key this client holds count locally and call nothing.
    pub async fn acquire(
        &self,
        key: &str,
        wait: Duration,
        on_fence: impl Fn() + Send + Sync + 'static,
    ) -> Result<Hold, LockError> {
        let on_fence: FenceFn = Arc::new(on_fence);
        let id = self.inner.next_hold.fetch_add(1, Ordering::Relaxed);
        if let Some(hold) = self.reenter(key, id, on_fence.clone()) {
            return Ok(hold);
        }
        let deadline = Instant::now() + wait;
        let mut session = self.any_session();
        let mut backoff = Duration::from_millis(50);
        for _ in 0..MAX_TRIES {
            let s = match session.take() {
                Some(s) => s,
                None => self.open_session(key).await?,
            };
            let left = deadline.saturating_duration_since(Instant::now());
            let mut rpc = self.rpc()?;
            let req = AcquireRequest {
                key: key.to_owned(),
                session_id: s.id,
                wait_millis: u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
            };
            let err = match rpc.acquire(req).await {
                Ok(r) => {
                    let token = FencingToken::from_u64(r.into_inner().token)
                        .map_err(|e| LockError::InvalidRequest(e.to_string()))?;
                    return Ok(self.held(key, id, token, s, on_fence));
                }
                Err(status) => LockError::from_status(&status),
            };
            let pause = match &err {
                LockError::WrongSessionTtl { ttl_seconds, .. } => {
                    session = self.session_for(*ttl_seconds);
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

    fn reenter(&self, key: &str, id: u64, on_fence: FenceFn) -> Option<Hold> {
        let mut holds = self.inner.holds.lock().ok()?;
        let entry = holds.get_mut(key)?;
        if entry.session.is_fenced() {
            holds.remove(key);
            return None;
        }
        entry.count += 1;
        entry.session.attach(id, on_fence);
        Some(Hold::new(
            self.clone(),
            key,
            id,
            entry.token,
            entry.session.clone(),
        ))
    }

    fn held(
        &self,
        key: &str,
        id: u64,
        token: FencingToken,
        s: Arc<Session>,
        on_fence: FenceFn,
    ) -> Hold {
        s.attach(id, on_fence);
        if let Ok(mut holds) = self.inner.holds.lock() {
            holds.insert(
                key.to_owned(),
                Reentry {
                    count: 1,
                    token,
                    session: s.clone(),
                },
            );
        }
        Hold::new(self.clone(), key, id, token, s)
    }

    fn any_session(&self) -> Option<Arc<Session>> {
        let sessions = self.inner.sessions.lock().ok()?;
        sessions
            .values()
            .map(|(s, _)| s.clone())
            .find(|s| !s.is_fenced())
    }

    fn session_for(&self, ttl_seconds: u32) -> Option<Arc<Session>> {
        let sessions = self.inner.sessions.lock().ok()?;
        sessions
            .get(&ttl_seconds)
            .map(|(s, _)| s.clone())
            .filter(|s| !s.is_fenced())
    }

    fn forget_session(&self, s: &Arc<Session>) {
        if let Ok(mut sessions) = self.inner.sessions.lock() {
            sessions.retain(|_, (x, _)| !Arc::ptr_eq(x, s));
        }
    }

    /// Opens the session for `key`'s class (its TTL) and starts renewing it.
    async fn open_session(&self, key: &str) -> Result<Arc<Session>, LockError> {
        let sent = Instant::now();
        let mut rpc = self.rpc()?;
        let r = rpc
            .open_session(OpenSessionRequest {
                key: key.to_owned(),
            })
            .await?
            .into_inner();
        let session = Session::new(
            r.session_id,
            Duration::from_secs(u64::from(r.ttl_seconds)),
            sent,
        );
        let (stop, stopped) = mpsc::channel(1);
        tokio::spawn(session.clone().keep_alive(rpc, stopped));
        if let Ok(mut sessions) = self.inner.sessions.lock() {
            sessions.insert(r.ttl_seconds, (session.clone(), stop));
        }
        Ok(session)
    }

    pub(crate) async fn release_rpc(
        &self,
        key: &str,
        token: FencingToken,
        session: i64,
    ) -> Result<(), LockError> {
        let mut rpc = self.rpc()?;
        rpc.release(ReleaseRequest {
            key: key.to_owned(),
            token: token.as_u64(),
            session_id: session,
        })
        .await?;
        Ok(())
    }
}

/// `d` with up to ±25 % jitter, so retrying clients do not align.
fn jitter(d: Duration) -> Duration {
    let n = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |t| t.subsec_nanos());
    let quarter = d / 4;
    d - quarter + quarter * 2 * (n % 1000) / 1000
}
