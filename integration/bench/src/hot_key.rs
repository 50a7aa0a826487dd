//! One hot key, many waiters: every waiter asks for the key again as soon as it has
//! released it, so each handoff is a release followed by the next waiter's grant.
//! Reported: handoffs per second, handoff latency (a release's call to the next grant's
//! answer), and what each handoff cost etcd (raft proposals; for the arbiter also gRPC Txns
//! and so grant attempts per handoff).

use crate::env::Env;
use crate::observe::{CpuPerOp, Watched, cpu_by_role};
use crate::ops::System;
use anyhow::Context as _;
use etcd_client::LockOptions;
use lock_config::proto::v1::{AcquireRequest, OpenSessionRequest, ReleaseRequest};
use lock_integration::registry::{BENCH_PREFIX, gate_id};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HotSystem {
    V3Lock,
    ArbiterDirect,
    /// lock-client's way: each waiter's lock one `Hold` stream.
    FullPath,
    /// Two unary calls per lock.
    FullPathUnary,
    Postgres,
}

impl HotSystem {
    pub const ALL: [HotSystem; 5] = [
        HotSystem::V3Lock,
        HotSystem::ArbiterDirect,
        HotSystem::FullPath,
        HotSystem::FullPathUnary,
        HotSystem::Postgres,
    ];

    pub fn name(self) -> &'static str {
        match self {
            HotSystem::V3Lock => "etcd v3lock",
            HotSystem::ArbiterDirect => "arbiter direct",
            HotSystem::FullPath => "full path (Envoy+filter+arbiter), hold stream",
            HotSystem::FullPathUnary => "full path, unary Acquire + Release",
            HotSystem::Postgres => "PostgreSQL advisory",
        }
    }
}

pub struct HotCell {
    pub handoffs: usize,
    pub secs: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub curve: Vec<u64>,
    /// etcd raft proposals per handoff (None: not an etcd system).
    pub proposals: Option<f64>,
    /// gRPC Txn calls per handoff (the arbiter's grant and release transactions).
    pub txns: Option<f64>,
    pub releases: usize,
    /// CPU µs per handoff of each process on the path.
    pub cpu: CpuPerOp,
}

impl HotCell {
    /// Grant attempts per handoff: Txns less the releases' own, per handoff. With handoffs
    /// in the release's transaction this is 0: the release is the grant (floored at 0,
    /// since a release that ends the run hands nothing on).
    pub fn attempts(&self) -> Option<f64> {
        let txns = self.txns?;
        Some((txns - self.releases as f64 / self.handoffs.max(1) as f64).max(0.0))
    }
}

/// (grant answered, release called) of each hold.
type Holds = Vec<(Instant, Instant)>;

pub async fn measure(
    env: &Env,
    sys: HotSystem,
    waiters: usize,
    length: Duration,
) -> anyhow::Result<HotCell> {
    let key = format!("{BENCH_PREFIX}/hot-{}", sys.name().len());
    let etcd = &env.stack.etcd;
    let start_at = Instant::now() + Duration::from_millis(1500);
    let stop_at = start_at + length;
    let mut tasks = Vec::new();
    for w in 0..waiters {
        let waiter = Waiter::new(env, sys, w, &key).await?;
        tasks.push(tokio::spawn(waiter.run(start_at, stop_at)));
    }
    let watched = path_of(env, sys);
    tokio::time::sleep_until(start_at.into()).await;
    let cpu0 = cpu_by_role(&watched);
    let (p0, t0) = (
        etcd.metric("etcd_server_proposals_committed_total")?,
        etcd.rpc_count("Txn")?,
    );
    tokio::time::sleep_until(stop_at.into()).await;
    let cpu1 = cpu_by_role(&watched);
    let (p1, t1) = (
        etcd.metric("etcd_server_proposals_committed_total")?,
        etcd.rpc_count("Txn")?,
    );
    let mut holds: Holds = Vec::new();
    for t in tasks {
        holds.extend(t.await??);
    }
    holds.retain(|(g, _)| *g >= start_at && *g < stop_at);
    holds.sort();
    let mut lat: Vec<u64> = holds
        .windows(2)
        .filter_map(|w| w[1].0.checked_duration_since(w[0].1))
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .collect();
    lat.sort_unstable();
    let pct = |p: f64| crate::ops::percentile(&lat, p);
    let handoffs = holds.len();
    let per = |d: u64| d as f64 / handoffs.max(1) as f64;
    let on_etcd = sys != HotSystem::Postgres;
    let arbiter = matches!(
        sys,
        HotSystem::ArbiterDirect | HotSystem::FullPath | HotSystem::FullPathUnary
    );
    Ok(HotCell {
        handoffs,
        secs: length.as_secs_f64(),
        p50_us: pct(0.5),
        p99_us: pct(0.99),
        curve: crate::chart::PERCENTILES.iter().map(|p| pct(*p)).collect(),
        proposals: on_etcd.then(|| per(p1.saturating_sub(p0))),
        txns: arbiter.then(|| per(t1.saturating_sub(t0))),
        releases: handoffs,
        cpu: CpuPerOp::between(&cpu0, &cpu1, handoffs),
    })
}

/// The processes on a hot-key system's path (the uncontended system of the same shape).
fn path_of(env: &Env, sys: HotSystem) -> Vec<Watched> {
    match sys {
        HotSystem::V3Lock => System::V3Lock,
        HotSystem::ArbiterDirect => System::ArbiterDirect,
        HotSystem::FullPath => System::FullPath,
        HotSystem::FullPathUnary => System::FullPathUnary,
        HotSystem::Postgres => System::Postgres,
    }
    .watched(env)
}

enum Waiter {
    V3Lock {
        // Boxed: a client is ~3.5 KB, the other waiters a few words.
        etcd: Box<etcd_client::Client>,
        lease: i64,
        name: String,
    },
    Arbiter {
        c: lock_client::proto::lock_client::LockClient<tonic::transport::Channel>,
        key: String,
        session: i64,
        identity: Option<String>,
        /// One `Hold` stream per lock instead of two unary calls.
        stream: bool,
    },
    Postgres {
        db: tokio_postgres::Client,
    },
}

impl Waiter {
    async fn new(env: &Env, sys: HotSystem, w: usize, key: &str) -> anyhow::Result<Self> {
        Ok(match sys {
            HotSystem::V3Lock => {
                let mut etcd = env.stack.etcd_client().await?;
                let lease = etcd.lease_grant(120, None).await?.id();
                Waiter::V3Lock {
                    etcd: Box::new(etcd),
                    lease,
                    name: format!("/bench/{key}"),
                }
            }
            HotSystem::ArbiterDirect | HotSystem::FullPath | HotSystem::FullPathUnary => {
                // Each waiter its own identity: one identity's second session is refused
                // LEAKED_HOLD rather than queued (ADR-13).
                let id = gate_id(w + 1);
                let (mut c, identity) = if sys == HotSystem::ArbiterDirect {
                    (env.stack.arbiter_direct(0).await?, Some(id))
                } else {
                    let svid = env.stack.pki.svid(&format!("bench-w{w}"), &id)?;
                    (env.stack.client(&svid).await?, None)
                };
                let req = request(
                    OpenSessionRequest { key: key.into() },
                    key,
                    identity.as_deref(),
                );
                let session = c.open_session(req).await?.into_inner().session_id;
                Waiter::Arbiter {
                    c,
                    key: key.into(),
                    session,
                    identity,
                    stream: sys == HotSystem::FullPath,
                }
            }
            HotSystem::Postgres => {
                let db = lock_pause_test::connect(&env.pg.url()).await?;
                Waiter::Postgres { db }
            }
        })
    }

    async fn run(mut self, start_at: Instant, stop_at: Instant) -> anyhow::Result<Holds> {
        tokio::time::sleep_until(start_at.into()).await;
        let mut holds = Vec::new();
        // Bounded in count as well as time.
        while Instant::now() < stop_at && holds.len() < 1_000_000 {
            let left = stop_at.saturating_duration_since(Instant::now());
            if let Some(release) = self.once(left).await? {
                holds.push(release);
            }
        }
        if let Waiter::V3Lock { etcd, lease, .. } = &mut self {
            // A Lock still queued server-side goes with its lease.
            let _ = etcd.lease_revoke(*lease).await;
        }
        Ok(holds)
    }

    /// Waits up to `left` for the key and releases it at once: Some((granted, releasing)).
    async fn once(&mut self, left: Duration) -> anyhow::Result<Option<(Instant, Instant)>> {
        match self {
            Waiter::V3Lock { etcd, lease, name } => {
                let opts = LockOptions::new().with_lease(*lease);
                let Ok(r) = tokio::time::timeout(left, etcd.lock(name.as_str(), Some(opts))).await
                else {
                    return Ok(None);
                };
                let granted = Instant::now();
                let key = r?.key().to_vec();
                let releasing = Instant::now();
                etcd.unlock(key).await?;
                Ok(Some((granted, releasing)))
            }
            Waiter::Arbiter {
                c,
                key,
                session,
                identity,
                stream: true,
            } => {
                let wait_millis = u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1);
                let acquire = AcquireRequest {
                    key: key.clone(),
                    session_id: *session,
                    wait_millis,
                    ..Default::default()
                };
                let wrap = |s| request(s, key, identity.as_deref());
                match crate::ops::hold_cycle(c, acquire, wrap).await? {
                    Ok(granted) => Ok(Some((granted, granted))),
                    // The wait ran out at the end of the cell.
                    Err(s) if s.code() == tonic::Code::DeadlineExceeded => Ok(None),
                    Err(s) => Err(s).context("hot-key hold stream"),
                }
            }
            Waiter::Arbiter {
                c,
                key,
                session,
                identity,
                stream: false,
            } => {
                let wait_millis = u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1);
                let req = request(
                    AcquireRequest {
                        key: key.clone(),
                        session_id: *session,
                        wait_millis,
                        ..Default::default()
                    },
                    key,
                    identity.as_deref(),
                );
                let token = match c.acquire(req).await {
                    Ok(r) => r.into_inner().token,
                    // The wait ran out at the end of the cell.
                    Err(s) if s.code() == tonic::Code::DeadlineExceeded => return Ok(None),
                    Err(s) => return Err(s).context("hot-key acquire"),
                };
                let granted = Instant::now();
                let req = request(
                    ReleaseRequest {
                        key: key.clone(),
                        token,
                        session_id: *session,
                        ..Default::default()
                    },
                    key,
                    identity.as_deref(),
                );
                c.release(req).await?;
                Ok(Some((granted, granted)))
            }
            Waiter::Postgres { db } => {
                let ms = left.as_millis().max(1);
                db.batch_execute(&format!("SET lock_timeout = {ms}"))
                    .await?;
                if db
                    .execute("SELECT pg_advisory_lock(4242)", &[])
                    .await
                    .is_err()
                {
                    return Ok(None);
                }
                let granted = Instant::now();
                db.execute("SELECT pg_advisory_unlock(4242)", &[]).await?;
                Ok(Some((granted, granted)))
            }
        }
    }
}

/// Straight to the arbiter the bench sets the edge's headers; through Envoy the filter does.
fn request<T>(msg: T, key: &str, identity: Option<&str>) -> tonic::Request<T> {
    lock_integration::routed(msg, key, identity)
}

/// Every hot-key system with `waiters` waiters; writes the handoff chart into `out`,
/// returns the table.
pub async fn run(
    env: &Env,
    waiters: usize,
    length: Duration,
    out: &std::path::Path,
) -> anyhow::Result<String> {
    let mut hot = Vec::new();
    for sys in HotSystem::ALL {
        let cell = measure(env, sys, waiters, length)
            .await
            .with_context(|| format!("hot key: {}", sys.name()))?;
        eprintln!(
            "hot key {:<34} {:>7.0} handoffs/s  p50 {:>6} us  p99 {:>6} us",
            sys.name(),
            cell.handoffs as f64 / cell.secs,
            cell.p50_us,
            cell.p99_us
        );
        hot.push((sys, cell));
    }
    let curves: Vec<crate::chart::Curve> = hot
        .iter()
        .map(|(sys, cell)| crate::chart::Curve {
            label: sys.name().to_owned(),
            us: cell.curve.clone(),
        })
        .collect();
    let svg = crate::chart::percentiles_svg(
        &format!("hot-key handoff latency by percentile, {waiters} waiters"),
        &curves,
    );
    std::fs::write(out.join("handoff.svg"), svg)?;
    Ok(render(&hot, waiters))
}

fn render(rows: &[(HotSystem, HotCell)], waiters: usize) -> String {
    let mut out = format!(
        "\n| one hot key, {waiters} waiters | handoffs/s | handoff p50 µs | p99 µs | etcd proposals / handoff | Txn / handoff | grant attempts / handoff | handoffs ÷ v3lock |\n|---|---:|---:|---:|---:|---:|---:|---:|\n"
    );
    let v3 = rows
        .iter()
        .find(|(s, _)| *s == HotSystem::V3Lock)
        .map(|(_, c)| c.handoffs as f64 / c.secs);
    let opt = |v: Option<f64>| v.map_or("–".to_owned(), |v| format!("{v:.2}"));
    for (sys, c) in rows {
        let rate = c.handoffs as f64 / c.secs;
        let _ = writeln!(
            out,
            "| {} | {rate:.0} | {} | {} | {} | {} | {} | {} |",
            sys.name(),
            c.p50_us,
            c.p99_us,
            opt(c.proposals),
            opt(c.txns),
            opt(c.attempts()),
            opt(v3.map(|v| rate / v.max(f64::MIN_POSITIVE))),
        );
    }
    let _ = writeln!(
        out,
        "\n| CPU µs per handoff, one hot key, {waiters} waiters | handoffs/s | {} |\n|---|---:|---:|---:|---:|---:|---:|---:|",
        CpuPerOp::HEADER
    );
    for (sys, c) in rows {
        let _ = writeln!(
            out,
            "| {} | {:.0} |{}",
            sys.name(),
            c.handoffs as f64 / c.secs,
            c.cpu.cells()
        );
    }
    out
}
