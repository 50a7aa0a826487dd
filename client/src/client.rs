//! The client: sessions per TTL and cluster, acquire with waiting and retries, re-entrancy.

use crate::connect::Config;
use crate::error::LockError;
use crate::hold::Hold;
use crate::hold_stream::{self, Link};
use crate::metrics::{ClientMetrics, WaitTimer};
use crate::observe::Observation;
use crate::session::{FenceFn, Session};
use crate::state::{Inner, Reentry, Running, close_session, locked};
use lock_config::FencingToken;
use lock_config::proto::v1::{AcquireRequest, OpenSessionRequest};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::mpsc;

/// Keys whose cluster the client remembers (learned from WRONG_SESSION_PLACE and grants);
/// past it the memory starts over (a miss costs one round trip, never a wrong answer).
const MAX_PLACES: usize = 4096;
#[derive(Clone)]
pub struct LockClient {
    pub(crate) inner: Arc<Inner>,
}

impl LockClient {
    /// Builds the client; connects lazily on first use.
    pub fn new(config: Config) -> Result<Self, LockError> {
        Ok(Self {
            inner: Arc::new(Inner::new(config, None)?),
        })
    }

    /// Builds the client recording into `metrics` (waits, hold times, lost holds; see
    /// [`ClientMetrics`]). Give every client of the process a clone of one
    /// [`ClientMetrics::register`] result: they share its families.
    ///
    /// A constructor rather than a [`Config`] field: other crates build `Config` as a struct
    /// literal, which a new field would break.
    pub fn with_metrics(config: Config, metrics: ClientMetrics) -> Result<Self, LockError> {
        Ok(Self {
            inner: Arc::new(Inner::new(config, Some(metrics))?),
        })
    }

    /// The instance this client sends with OpenSession (`lock-instance`): its config's,
    /// else the one [`process_instance`](crate::process_instance) drew when it was built
    /// (`<LOCK_INSTANCE or random>:<pid>:<n>`).
    pub fn instance(&self) -> &str {
        &self.inner.instance
    }

    /// Ends every hold of this client now and closes its sessions. The keepalive tasks
    /// stop, and one CloseSession per session revokes its etcd lease, which removes all of
    /// the session's holds in one committed entry: the next waiter is granted at once
    /// instead of when the TTL runs out. Holds of this client are dead afterwards (their
    /// `release` does nothing) and their `on_fence` does not run: their owner ended them.
    ///
    /// Call it before the process exits. Without it, dropping the last handle to the
    /// client (including every [`Hold`]) closes the sessions in the background while a
    /// Tokio runtime is running; otherwise the holds lapse when the TTL passes unrenewed.
    pub async fn shutdown(&self) -> Result<(), LockError> {
        // A panic elsewhere while the map was locked poisons it, but the sessions in it are
        // still open: close them all the same (it skipped them and answered Ok before).
        let sessions: Vec<Running> = locked(&self.inner.sessions)
            .drain()
            .map(|(_, r)| r)
            .collect();
        locked(&self.inner.holds).clear();
        let mut first_error = None;
        for (session, stop) in sessions {
            drop(stop);
            session.close();
            let rpc = self.inner.rpc()?;
            if let Err(e) = close_session(rpc, session.id).await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// At most `max` holds of this client keep their `Hold` stream open (default
    /// [`crate::DEFAULT_MAX_HOLD_STREAMS`]); past it acquires use the unary calls. 0: unary
    /// calls only (a proxy on the way that does not carry bidirectional streams).
    pub fn limit_hold_streams(&self, max: usize) {
        self.inner.hold_streams.set_max(max);
    }

    /// Hold streams open now (holds whose release will travel on their own stream).
    pub fn open_hold_streams(&self) -> usize {
        self.inner.hold_streams.open()
    }

    /// Observes `key`: its holder now, then every change (granted, released, expired,
    /// closed, forced, revoked), resumed across reconnects. A hint, never a grant. Changes
    /// about a hold on this client's own session carry its token; other observers, a
    /// sibling replica of the same identity included, never see it.
    pub fn observe(&self, key: &str) -> Observation {
        let client = self.clone();
        let owned = key.to_owned();
        let own_session = Box::new(move || client.own_session(&owned).unwrap_or(0));
        Observation::new(self.inner.clone(), own_session, key)
    }

    /// The session this client would hold `key` on: the one it holds it on, else its
    /// session for the key's cluster.
    pub(crate) fn own_session(&self, key: &str) -> Option<i64> {
        let held = locked(&self.inner.holds).get(key).map(|e| e.session.id);
        held.or_else(|| self.session_for_key(key).map(|s| s.id))
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
        // Timed only past the nested case: that one made no call.
        let timer = WaitTimer::start(self.inner.metrics.as_ref(), key);
        let r = self.acquire_call(key, wait, id, on_fence).await;
        timer.finish(&r);
        r
    }

    /// The outermost acquire of `key` (the service answers it), for hold `id`; its wait is
    /// recorded by the caller ([`LockClient::acquire`], or a campaign as a whole).
    pub(crate) async fn acquire_call(
        &self,
        key: &str,
        wait: Duration,
        id: u64,
        on_fence: FenceFn,
    ) -> Result<Hold, LockError> {
        // Bounded so no `wait` from input can overflow the deadline: a day is longer than
        // any wait the service grants (300 s).
        let deadline = Instant::now() + wait.min(Duration::from_secs(24 * 3600));
        let inner = self.inner.clone();
        let ((token, class, link), s) = self
            .on_session(key, deadline, |s, left| {
                let inner = inner.clone();
                async move {
                    let mut rpc = inner.rpc()?;
                    let req = AcquireRequest {
                        key: key.to_owned(),
                        session_id: s.id,
                        wait_millis: u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
                        ..Default::default()
                    };
                    hold_stream::acquire(&mut rpc, &inner.hold_streams, req).await
                }
            })
            .await?;
        self.inner.learn_class(key, &class);
        Ok(self.held(key, id, token, s, link, on_fence))
    }

    /// A nested hold of `key` if this client holds it (no call made), with `on_fence`
    /// attached for hold `id`.
    pub(crate) fn reenter(&self, key: &str, id: u64, on_fence: FenceFn) -> Option<Hold> {
        let mut holds = locked(&self.inner.holds);
        let entry = holds.get_mut(key)?;
        if entry.session.is_fenced() {
            holds.remove(key);
            return None;
        }
        entry.count += 1;
        entry.session.attach(id, on_fence);
        Some(Hold::new(
            self.inner.clone(),
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
        link: Option<Link>,
        on_fence: FenceFn,
    ) -> Hold {
        s.attach(id, on_fence);
        self.inner.granted(&s, id, key);
        locked(&self.inner.holds).insert(
            key.to_owned(),
            Reentry {
                count: 1,
                grant: id,
                token,
                session: s.clone(),
                link,
            },
        );
        Hold::new(self.inner.clone(), key, id, token, s)
    }

    fn any_session(&self) -> Option<Arc<Session>> {
        let sessions = locked(&self.inner.sessions);
        sessions
            .values()
            .map(|(s, _)| s.clone())
            .find(|s| !s.is_fenced())
    }

    /// A live session with this TTL, on the cluster with `tag` if given.
    pub(crate) fn session_for(&self, ttl_seconds: u32, tag: Option<u8>) -> Option<Arc<Session>> {
        let sessions = locked(&self.inner.sessions);
        sessions
            .iter()
            .filter(|((ttl, t), _)| *ttl == ttl_seconds && tag.is_none_or(|tag| tag == *t))
            .map(|(_, (s, _))| s.clone())
            .find(|s| !s.is_fenced())
    }

    /// A live session on the cluster `key` was last seen on, else any.
    pub(crate) fn session_for_key(&self, key: &str) -> Option<Arc<Session>> {
        let Some(tag) = self.place_of(key) else {
            return self.any_session();
        };
        let sessions = locked(&self.inner.sessions);
        sessions
            .iter()
            .filter(|((_, t), _)| *t == tag)
            .map(|(_, (s, _))| s.clone())
            .find(|s| !s.is_fenced())
    }

    pub(crate) fn place_of(&self, key: &str) -> Option<u8> {
        locked(&self.inner.places).get(key).copied()
    }

    pub(crate) fn learn_place(&self, key: &str, tag: u8) {
        let mut places = locked(&self.inner.places);
        if places.len() >= MAX_PLACES && !places.contains_key(key) {
            places.clear();
        }
        places.insert(key.to_owned(), tag);
    }

    pub(crate) fn forget_session(&self, s: &Arc<Session>) {
        locked(&self.inner.sessions).retain(|_, (x, _)| !Arc::ptr_eq(x, s));
    }

    /// The session to use when none was at hand: one another acquire opened meanwhile, or
    /// a new one. Opening is serialised per client, so acquires racing on a client without
    /// a session share the one opened first (ADR-10: one session per TTL per client,
    /// however many holds; without this, 25 concurrent first acquires opened 23 sessions,
    /// each renewed: `make bench`'s renewal row, 500 holds, 13.8 keepalives/s at etcd).
    pub(crate) async fn session_or_open(
        &self,
        key: &str,
        wanted: Option<(u32, Option<u8>)>,
    ) -> Result<Arc<Session>, LockError> {
        let _opening = self.inner.opening.lock().await;
        let found = match wanted {
            Some((ttl, tag)) => self.session_for(ttl, tag),
            None => self.session_for_key(key),
        };
        match found {
            Some(s) => Ok(s),
            None => self.open_session(key).await,
        }
    }

    /// Opens the session for `key`'s class (its TTL) and starts renewing it.
    async fn open_session(&self, key: &str) -> Result<Arc<Session>, LockError> {
        let sent = Instant::now();
        let mut rpc = self.inner.rpc()?;
        let req = crate::stub::keyed(
            OpenSessionRequest {
                key: key.to_owned(),
            },
            key,
        );
        let r = rpc
            .open_session(crate::stub::with_instance(req, &self.inner.instance))
            .await?
            .into_inner();
        self.inner.learn_class(key, &r.class_name);
        let session = Session::new(
            r.session_id,
            Duration::from_secs(u64::from(r.ttl_seconds)),
            sent,
            self.inner.session_metrics(),
        );
        let (stop, stopped) = mpsc::channel(1);
        tokio::spawn(session.clone().keep_alive(rpc, stopped));
        let tag = lock_config::shards::tag_of(r.session_id);
        locked(&self.inner.sessions).insert((r.ttl_seconds, tag), (session.clone(), stop));
        Ok(session)
    }
}

/// `d` with up to ±25 % jitter, so retrying clients do not align.
pub(crate) fn jitter(d: Duration) -> Duration {
    let n = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |t| t.subsec_nanos());
    let quarter = d / 4;
    d - quarter + quarter * 2 * (n % 1000) / 1000
}

#[cfg(test)]
mod tests;
