//! Several keys as one (issue 35): what taking 4 keys together costs, uncontended (each
//! worker its own keys), three ways side by side:
//!
//! - `AcquireAll` + `ReleaseAll` through the full path: one grant transaction for the
//!   four, one release transaction (and its read);
//! - four unary `Acquire`s in key order through the full path, then four `Release`s: what a
//!   caller does without sets (deadlock-free only while every caller sorts);
//! - etcd's v3lock, four `Lock`s then four `Unlock`s.
//!
//! Reported per set: throughput, p50/p99, etcd raft proposals, and CPU µs of each process.

use crate::env::Env;
use crate::observe::{CpuPerOp, cpu_by_role};
use crate::ops::{Cell, Route, System, percentile, with_headers};
use etcd_client::LockOptions;
use lock_client::proto::lock_client::LockClient;
use lock_config::proto::v1::{
    AcquireAllRequest, AcquireRequest, OpenSessionRequest, ReleaseAllRequest, ReleaseRequest,
};
use lock_integration::pki::OPERATOR;
use std::fmt::Write as _;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// Keys per set in the bench (the row).
pub const SET_KEYS: usize = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Way {
    AcquireAll,
    OneByOne,
    V3Lock,
}

impl Way {
    const ALL: [Way; 3] = [Way::AcquireAll, Way::OneByOne, Way::V3Lock];

    fn name(self) -> &'static str {
        match self {
            Way::AcquireAll => "full path, AcquireAll + ReleaseAll",
            Way::OneByOne => "full path, 4 Acquire in key order + 4 Release",
            Way::V3Lock => "etcd v3lock, 4 Lock + 4 Unlock",
        }
    }
}

enum Worker {
    Arbiter {
        c: LockClient<Channel>,
        keys: Vec<String>,
        session: i64,
    },
    V3Lock {
        // Boxed: an etcd client is far larger than the arbiter's stub (clippy).
        etcd: Box<etcd_client::Client>,
        names: Vec<String>,
        lease: i64,
    },
}

impl Worker {
    async fn new(env: &Env, way: Way, w: usize) -> anyhow::Result<Self> {
        let keys: Vec<String> = (0..SET_KEYS)
            .map(|i| format!("pay/ledger/bench-set-{w}-{i}"))
            .collect();
        Ok(match way {
            Way::V3Lock => {
                let mut etcd = env.stack.etcd_client().await?;
                let lease = etcd.lease_grant(60, None).await?.id();
                let names = keys.iter().map(|k| format!("/bench/v3set/{k}")).collect();
                Worker::V3Lock {
                    etcd: Box::new(etcd),
                    names,
                    lease,
                }
            }
            _ => {
                let mut c = env.stack.workload(OPERATOR).await?;
                let session = c
                    .open_session(with_headers(
                        OpenSessionRequest {
                            key: keys[0].clone(),
                        },
                        &keys[0],
                        Route::Edge,
                    ))
                    .await?
                    .into_inner()
                    .session_id;
                Worker::Arbiter { c, keys, session }
            }
        })
    }

    async fn once(&mut self, way: Way) -> anyhow::Result<()> {
        match self {
            Worker::V3Lock { etcd, names, lease } => {
                let mut held = Vec::with_capacity(names.len());
                for n in names.iter() {
                    let r = etcd
                        .lock(n.as_str(), Some(LockOptions::new().with_lease(*lease)))
                        .await?;
                    held.push(r.key().to_vec());
                }
                for k in held.into_iter().rev() {
                    etcd.unlock(k).await?;
                }
            }
            Worker::Arbiter { c, keys, session } if way == Way::AcquireAll => {
                let g = c
                    .acquire_all(tonic::Request::new(AcquireAllRequest {
                        keys: keys.clone(),
                        session_id: *session,
                        wait_millis: 0,
                    }))
                    .await?
                    .into_inner();
                c.release_all(tonic::Request::new(ReleaseAllRequest {
                    keys: g.keys,
                    token: g.token,
                    session_id: *session,
                }))
                .await?;
            }
            Worker::Arbiter { c, keys, session } => {
                let mut held = Vec::with_capacity(keys.len());
                for k in keys.iter() {
                    let acquire = AcquireRequest {
                        key: k.clone(),
                        session_id: *session,
                        wait_millis: 0,
                        ..Default::default()
                    };
                    let g = c.acquire(with_headers(acquire, k, Route::Edge)).await?;
                    held.push((k, g.into_inner().token));
                }
                for (k, token) in held.into_iter().rev() {
                    let release = ReleaseRequest {
                        key: k.clone(),
                        token,
                        session_id: *session,
                        ..Default::default()
                    };
                    c.release(with_headers(release, k, Route::Edge)).await?;
                }
            }
        }
        Ok(())
    }
}

async fn measure(env: &Env, way: Way, workers: usize, length: Duration) -> anyhow::Result<Cell> {
    let mut ws = Vec::new();
    for w in 0..workers {
        ws.push(Worker::new(env, way, w).await?);
    }
    let system = match way {
        Way::V3Lock => System::V3Lock,
        _ => System::FullPath,
    };
    let watched = system.watched(env);
    let start_at = Instant::now() + Duration::from_millis(500);
    let stop_at = start_at + length;
    let mut tasks = Vec::new();
    for mut w in ws {
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(start_at.into()).await;
            let mut lat = Vec::new();
            while Instant::now() < stop_at && lat.len() < 1_000_000 {
                let t = Instant::now();
                w.once(way).await?;
                lat.push(u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX));
            }
            anyhow::Ok(lat)
        }));
    }
    let proposals = || {
        env.stack
            .etcd
            .metric("etcd_server_proposals_committed_total")
    };
    tokio::time::sleep_until(start_at.into()).await;
    let (cpu0, p0) = (cpu_by_role(&watched), proposals()?);
    tokio::time::sleep_until(stop_at.into()).await;
    let (cpu1, p1) = (cpu_by_role(&watched), proposals()?);
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await??);
    }
    lat.sort_unstable();
    Ok(Cell {
        cpu: CpuPerOp::between(&cpu0, &cpu1, lat.len()),
        ops: lat.len(),
        secs: length.as_secs_f64(),
        p50_us: percentile(&lat, 0.5),
        p99_us: percentile(&lat, 0.99),
        curve: Vec::new(),
        proposals: Some(p1.saturating_sub(p0) as f64 / lat.len().max(1) as f64),
    })
}

/// Every way at concurrency 1 and 16; the table.
pub async fn run(env: &Env, length: Duration) -> anyhow::Result<String> {
    let mut out = format!(
        "\n| {SET_KEYS} keys as one (uncontended) | concurrency | sets/s | p50 µs | p99 µs | etcd proposals / set | {} |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        CpuPerOp::HEADER
    );
    for c in [1, 16] {
        for way in Way::ALL {
            let cell = measure(env, way, c, length).await?;
            eprintln!(
                "{:<40} c={c:<3} {:>7.0} sets/s  p50 {:>6} us  proposals/set {:.2}",
                way.name(),
                cell.ops as f64 / cell.secs,
                cell.p50_us,
                cell.proposals.unwrap_or(0.0)
            );
            let _ = writeln!(
                out,
                "| {} | {c} | {:.0} | {} | {} | {:.2} |{}",
                way.name(),
                cell.ops as f64 / cell.secs,
                cell.p50_us,
                cell.p99_us,
                cell.proposals.unwrap_or(0.0),
                cell.cpu.cells(),
            );
        }
    }
    Ok(out)
}
