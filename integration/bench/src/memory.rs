//! The arbiter's and etcd's resident memory idle, with 100,000 held keys, and with 10,000
//! waiters queued on them (one arbiter).

use crate::env::Env;
use crate::load::*;
use crate::observe::*;
use lock_config::proto::v1::InspectRequest;
use lock_integration::as_from_edge;
use lock_integration::registry::{GATE_CLIENTS, SCALE_PREFIX, gate_id};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// The memory rows; returns the table.
pub async fn run(
    env: &Env,
    holds: usize,
    waiters: usize,
    waiters_per_key: usize,
) -> anyhow::Result<String> {
    let m = memory(env, holds, waiters, waiters_per_key).await?;
    let mut table = format!(
        "\n| memory, {} held keys and {} queued waiters on {} of them (one arbiter) | arbiter RSS MiB | etcd RSS MiB |\n|---|---:|---:|\n",
        m.holds, m.waiters, m.keys_waited
    );
    for (stage, arbiter, etcd) in &m.stages {
        table.push_str(&format!("| {stage} | {arbiter:.1} | {etcd:.1} |\n"));
    }
    Ok(table)
}

pub struct Memory {
    pub holds: usize,
    pub waiters: usize,
    /// Keys the waiters queue on (one head each).
    pub keys_waited: usize,
    /// (stage, arbiter RSS MiB, etcd RSS MiB)
    pub stages: Vec<(String, f64, f64)>,
}

/// `waiters` queued `per_key` to a held key: each key's head waits on an etcd watch, the
/// others on their ticket, so two runs with different `per_key` separate the two costs.
pub async fn memory(
    env: &Env,
    holds: usize,
    waiters: usize,
    per_key: usize,
) -> anyhow::Result<Memory> {
    let pids = pids(env)?;
    let conns = Arc::new(Conns::open(env).await?);
    let mut stages = Vec::new();
    let mut stage = |name: String| -> anyhow::Result<()> {
        let (a, e) = (sample(pids.arbiter)?, sample(pids.etcd)?);
        eprintln!(
            "memory: {name}: arbiter {:.1} MiB, etcd {:.1} MiB",
            a.rss_mib, e.rss_mib
        );
        stages.push((name, a.rss_mib, e.rss_mib));
        Ok(())
    };
    stage("before".into())?;
    // 100 holds per session, 100 waits per waiter session.
    let holder_sessions = holds.div_ceil(100).max(1);
    let waiter_sessions = waiters.div_ceil(100).max(1);
    let deadline = Instant::now() + Duration::from_secs(180);
    // Holders and waiters are different identities: an identity waiting for a key another
    // of its sessions holds is told LEAKED_HOLD, not queued (ADR-13).
    let half = GATE_CLIENTS / 2;
    let holders = Arc::new(open_sessions(&conns, 0..holder_sessions, 1..=half, deadline).await?);
    let waiting = Arc::new(
        open_sessions(
            &conns,
            0..waiter_sessions,
            half + 1..=GATE_CLIENTS,
            deadline,
        )
        .await?,
    );
    let all = Arc::new([holders.as_slice(), waiting.as_slice()].concat());
    let mut renewer = Renewer::default();
    renewer.add(&conns, &all);
    let prefix = format!("{SCALE_PREFIX}/mem");
    hold_keys(&conns, &holders, &prefix, 0..holds, deadline).await?;
    stage(format!("{} sessions, {holds} held keys", all.len()))?;
    // Waiters: each on a held key, queued in the arbiter until it ends them.
    let keys_waited = waiters.div_ceil(per_key.max(1)).min(holds).max(1);
    let mut wait_tasks = JoinSet::new();
    for w in 0..waiters {
        let mut c = conns.get(w);
        let s = waiting[w % waiting.len()].clone();
        let key = format!("{prefix}/{}", w % keys_waited);
        wait_tasks.spawn(async move { c.acquire(acquire_request(&key, &s, 120_000)).await });
    }
    let queued = {
        let until = Instant::now() + Duration::from_secs(60);
        let mut seen = 0;
        while Instant::now() < until {
            if let Some(ended) = wait_tasks.try_join_next() {
                anyhow::bail!("a waiter ended instead of waiting: {ended:?}");
            }
            seen = count_queued(&conns, &prefix, keys_waited, until).await?;
            if seen == waiters {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        seen
    };
    stage(format!("+ {queued} queued waiters"))?;
    // A heap profile ends here, with the waiters queued: its end is their steady state,
    // its peak their arrival (the arbiter stops, so the rest of the row is not measured).
    if write_heap_profile(pids.arbiter)? {
        wait_tasks.abort_all();
        return Ok(Memory {
            holds,
            waiters,
            keys_waited,
            stages,
        });
    }
    // Dropping the calls resets their streams: the arbiter must forget each waiter.
    wait_tasks.abort_all();
    while wait_tasks.join_next().await.is_some() {}
    let mut left = usize::MAX;
    for _ in 0..20 {
        left = count_queued(
            &conns,
            &prefix,
            keys_waited,
            Instant::now() + Duration::from_secs(30),
        )
        .await?;
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    drop(renewer);
    let unclosed = close_sessions(&conns, &all).await;
    if unclosed > 0 {
        eprintln!("memory: {unclosed} sessions could not be closed");
    }
    stage(format!(
        "waiters gone ({left} left queued), sessions closed"
    ))?;
    anyhow::ensure!(
        queued == waiters,
        "only {queued} of {waiters} waiters were queued"
    );
    Ok(Memory {
        holds,
        waiters,
        keys_waited,
        stages,
    })
}

/// With `LOCK_DHAT_FILE` set (make heap-profile: an arbiter built with the `dhat-heap`
/// feature inherits it), stops the arbiter with SIGTERM, which writes the heap profile
/// there, and waits for the file (true: written).
pub fn write_heap_profile(arbiter: u32) -> anyhow::Result<bool> {
    let Some(file) = std::env::var_os("LOCK_DHAT_FILE").map(std::path::PathBuf::from) else {
        return Ok(false);
    };
    let _ = std::fs::remove_file(&file);
    let ok = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(arbiter.to_string())
        .status()?
        .success();
    anyhow::ensure!(ok, "kill -TERM {arbiter} failed");
    let until = Instant::now() + Duration::from_secs(120);
    // dhat writes the whole file at once; a size that stops changing is a finished file.
    let mut last = None;
    while Instant::now() < until {
        let len = std::fs::metadata(&file).map(|m| m.len()).ok();
        if len.is_some() && len == last {
            eprintln!("memory: heap profile in {}", file.display());
            return Ok(true);
        }
        last = len;
        std::thread::sleep(Duration::from_millis(500));
    }
    anyhow::bail!(
        "no heap profile at {} within 120 s (is the arbiter built with --features dhat-heap?)",
        file.display()
    )
}

/// Waiters queued over keys `{prefix}/0..keys`, by Inspect.
pub async fn count_queued(
    conns: &Arc<Conns>,
    prefix: &str,
    keys: usize,
    deadline: Instant,
) -> anyhow::Result<usize> {
    let counts = bounded_batch(0..keys, BUILD_CONCURRENCY, deadline, |k| {
        let mut c = conns.get(k);
        let key = format!("{prefix}/{k}");
        async move {
            let r = c
                .inspect(as_from_edge(
                    InspectRequest { key: key.clone() },
                    Some(&key),
                    Some(&gate_id(1)),
                ))
                .await?;
            Ok(r.into_inner().waiters as usize)
        }
    })
    .await?;
    Ok(counts.iter().sum())
}

// ---------------------------------------------------------------------------------------
// Scale steps.
