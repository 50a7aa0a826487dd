//! The shard gate's workers: each a client straight at one arbiter (with the edge's
//! headers), taking and releasing random keys of one namespace with a session per cluster,
//! every call recorded in the history.

use crate::history::{Event, Kind, Phase, Recorder, mono_ns};
use lock_config::Reason;
use lock_config::proto::v1::{
    AcquireRequest, CloseSessionRequest, OpenSessionRequest, ReleaseRequest,
};
use lock_config::shards::tag_of;
use lock_integration::{as_from_edge, reason_of};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const IDENTITY: &str = "spiffe://dev.lock.local/ns/orders/sa/worker";

/// Open moves: [start, end) in monotonic ns, end 0 while running.
pub(super) type Windows = Arc<Mutex<Vec<(u64, u64)>>>;

pub(super) struct Shared {
    pub(super) rec: Recorder,
    pub(super) op: AtomicU64,
    pub(super) stop: Mutex<Instant>,
    pub(super) windows: Windows,
    pub(super) moving_outside: AtomicU64,
    pub(super) moving: AtomicU64,
    pub(super) replaced: AtomicU64,
}

impl Shared {
    pub(super) fn event(&self, c: u32, op: u64, ph: Phase, f: Kind, key: &str) -> Event {
        Event {
            c,
            op,
            t: mono_ns(),
            ph,
            f,
            key: Some(key.to_owned()),
            session: None,
            token: None,
            why: None,
            via: None,
            served: None,
            rev: None,
            set: None,
            shared: false,
            permit: None,
        }
    }

    pub(super) fn stopped(&self) -> bool {
        self.stop.lock().map_or(true, |s| Instant::now() >= *s)
    }

    /// Did [sent, answered] miss every move?
    pub(super) fn outside_moves(&self, sent: u64, answered: u64) -> bool {
        self.windows.lock().is_ok_and(|w| {
            w.iter()
                .all(|(s, e)| answered < *s || (*e != 0 && sent > *e))
        })
    }
}

pub(super) type Rpc = lock_client::proto::lock_client::LockClient<tonic::transport::Channel>;

/// One worker (client `c`): a session per cluster (replaced every 15 s), random keys,
/// bounded in count; stops between operations only, never holding a key unreleased.
/// Client `c`'s identity: workers pair up on one (a pair's contention is LEAKED_HOLD,
/// others queue).
pub(super) fn identity_of(c: u32) -> String {
    format!("{IDENTITY}-{}", c % 3)
}

pub(super) async fn run(c: u32, mut rpc: Rpc, keys: Arc<Vec<String>>, s: Arc<Shared>) {
    let me = identity_of(c);
    let me = Some(me.as_str());
    let mut sessions: HashMap<u8, (i64, Instant)> = HashMap::new();
    let mut places: HashMap<String, u8> = HashMap::new();
    let mut n = u64::from(c) + 1;
    for _ in 0..100_000 {
        if s.stopped() {
            break;
        }
        n = n
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let key = &keys[usize::try_from(n >> 33).unwrap_or(0) % keys.len()];
        let known = places.get(key).and_then(|t| sessions.get(t)).copied();
        let session = match known {
            Some((id, opened)) if opened.elapsed() < Duration::from_secs(15) => id,
            stale => {
                if let Some((old, _)) = stale {
                    sessions.retain(|_, (id, _)| *id != old);
                    let close = CloseSessionRequest { session_id: old };
                    let _ = rpc.close_session(as_from_edge(close, None, me)).await;
                }
                let open = OpenSessionRequest { key: key.clone() };
                match rpc.open_session(as_from_edge(open, Some(key), me)).await {
                    Ok(r) => {
                        let id = r.into_inner().session_id;
                        sessions.insert(tag_of(id), (id, Instant::now()));
                        places.insert(key.clone(), tag_of(id));
                        id
                    }
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                }
            }
        };
        let op = s.op.fetch_add(1, Ordering::Relaxed);
        let mut inv = s.event(c, op, Phase::Invoke, Kind::Acquire, key);
        inv.session = Some(session);
        let sent = inv.t;
        s.rec.record(&inv);
        let req = AcquireRequest {
            key: key.clone(),
            session_id: session,
            wait_millis: 500,
            ..Default::default()
        };
        let answer = rpc.acquire(as_from_edge(req, Some(key), me)).await;
        let mut done = s.event(c, op, Phase::Ok, Kind::Acquire, key);
        match answer {
            Ok(r) => {
                let token = r.into_inner().token;
                done.token = Some(token);
                s.rec.record(&done);
                tokio::time::sleep(Duration::from_millis(5)).await;
                let op = s.op.fetch_add(1, Ordering::Relaxed);
                let mut inv = s.event(c, op, Phase::Invoke, Kind::Release, key);
                inv.token = Some(token);
                inv.session = Some(session);
                s.rec.record(&inv);
                let rel = ReleaseRequest {
                    key: key.clone(),
                    token,
                    session_id: session,
                    ..Default::default()
                };
                let r = rpc.release(as_from_edge(rel, Some(key), me)).await;
                let mut done = s.event(c, op, Phase::Ok, Kind::Release, key);
                if let Err(e) = r {
                    done.ph = Phase::Info;
                    done.why = Some(e.message().to_owned());
                }
                s.rec.record(&done);
            }
            Err(status) => {
                let reason = reason_of(&status);
                // As every gate worker records a refusal (`refusal.rs`).
                (done.ph, done.why) = match crate::refusal::of_status(&status) {
                    crate::refusal::Refused::Fail(why) => (Phase::Fail, Some(why)),
                    crate::refusal::Refused::Unknown(why) => (Phase::Info, Some(why)),
                };
                s.rec.record(&done);
                match reason {
                    Some((Reason::WrongSessionPlace, meta)) => {
                        let cluster = meta.get("cluster").cloned().unwrap_or_default();
                        places.insert(key.clone(), lock_config::shards::lease_tag(&cluster));
                        s.replaced.fetch_add(1, Ordering::Relaxed);
                    }
                    Some((Reason::Moving, _)) => {
                        s.moving.fetch_add(1, Ordering::Relaxed);
                        if s.outside_moves(sent, done.t) {
                            s.moving_outside.fetch_add(1, Ordering::Relaxed);
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Some((Reason::SessionExpired, _)) => {
                        sessions.retain(|_, (id, _)| *id != session);
                    }
                    Some((Reason::Held | Reason::HeldDeadline | Reason::LeakedHold, _)) => {}
                    // No answer at all (its arbiter killed, the connection refused): wait
                    // for the restart rather than fill the history with unknown outcomes,
                    // each of which the linearizability search must place.
                    None => tokio::time::sleep(Duration::from_millis(250)).await,
                    _ => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        }
    }
    // Stopping closes every session, as an exiting process's client does: a grant whose
    // answer was lost (a fault) ends with it, so "nothing left held" holds.
    for (id, _) in sessions.into_values() {
        let close = CloseSessionRequest { session_id: id };
        for _ in 0..20 {
            if rpc
                .close_session(as_from_edge(close, None, me))
                .await
                .is_ok()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}
