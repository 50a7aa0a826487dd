//! Shared holds (issue 35): readers of one key of a `shared: true` class, each looping
//! acquire-shared + release as fast as it can, beside one writer looping an exclusive
//! acquire + release on the same key. Every time the writer asks, new readers wait behind
//! it (writers are not starved), so the row shows what a writer costs the readers: reader
//! grants/s with and without the writer, the writer's grants/s and its wait, and what each
//! grant cost etcd and each process.

use crate::env::Env;
use crate::observe::{CpuPerOp, cpu_by_role};
use crate::ops::{Route, System, percentile, with_headers};
use lock_client::proto::lock_client::LockClient;
use lock_config::proto::v1::{AcquireRequest, HoldMode, OpenSessionRequest, ReleaseRequest};
use lock_integration::registry::{BENCH_SHARED_PREFIX, gate_id};
use std::fmt::Write as _;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// Readers on the key.
const READERS: usize = 8;

struct Worker {
    c: LockClient<Channel>,
    key: String,
    session: i64,
    mode: HoldMode,
}

impl Worker {
    async fn new(env: &Env, i: usize, key: &str, mode: HoldMode) -> anyhow::Result<Self> {
        let mut c = env.stack.workload(&gate_id(i + 1)).await?;
        let session = c
            .open_session(with_headers(
                OpenSessionRequest { key: key.into() },
                key,
                Route::Edge,
            ))
            .await?
            .into_inner()
            .session_id;
        Ok(Self {
            c,
            key: key.into(),
            session,
            mode,
        })
    }

    /// Acquire (waiting up to 10 s) + release; the acquire's latency in µs.
    async fn once(&mut self) -> anyhow::Result<u64> {
        let t = Instant::now();
        let g = self
            .c
            .acquire(with_headers(
                AcquireRequest {
                    key: self.key.clone(),
                    session_id: self.session,
                    wait_millis: 10_000,
                    mode: self.mode.into(),
                },
                &self.key,
                Route::Edge,
            ))
            .await?
            .into_inner();
        let waited = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.c
            .release(with_headers(
                ReleaseRequest {
                    key: self.key.clone(),
                    token: g.token,
                    session_id: self.session,
                    mode: self.mode.into(),
                },
                &self.key,
                Route::Edge,
            ))
            .await?;
        Ok(waited)
    }
}

struct Cell {
    reads: Vec<u64>,
    writes: Vec<u64>,
    secs: f64,
    proposals: f64,
    cpu: CpuPerOp,
}

async fn measure(env: &Env, writer: bool, length: Duration) -> anyhow::Result<Cell> {
    let key = format!("{BENCH_SHARED_PREFIX}/{}", if writer { "rw" } else { "r" });
    let mut workers = Vec::new();
    for i in 0..READERS {
        workers.push(Worker::new(env, i, &key, HoldMode::Shared).await?);
    }
    if writer {
        workers.push(Worker::new(env, READERS, &key, HoldMode::Exclusive).await?);
    }
    let watched = System::FullPath.watched(env);
    let start_at = Instant::now() + Duration::from_millis(500);
    let stop_at = start_at + length;
    let mut tasks = Vec::new();
    for mut w in workers {
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(start_at.into()).await;
            let mut lat = Vec::new();
            while Instant::now() < stop_at && lat.len() < 1_000_000 {
                lat.push(w.once().await?);
            }
            anyhow::Ok((w.mode, lat))
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
    let (mut reads, mut writes) = (Vec::new(), Vec::new());
    for t in tasks {
        let (mode, lat) = t.await??;
        match mode {
            HoldMode::Shared => reads.extend(lat),
            _ => writes.extend(lat),
        }
    }
    reads.sort_unstable();
    writes.sort_unstable();
    let grants = reads.len() + writes.len();
    Ok(Cell {
        cpu: CpuPerOp::between(&cpu0, &cpu1, grants),
        proposals: p1.saturating_sub(p0) as f64 / grants.max(1) as f64,
        secs: length.as_secs_f64(),
        reads,
        writes,
    })
}

pub async fn run(env: &Env, length: Duration) -> anyhow::Result<String> {
    let mut out = format!(
        "\n| shared holds, one key, {READERS} readers looping | reads/s | read wait p50 µs | p99 µs | writes/s | write wait p50 µs | p99 µs | etcd proposals / grant | {} |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        CpuPerOp::HEADER
    );
    for writer in [false, true] {
        let cell = measure(env, writer, length).await?;
        let rate = |v: &Vec<u64>| v.len() as f64 / cell.secs;
        let name = if writer {
            "and one writer looping"
        } else {
            "alone"
        };
        eprintln!(
            "shared holds, {name:<24} {:>7.0} reads/s {:>6.0} writes/s",
            rate(&cell.reads),
            rate(&cell.writes)
        );
        let w = |p| {
            if cell.writes.is_empty() {
                "–".to_owned()
            } else {
                percentile(&cell.writes, p).to_string()
            }
        };
        let _ = writeln!(
            out,
            "| {name} | {:.0} | {} | {} | {:.0} | {} | {} | {:.2} |{}",
            rate(&cell.reads),
            percentile(&cell.reads, 0.5),
            percentile(&cell.reads, 0.99),
            rate(&cell.writes),
            w(0.5),
            w(0.99),
            cell.proposals,
            cell.cpu.cells(),
        );
    }
    Ok(out)
}
