//! The scale load's machinery, straight at one arbiter: sessions opened and renewed on
//! shared KeepAlive streams, keys held, and open-loop grant and floor loads.

use crate::env::Env;
use anyhow::Context as _;
use lock_client::proto::lock_client::LockClient;
use lock_config::proto::v1::{
    AcquireRequest, CloseSessionRequest, KeepAliveRequest, OpenSessionRequest, ReleaseRequest,
};
use lock_integration::as_from_edge;
use lock_integration::registry::{SCALE_PREFIX, SCALE_TTL, gate_id};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

/// How often each session renews: TTL/3, as lock-client does.
pub const RENEW_EVERY: Duration = Duration::from_secs(SCALE_TTL as u64 / 3);
/// Sessions one KeepAlive stream carries (the arbiter allows 16).
pub const SESSIONS_PER_STREAM: usize = 16;
/// Requests in flight while building sessions and holds.
pub const BUILD_CONCURRENCY: usize = 64;
/// Connections to the arbiter the load is spread over.
pub const CONNECTIONS: usize = 32;

/// A session opened straight at the arbiter, and the identity that owns it.
#[derive(Clone)]
pub struct Session {
    pub id: i64,
    pub identity: String,
}

pub struct Conns(Vec<LockClient<Channel>>);

impl Conns {
    pub async fn open(env: &Env) -> anyhow::Result<Self> {
        let mut v = Vec::with_capacity(CONNECTIONS);
        for _ in 0..CONNECTIONS {
            v.push(env.stack.arbiter_direct(0).await?);
        }
        Ok(Self(v))
    }

    pub fn get(&self, i: usize) -> LockClient<Channel> {
        self.0[i % self.0.len()].clone()
    }
}

/// Runs `f(i)` for `i` in `range` with at most `concurrency` in flight; fails when any call
/// fails or the whole batch is not done by `deadline`.
pub async fn bounded_batch<T, F, Fut>(
    range: std::ops::Range<usize>,
    concurrency: usize,
    deadline: Instant,
    f: F,
) -> anyhow::Result<Vec<T>>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut,
    Fut: Future<Output = anyhow::Result<T>> + Send + 'static,
{
    let total = range.len();
    let mut next = range.start;
    let mut running = JoinSet::new();
    let mut out = Vec::with_capacity(total);
    loop {
        while running.len() < concurrency && next < range.end {
            running.spawn(f(next));
            next += 1;
        }
        let Some(done) = tokio::time::timeout_at(deadline.into(), running.join_next())
            .await
            .map_err(|_| {
                anyhow::anyhow!("only {} of {total} done in the time allowed", out.len())
            })?
        else {
            return Ok(out);
        };
        out.push(done??);
    }
}

/// Opens sessions `range`, session `i` owned by gate identity `identities[i % len]`.
pub async fn open_sessions(
    conns: &Arc<Conns>,
    range: std::ops::Range<usize>,
    identities: std::ops::RangeInclusive<usize>,
    deadline: Instant,
) -> anyhow::Result<Vec<Session>> {
    let (first, count) = (*identities.start(), identities.count().max(1));
    bounded_batch(range, BUILD_CONCURRENCY, deadline, |i| {
        let mut c = conns.get(i);
        let identity = gate_id(first + i % count);
        async move {
            let key = format!("{SCALE_PREFIX}/s");
            let id = c
                .open_session(as_from_edge(
                    OpenSessionRequest { key: key.clone() },
                    Some(&key),
                    Some(&identity),
                ))
                .await?
                .into_inner()
                .session_id;
            Ok(Session { id, identity })
        }
    })
    .await
}

/// An Acquire of `key` by session `s`, with the headers the edge would set.
pub fn acquire_request(key: &str, s: &Session, wait_millis: u64) -> tonic::Request<AcquireRequest> {
    as_from_edge(
        AcquireRequest {
            key: key.to_owned(),
            session_id: s.id,
            wait_millis,
            ..Default::default()
        },
        Some(key),
        Some(&s.identity),
    )
}

/// Acquires keys `{prefix}/{i}` for `i` in `range`, key `i` by session `i % len`.
pub async fn hold_keys(
    conns: &Arc<Conns>,
    sessions: &Arc<Vec<Session>>,
    prefix: &str,
    range: std::ops::Range<usize>,
    deadline: Instant,
) -> anyhow::Result<()> {
    anyhow::ensure!(!sessions.is_empty(), "no sessions to hold keys with");
    bounded_batch(range, BUILD_CONCURRENCY, deadline, |i| {
        let mut c = conns.get(i);
        let s = sessions[i % sessions.len()].clone();
        let key = format!("{prefix}/{i}");
        async move {
            c.acquire(acquire_request(&key, &s, 0))
                .await
                .with_context(|| format!("holding {key}"))?;
            Ok(())
        }
    })
    .await
    .map(drop)
}

/// Closes every session; one already gone (expired) counts as closed. Returns how many
/// could not be closed (those expire with their TTL).
pub async fn close_sessions(conns: &Arc<Conns>, sessions: &Arc<Vec<Session>>) -> usize {
    let s = sessions.clone();
    let deadline = Instant::now() + Duration::from_secs(90);
    let closed = bounded_batch(0..s.len(), BUILD_CONCURRENCY, deadline, |i| {
        let mut c = conns.get(i);
        let s = s[i].clone();
        async move {
            let r = c
                .close_session(as_from_edge(
                    CloseSessionRequest { session_id: s.id },
                    None,
                    Some(&s.identity),
                ))
                .await;
            Ok(matches!(&r, Err(st) if st.code() != tonic::Code::NotFound))
        }
    })
    .await;
    match closed {
        Ok(failed) => failed.iter().filter(|f| **f).count(),
        Err(e) => {
            eprintln!("scale: closing sessions: {e:#} (the rest expire with their TTL)");
            sessions.len()
        }
    }
}

/// Renews sessions on KeepAlive streams (16 sessions of one identity per stream), each
/// session every [`RENEW_EVERY`], spread evenly; counts answers. Dropping it stops renewal.
#[derive(Default)]
pub struct Renewer {
    pub tasks: JoinSet<()>,
    pub ok: Arc<AtomicU64>,
    pub broken_streams: Arc<AtomicU64>,
    pub streams: usize,
}

impl Renewer {
    pub fn add(&mut self, conns: &Conns, sessions: &[Session]) {
        let mut by_identity: std::collections::BTreeMap<&str, Vec<i64>> = Default::default();
        for s in sessions {
            by_identity.entry(&s.identity).or_default().push(s.id);
        }
        for (identity, ids) in by_identity {
            for chunk in ids.chunks(SESSIONS_PER_STREAM) {
                self.stream(conns.get(self.streams), identity.to_owned(), chunk.to_vec());
            }
        }
    }

    pub fn stream(&mut self, mut c: LockClient<Channel>, identity: String, ids: Vec<i64>) {
        let n = self.streams;
        self.streams += 1;
        let (ok, broken) = (self.ok.clone(), self.broken_streams.clone());
        self.tasks.spawn(async move {
            let gap = RENEW_EVERY / u32::try_from(ids.len().max(1)).unwrap_or(1);
            // Streams start spread over one period so renewals do not come in waves.
            let mut phase = RENEW_EVERY.mul_f64((n as f64 * 0.618_034).fract());
            // A stream the arbiter ends (an etcd stall past its store timeout ends it) is
            // reopened, as lock-client does; the loop ends when the Renewer is dropped.
            loop {
                let (tx, rx) = mpsc::channel(SESSIONS_PER_STREAM);
                let ids = ids.clone();
                let sender = tokio::spawn(async move {
                    let mut tick = tokio::time::interval_at((Instant::now() + phase).into(), gap);
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    for id in ids.iter().cycle() {
                        tick.tick().await;
                        if tx.send(KeepAliveRequest { session_id: *id }).await.is_err() {
                            break;
                        }
                    }
                });
                let req = as_from_edge(ReceiverStream::new(rx), None, Some(&identity));
                if let Ok(resp) = c.keep_alive(req).await {
                    let mut inbound = resp.into_inner();
                    while let Ok(Some(_)) = inbound.message().await {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                }
                broken.fetch_add(1, Ordering::Relaxed);
                sender.abort();
                tokio::time::sleep(Duration::from_millis(200)).await;
                phase = Duration::ZERO;
            }
        });
    }
}

/// Raw etcd grant-shaped transactions (put-if-absent with a lease, then delete) per second
/// beside each step's grant load.
pub const FLOOR_RATE: u32 = 50;

/// Open loop of raw grant-shaped Txn + delete at `rate` for `window`; Txn latencies (µs).
pub async fn floor_load(
    env: &Env,
    rate: u32,
    window: Duration,
    step: usize,
) -> anyhow::Result<Vec<u64>> {
    let mut etcd = env.stack.etcd_client().await?;
    let lease = etcd.lease_grant(60, None).await?.id();
    let mut tasks: JoinSet<anyhow::Result<u64>> = JoinSet::new();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate.max(1))));
    let end = Instant::now() + window;
    let mut i = 0usize;
    while Instant::now() < end && tasks.len() < 1_000 {
        tick.tick().await;
        let mut kv = etcd.kv_client();
        let key = format!("/bench/scale-floor/{step}/{i}");
        i += 1;
        tasks.spawn(async move {
            let t = Instant::now();
            kv.txn(crate::ops::grant_shaped_txn(&key, lease)).await?;
            let us = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
            kv.delete(key.as_str(), None).await?;
            Ok(us)
        });
    }
    let mut lat = Vec::new();
    let drain = Instant::now() + Duration::from_secs(15);
    while let Ok(Some(r)) = tokio::time::timeout_at(drain.into(), tasks.join_next()).await {
        lat.push(r??);
    }
    tasks.abort_all();
    Ok(lat)
}

pub struct GrantLoad {
    pub latencies_us: Vec<u64>,
    pub failed: u64,
    pub shed: u64,
}

/// Open loop: a grant (Acquire of a fresh key, then its Release) every 1/rate s for
/// `window`; a grant is shed rather than queued in the load generator when 1,000 are
/// already in flight. Latency is the Acquire's.
pub async fn grant_load(
    conns: &Arc<Conns>,
    sessions: &Arc<Vec<Session>>,
    rate: u32,
    window: Duration,
    step: usize,
) -> GrantLoad {
    const MAX_IN_FLIGHT: usize = 1_000;
    let mut out = GrantLoad {
        latencies_us: Vec::new(),
        failed: 0,
        shed: 0,
    };
    if sessions.is_empty() || rate == 0 {
        return out;
    }
    let mut tasks: JoinSet<anyhow::Result<u64>> = JoinSet::new();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let end = Instant::now() + window;
    let mut i = 0usize;
    let reap = |r: Option<Result<anyhow::Result<u64>, tokio::task::JoinError>>,
                out: &mut GrantLoad| match r {
        Some(Ok(Ok(us))) => out.latencies_us.push(us),
        Some(_) => out.failed += 1,
        None => {}
    };
    while Instant::now() < end {
        tick.tick().await;
        while let Some(r) = tasks.try_join_next() {
            reap(Some(r), &mut out);
        }
        if tasks.len() >= MAX_IN_FLIGHT {
            out.shed += 1;
            continue;
        }
        let mut c = conns.get(i);
        let s = sessions[i % sessions.len()].clone();
        let key = format!("{SCALE_PREFIX}/g{step}/{i}");
        i += 1;
        tasks.spawn(async move {
            let t = Instant::now();
            let token = c
                .acquire(acquire_request(&key, &s, 0))
                .await?
                .into_inner()
                .token;
            let us = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
            c.release(as_from_edge(
                ReleaseRequest {
                    key: key.clone(),
                    token,
                    session_id: s.id,
                    ..Default::default()
                },
                Some(&key),
                Some(&s.identity),
            ))
            .await?;
            Ok(us)
        });
    }
    // Grants started in the window finish (bounded); their latencies count.
    let drain = Instant::now() + Duration::from_secs(15);
    while !tasks.is_empty() {
        match tokio::time::timeout_at(drain.into(), tasks.join_next()).await {
            Ok(r) => reap(r, &mut out),
            Err(_) => {
                out.failed += tasks.len() as u64;
                tasks.abort_all();
                break;
            }
        }
    }
    out
}
