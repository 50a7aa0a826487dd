//! A session: one lease per TTL for this process, renewed by one KeepAlive stream however
//! many holds it carries (ADR-10). Its task sends a keepalive every TTL/3, records the send
//! time of each success, and fences every hold of the session at the deadline.

use crate::error::LockError;
use crate::liveness::Liveness;
use crate::metrics::{ClientMetrics, HoldEnd};
use crate::proto::lock_client::LockClient as Rpc;
use lock_config::proto::v1::KeepAliveRequest;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tonic::transport::Channel;

pub type FenceFn = Arc<dyn Fn() + Send + Sync>;

/// The request sender and reply stream of one KeepAlive call.
type KeepAliveStream = (
    mpsc::Sender<KeepAliveRequest>,
    tonic::Streaming<lock_config::proto::v1::KeepAliveResponse>,
);

pub struct Session {
    pub id: i64,
    state: Mutex<State>,
    /// The client's metrics, if it has any: the session is where every hold ends (release,
    /// fence, close), so it records how each hold on it ended.
    metrics: Option<ClientMetrics>,
}

struct State {
    live: Liveness,
    /// on_fence callbacks of the holds attached to this session, by hold id.
    fences: HashMap<u64, FenceFn>,
    /// The holds on this session at the service (one per grant: a nested acquire adds
    /// none), by the id of the hold the grant was made for: their class and grant time.
    /// Filled only when the client has metrics. Each leaves it once, by whichever end comes
    /// first, so each hold's end is recorded once.
    grants: HashMap<u64, (Arc<str>, Instant)>,
}

impl Session {
    pub fn new(
        id: i64,
        ttl: Duration,
        opened_at: Instant,
        metrics: Option<ClientMetrics>,
    ) -> Arc<Self> {
        Arc::new(Self {
            id,
            state: Mutex::new(State {
                live: Liveness::new(ttl, opened_at),
                fences: HashMap::new(),
                grants: HashMap::new(),
            }),
            metrics,
        })
    }

    /// Runs `f` on the state, poisoned or not: a poisoned state still holds the fences
    /// and the deadline, and reading it as empty would stop the renewals without running a
    /// hold's `on_fence` (its owner would work on, untold, past the lease).
    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut crate::state::locked(&self.state))
    }

    pub fn ttl(&self) -> Duration {
        self.with(|s| s.live.ttl())
    }

    pub fn can_start(&self) -> bool {
        self.with(|s| s.live.can_start(Instant::now()))
    }

    pub fn remaining(&self) -> Duration {
        self.with(|s| s.live.remaining(Instant::now()))
    }

    pub fn is_fenced(&self) -> bool {
        self.with(|s| s.live.is_fenced())
    }

    /// None while the session has covered every instant up to now (`Liveness::covered_until`).
    pub fn lapse(&self) -> Option<crate::liveness::Lapse> {
        let now = Instant::now();
        self.with(|s| s.live.covered_until(now)).err()
    }

    pub fn attach(&self, hold: u64, on_fence: FenceFn) {
        self.with(|s| s.fences.insert(hold, on_fence));
    }

    pub fn detach(&self, hold: u64) {
        self.with(|s| s.fences.remove(&hold));
    }

    /// The service granted a hold of `class` on this session, for hold `id`: its end is
    /// recorded by [`Session::released`], the fence or the close. Nothing without metrics.
    pub fn granted(&self, id: u64, class: Arc<str>) {
        if self.metrics.is_some() {
            let at = Instant::now();
            self.with(|s| s.grants.insert(id, (class, at)));
        }
    }

    /// Its owner released the hold granted for `id` (recorded unless a fence or a close
    /// ended it first).
    pub fn released(&self, id: u64) {
        let Some(metrics) = &self.metrics else {
            return;
        };
        if let Some((class, at)) = self.with(|s| s.grants.remove(&id)) {
            metrics.hold_ended(class, at, HoldEnd::Released);
        }
    }

    /// Records the end of every hold still on the session (outside the lock).
    fn end_all(&self, grants: Vec<(Arc<str>, Instant)>, end: HoldEnd) {
        if let Some(metrics) = &self.metrics {
            for (class, at) in grants {
                metrics.hold_ended(class, at, end);
            }
        }
    }

    /// Closed by its owner (`LockClient::shutdown`): dead from now on, and the holds'
    /// `on_fence` callbacks do not run — nothing was lost that the owner did not end.
    pub fn close(&self) {
        let grants = self.with(|s| {
            s.live.expire();
            s.fences.clear();
            s.grants.drain().map(|(_, g)| g).collect()
        });
        self.end_all(grants, HoldEnd::Shutdown);
    }

    /// Fences every hold once (callbacks run outside the lock).
    fn fence_all(&self, due: impl FnOnce(&mut Liveness) -> bool) {
        let (callbacks, grants): (Vec<FenceFn>, Vec<_>) = self.with(|s| {
            if due(&mut s.live) {
                (
                    s.fences.drain().map(|(_, f)| f).collect(),
                    s.grants.drain().map(|(_, g)| g).collect(),
                )
            } else {
                Default::default()
            }
        });
        // The holds were lost where their callbacks run: recorded first, so a callback
        // that reads the metrics sees its own hold counted.
        self.end_all(grants, HoldEnd::Fenced);
        for f in callbacks {
            f();
        }
    }

    /// Renews the session until it is fenced or `stop` is dropped.
    pub async fn keep_alive(self: Arc<Self>, rpc: Rpc<Channel>, mut stop: mpsc::Receiver<()>) {
        let period = self.ttl() / 3;
        let mut stream: Option<KeepAliveStream> = None;
        let mut next = Instant::now() + period;
        loop {
            let deadline = self.with(|s| s.live.deadline());
            let wake = next.min(deadline);
            tokio::select! {
                _ = tokio::time::sleep_until(wake.into()) => {}
                _ = stop.recv() => return,
            }
            let now = Instant::now();
            self.fence_all(|l| l.fence_due(now));
            if self.is_fenced() {
                return;
            }
            if now < next {
                continue;
            }
            let sent = Instant::now();
            let wait = period.min(deadline.saturating_duration_since(sent));
            match renew(&rpc, &mut stream, self.id, wait).await {
                Ok(()) => {
                    self.with(|s| s.live.renewed(sent));
                    next = sent + period;
                }
                Err(LockError::SessionExpired) => {
                    self.fence_all(Liveness::expire);
                    return;
                }
                Err(e) => {
                    tracing::warn!(session = self.id, error = %e, "keepalive failed");
                    self.with(|s| s.live.failed());
                    stream = None;
                    // Retry sooner than a full period while the deadline allows.
                    next = Instant::now() + period / 3;
                }
            }
        }
    }
}

/// One keepalive round trip on the session's stream, opening it if needed.
async fn renew(
    rpc: &Rpc<Channel>,
    stream: &mut Option<(
        mpsc::Sender<KeepAliveRequest>,
        tonic::Streaming<lock_config::proto::v1::KeepAliveResponse>,
    )>,
    session_id: i64,
    wait: Duration,
) -> Result<(), LockError> {
    let round = async {
        // A stream the server ended cleanly (an arbiter draining for a restart) is reopened
        // at once, through the edge, on another arbiter: one retry inside the same wait,
        // so a rolling update does not read as a failed renewal.
        for retry in [true, false] {
            let mut queued = false;
            if stream.is_none() {
                // The renewal is queued before the stream is opened, so it leaves with the
                // stream's headers: awaiting the response headers first would cost one
                // more round trip before the renewal is even sent, which on a slow link
                // (1.2 s each way, conformance `deadline-cut-link`) is the whole period.
                let (tx, rx) = mpsc::channel(1);
                if tx.send(KeepAliveRequest { session_id }).await.is_err() {
                    return Err(LockError::Unavailable("keepalive stream closed".into()));
                }
                queued = true;
                let mut rpc = rpc.clone();
                let replies = rpc
                    .keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx))
                    .await?
                    .into_inner();
                *stream = Some((tx, replies));
            }
            let Some((tx, replies)) = stream.as_mut() else {
                return Err(LockError::Unavailable("no keepalive stream".into()));
            };
            if !queued && tx.send(KeepAliveRequest { session_id }).await.is_err() {
                *stream = None;
                if retry {
                    continue;
                }
                return Err(LockError::Unavailable("keepalive stream closed".into()));
            }
            match replies.message().await? {
                Some(r) if r.ttl_seconds > 0 => return Ok(()),
                Some(_) => return Err(LockError::SessionExpired),
                None if retry => *stream = None,
                None => return Err(LockError::Unavailable("keepalive stream ended".into())),
            }
        }
        Err(LockError::Unavailable("keepalive stream ended".into()))
    };
    match tokio::time::timeout(wait, round).await {
        Ok(r) => r,
        Err(_) => Err(LockError::Unavailable("keepalive timed out".into())),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn a_poisoned_session_is_read_as_it_is_and_still_fences_its_holds() {
        let s = Session::new(7, Duration::from_secs(30), Instant::now(), None);
        let fired = Arc::new(AtomicUsize::new(0));
        let f = fired.clone();
        s.attach(1, Arc::new(move || _ = f.fetch_add(1, Ordering::SeqCst)));
        let poisoner = s.clone();
        let _ = std::thread::spawn(move || {
            let _state = poisoner.state.lock();
            panic!("poisoning the session's state on purpose");
        })
        .join();
        assert!(s.state.is_poisoned());
        // Its liveness is read as it is, not as fenced...
        assert!(!s.is_fenced() && s.can_start() && s.lapse().is_none());
        // ...and a fence still reaches the hold's owner, once.
        s.fence_all(Liveness::expire);
        s.fence_all(Liveness::expire);
        assert_eq!(fired.load(Ordering::SeqCst), 1);
        assert!(s.is_fenced());
    }
}
