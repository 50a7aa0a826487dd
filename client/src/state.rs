//! What every handle of one client and every hold it gave out share: the connection
//! (rebuilt when the SVID rotates), the sessions, the key places, and the re-entry table.
//! `client.rs` decides (acquire, retries, sessions per TTL); `hold.rs` ends holds; both
//! reach the service through this.

use crate::connect::{Config, Stamp};
use crate::error::LockError;
use crate::metrics::{ClientMetrics, Recorder};
use crate::proto::lock_client::LockClient as Rpc;
use crate::session::Session;
use lock_config::FencingToken;
use lock_config::proto::v1::{CloseSessionRequest, ReleaseRequest};
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::mpsc;
use tonic::transport::Channel;

/// Bound on one CloseSession during shutdown or drop.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Every mutex of the client's state (its maps, its connection, a session's liveness),
/// locked whether or not a panic poisoned it: what a poisoned mutex guards is still the
/// truth (a panic elsewhere closed no session and released no hold), and reading it as
/// empty skipped open sessions (`shutdown` answered Ok having closed nothing).
pub(crate) fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A session and the sender whose drop stops its keepalive task.
pub(crate) type Running = (Arc<Session>, mpsc::Sender<()>);

/// The outermost hold of a key in this client; nested acquires only count.
pub(crate) struct Reentry {
    pub count: usize,
    /// The id of the hold the service's grant was made for (the outermost acquire's): the
    /// session knows the grant by it, whichever nested hold releases last.
    pub grant: u64,
    pub token: FencingToken,
    pub session: Arc<Session>,
    /// The hold's open `Hold` stream, which carries its release (None: unary).
    pub link: Option<crate::hold_stream::Link>,
}

pub(crate) struct Inner {
    pub(crate) config: Config,
    /// Sent with every OpenSession: the config's, else the process's next
    /// (`process_instance`); fixed for the client's life.
    pub(crate) instance: String,
    rpc: Mutex<(Rpc<Channel>, Stamp)>,
    /// One session per (TTL seconds, cluster tag), with the sender that stops its
    /// keepalive task. A session lives on one etcd cluster; with tiers and shards the
    /// service tags its id with the cluster's tag (`lock_config::shards::tag_of`).
    pub(crate) sessions: Mutex<HashMap<(u32, u8), Running>>,
    /// Held while a session is opened: acquires racing on a client without a session wait
    /// and share it (`LockClient::session_or_open`).
    pub(crate) opening: tokio::sync::Mutex<()>,
    /// Key -> cluster tag, as last learned (bounded: [`MAX_PLACES`]).
    pub(crate) places: Mutex<HashMap<String, u8>>,
    /// Re-entrancy: outermost holds by key.
    pub(crate) holds: Mutex<HashMap<String, Reentry>>,
    /// Re-entrancy of semaphore permits: the outermost permit grant by key (`permit.rs`).
    pub(crate) permits: Mutex<HashMap<String, crate::permit::PermitEntry>>,
    pub(crate) next_hold: AtomicU64,
    /// Open hold streams and their bound (`hold_stream`).
    pub(crate) hold_streams: crate::hold_stream::Budget,
    /// The metrics this client records into, if the application gave it some
    /// (`LockClient::with_metrics`).
    pub(crate) metrics: Option<Recorder>,
}

impl Inner {
    pub(crate) fn new(config: Config, metrics: Option<ClientMetrics>) -> Result<Self, LockError> {
        let rpc = Rpc::new(config.channel()?);
        let stamp = config.stamp();
        let instance = config
            .instance
            .clone()
            .unwrap_or_else(crate::connect::process_instance);
        Ok(Inner {
            instance,
            config,
            rpc: Mutex::new((rpc, stamp)),
            sessions: Mutex::new(HashMap::new()),
            opening: tokio::sync::Mutex::new(()),
            places: Mutex::new(HashMap::new()),
            holds: Mutex::new(HashMap::new()),
            permits: Mutex::new(HashMap::new()),
            next_hold: AtomicU64::new(1),
            hold_streams: crate::hold_stream::Budget::default(),
            metrics: metrics.map(Recorder::new),
        })
    }

    /// The service named `class` for `key` (kept for the metrics' `class` label only).
    pub(crate) fn learn_class(&self, key: &str, class: &str) {
        if let Some(rec) = &self.metrics {
            rec.learn(key, class);
        }
    }

    /// A hold was granted on `session` for hold `id` (of `key`'s class): the session
    /// records its end. Nothing without metrics.
    pub(crate) fn granted(&self, session: &Session, id: u64, key: &str) {
        if let Some(rec) = &self.metrics {
            session.granted(id, rec.class_of(key));
        }
    }

    /// The client's metrics, for a session it opens.
    pub(crate) fn session_metrics(&self) -> Option<ClientMetrics> {
        self.metrics.as_ref().map(|r| r.metrics.clone())
    }

    /// The RPC client, rebuilt when the credentials changed (a rotated SVID).
    pub(crate) fn rpc(&self) -> Result<Rpc<Channel>, LockError> {
        let mut guard = locked(&self.rpc);
        let stamp = self.config.stamp();
        if stamp != guard.1 {
            *guard = (Rpc::new(self.config.channel()?), stamp);
        }
        Ok(guard.0.clone())
    }

    pub(crate) async fn release_rpc(
        &self,
        key: &str,
        token: FencingToken,
        session: i64,
    ) -> Result<(), LockError> {
        let mut rpc = self.rpc()?;
        rpc.release(crate::stub::keyed(
            ReleaseRequest {
                key: key.to_owned(),
                token: token.as_u64(),
                session_id: session,
                ..Default::default()
            },
            key,
        ))
        .await?;
        Ok(())
    }
}

/// One CloseSession, bounded. A session the service no longer has is closed already.
pub(crate) async fn close_session(mut rpc: Rpc<Channel>, session_id: i64) -> Result<(), LockError> {
    let call = rpc.close_session(CloseSessionRequest { session_id });
    match tokio::time::timeout(CLOSE_TIMEOUT, call).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(status)) => match LockError::from_status(&status) {
            LockError::SessionExpired => Ok(()),
            e => Err(e),
        },
        Err(_) => Err(LockError::Unavailable("close session timed out".into())),
    }
}

impl Drop for Inner {
    /// The last handle is gone without `shutdown`: close what is still open, in the
    /// background (a Drop cannot wait), if a runtime is there to run it.
    fn drop(&mut self) {
        let ids: Vec<i64> = self
            .sessions
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
            .map(|(_, (s, _))| {
                s.close();
                s.id
            })
            .collect();
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let rpc = self
            .rpc
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .0
            .clone();
        if !ids.is_empty() {
            handle.spawn(async move {
                for id in ids {
                    let _ = close_session(rpc.clone(), id).await;
                }
            });
        }
    }
}
