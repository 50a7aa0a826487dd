//! `gate soak`: gate rounds with a new seed each until the time is up, one line per round
//! in a log, stopping at the first failure (whose history is kept).
//!
//! Two ways to soak:
//! - **fresh** (the default): each round on a new environment, for rare interleavings;
//! - **long-lived** (`--long-lived`, issue 34): every round on one environment, so slow
//!   leaks add up. Arbiter 0 is never restarted by a fault (it is frozen, cut off and
//!   slowed like the other); after each round its RSS and etcd's database size are read,
//!   and etcd is compacted and defragmented as the operating guide says. The summary gives
//!   arbiter 0's RSS from round 2 on against round 2's, and the database size after each
//!   defrag.

use super::{GateEnv, GateOptions, GateReport, MAX_EXTENSION, round, run};
use lock_integration::stack::Stack;
use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

pub struct SoakOptions {
    pub minutes: u64,
    pub round_seconds: u64,
    pub rounds: u64,
    pub long_lived: bool,
}

/// After a long-lived round: the arbiters' RSS and etcd's size around the compaction.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Per arbiter: (pid, resident set in bytes).
    pub arbiters: Vec<(u32, u64)>,
    /// The largest member's database before and after compaction and defrag.
    pub db_before: u64,
    pub db_after: u64,
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

impl Sample {
    fn line(&self) -> String {
        let arbiters: Vec<String> = self
            .arbiters
            .iter()
            .enumerate()
            .map(|(i, (pid, rss))| format!("arbiter-{i} (pid {pid}) RSS {:.1} MiB", mib(*rss)))
            .collect();
        format!(
            "{}; etcd db {:.2} MiB, {:.2} MiB after compaction and defrag",
            arbiters.join(", "),
            mib(self.db_before),
            mib(self.db_after)
        )
    }
}

pub use lock_integration::process::rss;

/// Reads the sample, then compacts the store to its current revision and defragments
/// every member.
async fn sample_and_compact(stack: &Stack) -> anyhow::Result<Sample> {
    let arbiters = stack
        .arbiters
        .iter()
        .filter_map(|a| {
            let pid = a.proc.pid()?;
            Some((pid, rss(pid)?))
        })
        .collect();
    let mut clients = Vec::new();
    for m in stack.members() {
        clients.push(m.client().await?);
    }
    let mut db_before = 0u64;
    let mut revision = 0i64;
    for c in &mut clients {
        let s = c.status().await?;
        db_before = db_before.max(u64::try_from(s.db_size()).unwrap_or(0));
        revision = revision.max(s.header().map_or(0, |h| h.revision()));
    }
    if let Some(c) = clients.first_mut() {
        c.compact(
            revision,
            Some(etcd_client::CompactionOptions::new().with_physical()),
        )
        .await?;
    }
    let mut db_after = 0u64;
    for c in &mut clients {
        c.defragment().await?;
        let s = c.status().await?;
        db_after = db_after.max(u64::try_from(s.db_size()).unwrap_or(0));
    }
    Ok(Sample {
        arbiters,
        db_before,
        db_after,
    })
}

fn counts(r: &GateReport) -> String {
    format!(
        "{} ops, {} grants, {} faults, {} violations, {} not linearizable, {} unchecked, stale refused {:?}; {} terms, {} sets, {} readers, {} writers of shared keys{}",
        r.operations,
        r.grants,
        r.faults.len(),
        r.violations.len(),
        r.not_linearizable.len(),
        r.unchecked.len(),
        r.stale_refused,
        r.terms,
        r.sets,
        r.shared_readers,
        r.shared_writers,
        if r.passed() {
            String::new()
        } else {
            format!(", history {}", r.dir.display())
        }
    )
}

fn append(log: &Path, text: &str) -> anyhow::Result<()> {
    print!("{text}");
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| anyhow::anyhow!("{}: {e}", log.display()))
}

/// Runs the soak; Ok(true) when every round passed.
pub async fn soak(opts: &SoakOptions, log: &Path) -> anyhow::Result<bool> {
    let until = Instant::now() + Duration::from_secs(opts.minutes * 60);
    let base = GateOptions {
        duration: Duration::from_secs(opts.round_seconds),
        spare_arbiter: opts.long_lived.then_some(0),
        ..GateOptions::default()
    };
    let mut env = if opts.long_lived {
        append(
            log,
            &format!(
                "{} soak on one environment: arbiter 0 is never restarted\n",
                stamp()
            ),
        )?;
        Some(GateEnv::start(&base).await?)
    } else {
        None
    };
    let mut samples: Vec<Sample> = Vec::new();
    let mut passed = true;
    for n in 1..=opts.rounds {
        // A round must fit: its load, the faults' extension at most, and the checks.
        let need = Duration::from_secs(opts.round_seconds) + MAX_EXTENSION;
        if Instant::now() + need > until && n > 1 {
            break;
        }
        let seed = 1000 + n;
        let round_opts = GateOptions {
            seed,
            ..base.clone()
        };
        let outcome = match env.as_mut() {
            Some(env) => {
                let dir = env.dir.join(format!("round-{n}"));
                let r = round(env, &round_opts, &dir).await;
                // A passing round's folder goes; the environment's stays with it.
                if r.as_ref().is_ok_and(GateReport::passed) {
                    let _ = std::fs::remove_dir_all(&dir);
                }
                r
            }
            None => run(&round_opts).await,
        };
        let (mut line, ok) = match &outcome {
            Ok(r) => (counts(r), r.passed()),
            Err(e) => (format!("could not run: {e:#}"), false),
        };
        if let Some(env) = env.as_ref() {
            match sample_and_compact(&env.stack).await {
                Ok(s) => {
                    line.push_str(&format!("; {}", s.line()));
                    samples.push(s);
                }
                Err(e) => line.push_str(&format!("; no sample: {e:#}")),
            }
        }
        let verdict = if ok { "PASS" } else { "FAIL" };
        append(
            log,
            &format!("{} round {n} seed {seed} {verdict}: {line}\n", stamp()),
        )?;
        if !ok {
            passed = false;
            break;
        }
    }
    if let Some(env) = env {
        if let Some(line) = flatness(&samples) {
            append(log, &format!("{} {line}\n", stamp()))?;
        }
        env.finish(!passed);
    }
    Ok(passed)
}

/// Arbiter 0's RSS from round 2 on against round 2's (round 1 warms it up), and the
/// database after each defrag: the soak's two flatness figures.
pub fn flatness(samples: &[Sample]) -> Option<String> {
    let from = samples.get(1)?;
    let (pid, first) = *from.arbiters.first()?;
    let same: Vec<u64> = samples[1..]
        .iter()
        .filter_map(|s| s.arbiters.first())
        .filter(|(p, _)| *p == pid)
        .map(|(_, r)| *r)
        .collect();
    let lo = same.iter().copied().min()?;
    let hi = same.iter().copied().max()?;
    let pct = |x: u64| (x as f64 - first as f64) / first as f64 * 100.0;
    let db: Vec<String> = samples
        .iter()
        .map(|s| format!("{:.2}", mib(s.db_after)))
        .collect();
    Some(format!(
        "arbiter-0 (pid {pid}, {} rounds from round 2): RSS {:.1} MiB at round 2, from {:+.1}% to {:+.1}%; etcd db after each defrag (MiB): {}",
        same.len(),
        mib(first),
        pct(lo),
        pct(hi),
        db.join(" ")
    ))
}

fn stamp() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(pid: u32, rss: u64, db: u64) -> Sample {
        Sample {
            arbiters: vec![(pid, rss)],
            db_before: db * 2,
            db_after: db,
        }
    }

    #[test]
    fn flatness_is_measured_from_round_two_on_the_same_process() {
        const M: u64 = 1024 * 1024;
        let samples = [
            s(7, 10 * M, 1),
            s(7, 40 * M, 1),
            s(7, 42 * M, 1),
            s(7, 38 * M, 1),
        ];
        let line = flatness(&samples).unwrap();
        assert!(line.contains("3 rounds"), "{line}");
        assert!(line.contains("40.0 MiB at round 2"), "{line}");
        assert!(line.contains("-5.0% to +5.0%"), "{line}");
        assert!(flatness(&samples[..1]).is_none(), "one round says nothing");
    }

    #[test]
    fn reads_this_process_rss() {
        assert!(rss(std::process::id()).unwrap() > 0);
    }
}
