//! What the bench reads off the processes themselves: CPU time and resident memory from
//! `/proc/PID/stat`, and etcd's fsync histogram from its metrics.

use crate::env::Env;
use anyhow::Context as _;
use std::time::{Duration, Instant};

/// CPU time and resident memory of one process, from /proc.
#[derive(Clone, Copy)]
pub struct ProcSample {
    pub cpu: Duration,
    pub rss_mib: f64,
    pub at: Instant,
}

pub fn sample(pid: u32) -> anyhow::Result<ProcSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("unreadable /proc stat")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11).context("no utime")?.parse::<u64>()?
        + f.get(12).context("no stime")?.parse::<u64>()?;
    let hz = rustix::param::clock_ticks_per_second().max(1);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let rss_kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .context("no VmRSS")?
        .parse()?;
    Ok(ProcSample {
        cpu: Duration::from_secs_f64(ticks as f64 / hz as f64),
        rss_mib: rss_kib / 1024.0,
        at: Instant::now(),
    })
}

/// Percent of one core used between two samples.
pub fn cpu_percent(a: &ProcSample, b: &ProcSample) -> f64 {
    let wall = b.at.duration_since(a.at).as_secs_f64().max(1e-9);
    100.0 * b.cpu.saturating_sub(a.cpu).as_secs_f64() / wall
}

pub struct Pids {
    pub arbiter: u32,
    pub etcd: u32,
}

pub fn pids(env: &Env) -> anyhow::Result<Pids> {
    Ok(Pids {
        arbiter: env
            .stack
            .arbiters
            .first()
            .and_then(|a| a.proc.pid())
            .context("no arbiter")?,
        etcd: env.stack.etcd.proc.pid().context("no etcd")?,
    })
}

// ---------------------------------------------------------------------------------------
// Memory with many holds and waiters.

/// etcd's WAL fsync histogram: (upper bound in seconds, cumulative count).
pub fn fsync_buckets(env: &Env) -> anyhow::Result<Vec<(f64, u64)>> {
    let body = lock_integration::admin_get(env.stack.etcd.metrics_addr, "/metrics")?;
    Ok(body
        .lines()
        .filter_map(|l| l.strip_prefix("etcd_disk_wal_fsync_duration_seconds_bucket{le=\""))
        .filter_map(|l| {
            let (le, rest) = l.split_once("\"}")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, rest.trim().parse::<f64>().ok()? as u64))
        })
        .collect())
}

/// The bucket bound under which fraction `q` of the observations between two histogram
/// readings fall (an upper bound on that quantile).
pub fn bucket_quantile(before: &[(f64, u64)], after: &[(f64, u64)], q: f64) -> Option<f64> {
    let delta: Vec<(f64, u64)> = after
        .iter()
        .map(|(le, n)| {
            let was = before.iter().find(|(l, _)| l == le).map_or(0, |b| b.1);
            (*le, n.saturating_sub(was))
        })
        .collect();
    let total = delta.iter().map(|d| d.1).max()?;
    if total == 0 {
        return None;
    }
    delta
        .iter()
        .find(|(_, n)| *n as f64 >= q * total as f64)
        .map(|d| d.0)
}
