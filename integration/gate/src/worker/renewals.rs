//! A client's session and the KeepAlive stream that renews it, every renewal recorded.

use super::CALL_TIMEOUT;
use crate::history::{Event, Kind, Phase, Recorder, mono_ns};
use lock_client::proto::lock_client::LockClient;
use lock_config::proto::v1::{KeepAliveRequest, OpenSessionResponse};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tonic::transport::Channel;

pub(super) struct Session {
    pub(super) id: i64,
    /// Set when a renewal says the session is gone; the keepalive task stops.
    pub(super) dead: Arc<AtomicBool>,
    /// Set while the holder is stalled: no renewal is sent (the stream stays open and
    /// silent, as in a process paused by GC), so the store expires the session.
    pub(super) stalled: Arc<AtomicBool>,
}

impl Session {
    /// The session `resp` opened for client `id`, renewed from now on by its own KeepAlive
    /// stream (recorded as client `keepalive_client`) every TTL/3.
    pub(super) fn start(
        edge: &LockClient<Channel>,
        rec: &Arc<Recorder>,
        keepalive_client: u32,
        resp: &OpenSessionResponse,
    ) -> Self {
        let dead = Arc::new(AtomicBool::new(false));
        let stalled = Arc::new(AtomicBool::new(false));
        tokio::spawn(renew(
            edge.clone(),
            rec.clone(),
            keepalive_client,
            resp.session_id,
            Duration::from_millis(u64::from(resp.ttl_seconds.max(1)) * 1000 / 3),
            dead.clone(),
            stalled.clone(),
        ));
        Self {
            id: resp.session_id,
            dead,
            stalled,
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.dead.store(true, Ordering::SeqCst);
    }
}

/// The session's KeepAlive stream, renewing every `every`, each renewal recorded as an
/// operation of client `id`. Reopens a broken stream; stops when the session is gone.
async fn renew(
    mut edge: LockClient<Channel>,
    rec: Arc<Recorder>,
    id: u32,
    session: i64,
    every: Duration,
    dead: Arc<AtomicBool>,
    stalled: Arc<AtomicBool>,
) {
    let mut op = 0u64;
    let event = |op: u64, ph: Phase, why: Option<String>| Event {
        c: id,
        op,
        t: mono_ns(),
        ph,
        f: Kind::KeepAlive,
        key: None,
        session: Some(session),
        token: None,
        why,
        via: Some("edge".into()),
        served: None,
        rev: None,
        set: None,
        shared: false,
        permit: None,
    };
    while !dead.load(Ordering::SeqCst) {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let stream = tokio::time::timeout(
            CALL_TIMEOUT,
            edge.keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx)),
        )
        .await;
        let mut replies = match stream {
            Ok(Ok(r)) => r.into_inner(),
            _ => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        while !dead.load(Ordering::SeqCst) {
            if stalled.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            op += 1;
            rec.record(&event(op, Phase::Invoke, None));
            if tx
                .send(KeepAliveRequest {
                    session_id: session,
                })
                .await
                .is_err()
            {
                rec.record(&event(op, Phase::Info, Some("stream closed".into())));
                break;
            }
            match tokio::time::timeout(CALL_TIMEOUT, replies.message()).await {
                Ok(Ok(Some(r))) if r.ttl_seconds > 0 => rec.record(&event(op, Phase::Ok, None)),
                Ok(Ok(Some(_))) => {
                    rec.record(&event(op, Phase::Fail, Some("SESSION_EXPIRED".into())));
                    dead.store(true, Ordering::SeqCst);
                }
                Ok(Err(status)) => {
                    let why =
                        lock_integration::reason_of(&status).map(|(r, _)| r.as_str().to_owned());
                    if why.as_deref() == Some("SESSION_EXPIRED") {
                        rec.record(&event(op, Phase::Fail, why));
                        dead.store(true, Ordering::SeqCst);
                    } else {
                        rec.record(&event(op, Phase::Info, why));
                    }
                    break;
                }
                _ => {
                    rec.record(&event(op, Phase::Info, Some("stream broken".into())));
                    break;
                }
            }
            tokio::time::sleep(every).await;
        }
    }
}
