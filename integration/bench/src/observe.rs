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

/// A process on a measured path, by what it is (CPU per operation is reported per role).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Envoy,
    Arbiter,
    Etcd,
    /// Redis or PostgreSQL (its postmaster and every backend).
    Server,
    /// The load generator: this process.
    Client,
}

impl Role {
    pub const ALL: [Role; 5] = [
        Role::Envoy,
        Role::Arbiter,
        Role::Etcd,
        Role::Server,
        Role::Client,
    ];
}

/// One process whose CPU a cell reads: its role, pid, and whether its children count too
/// (PostgreSQL's backends are children of the postmaster).
#[derive(Debug, Clone, Copy)]
pub struct Watched {
    pub role: Role,
    pub pid: u32,
    pub children: bool,
}

impl Watched {
    pub fn new(role: Role, pid: u32) -> Self {
        Self {
            role,
            pid,
            children: false,
        }
    }

    /// The load generator itself.
    pub fn client() -> Self {
        Self::new(Role::Client, std::process::id())
    }
}

/// CPU time (user + system) of `pid`, from /proc/PID/stat (every thread counts).
fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    Ok(sample(pid)?.cpu)
}

/// The pids whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|s| {
                    let rest = s.rsplit_once(')')?.1.split_whitespace().nth(1)?.to_owned();
                    rest.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

/// CPU time by role of `watched`, now (a process that is gone counts nothing).
pub fn cpu_by_role(watched: &[Watched]) -> Vec<(Role, Duration)> {
    watched
        .iter()
        .map(|w| {
            let mut cpu = cpu_time(w.pid).unwrap_or_default();
            if w.children {
                cpu += children_of(w.pid)
                    .into_iter()
                    .filter_map(|c| cpu_time(c).ok())
                    .sum::<Duration>();
            }
            (w.role, cpu)
        })
        .collect()
}

/// CPU µs per operation of each role, between two readings over `ops` operations.
#[derive(Debug, Clone, Default)]
pub struct CpuPerOp(pub Vec<(Role, f64)>);

impl CpuPerOp {
    pub fn between(before: &[(Role, Duration)], after: &[(Role, Duration)], ops: usize) -> Self {
        let mut out: Vec<(Role, f64)> = Vec::new();
        for ((role, a), (_, b)) in before.iter().zip(after) {
            let us = b.saturating_sub(*a).as_secs_f64() * 1e6 / ops.max(1) as f64;
            match out.iter_mut().find(|(r, _)| r == role) {
                Some((_, v)) => *v += us,
                None => out.push((*role, us)),
            }
        }
        Self(out)
    }

    pub fn of(&self, role: Role) -> Option<f64> {
        self.0.iter().find(|(r, _)| *r == role).map(|(_, v)| *v)
    }

    pub fn total(&self) -> f64 {
        self.0.iter().map(|(_, v)| v).sum()
    }

    /// `Envoy / arbiter / etcd / server / client` cells and the total, `–` for a process
    /// not on the path.
    pub fn cells(&self) -> String {
        let mut out = String::new();
        for role in Role::ALL {
            match self.of(role) {
                Some(v) => out.push_str(&format!(" {v:.0} |")),
                None => out.push_str(" – |"),
            }
        }
        out.push_str(&format!(" {:.0} |", self.total()));
        out
    }

    pub const HEADER: &str = "Envoy | arbiter | etcd | Redis/PostgreSQL | client | total";
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
