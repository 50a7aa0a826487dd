//! The design's scale point driven up in steps, straight at one arbiter (the entity
//! cluster's side: etcd + arbiter; the edge scales separately): sessions (renewing every
//! 5 s, TTL/3 of a 15 s class), holds (6.25 per session, the records' 250,000 / 40,000) and
//! an open-loop grant rate; per step keepalives/s, grants/s, grant p50/p99 and CPU and
//! memory of arbiter, etcd and the load generator, until the last step or the time budget.
//!
//! Every loop is bounded in count and time; a step that cannot be built in time is reported,
//! not waited for.

use crate::chart;
use crate::env::Env;
use crate::load::*;
use crate::observe::*;
use lock_integration::registry::{GATE_CLIENTS, SCALE_PREFIX};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The design's grant latency budget (p99).
pub const P99_BUDGET: Duration = Duration::from_millis(40);

/// How far the steps go.
pub struct Settings {
    pub max_sessions: usize,
    /// Seconds of grant load measured per step.
    pub window: Duration,
    /// No new step starts after this long.
    pub budget: Duration,
}

/// The steps on `env`; with `chart`, the latency chart is written into that folder.
/// Returns the table.
pub async fn run(env: &Env, settings: &Settings, chart: Option<&Path>) -> anyhow::Result<String> {
    let plan = plan(settings.max_sessions);
    let s = steps(env, &plan, settings.window, settings.budget).await?;
    if let Some(out) = chart {
        let labels: Vec<String> = s
            .results
            .iter()
            .map(|r| format!("{}k s", r.step.sessions / 1000))
            .collect();
        let curve = |label: &str, f: fn(&StepResult) -> u64| chart::Curve {
            label: label.to_owned(),
            us: s.results.iter().map(f).collect(),
        };
        let svg = chart::lines_svg(
            "grant latency by scale step (sessions; holds 6.25 per session)",
            &labels,
            &[
                curve("grant p50", |r| r.p50_us),
                curve("grant p99", |r| r.p99_us),
                curve("raw etcd Txn p99, same window", |r| r.floor_p99_us),
            ],
            Some((
                u64::try_from(P99_BUDGET.as_micros()).unwrap_or(u64::MAX),
                "p99 budget 40 ms",
            )),
        );
        std::fs::write(out.join("scale.svg"), svg)?;
    }
    Ok(render(&s))
}

#[derive(Clone, Copy)]
pub struct Step {
    pub sessions: usize,
    pub holds: usize,
    pub grants_per_sec: u32,
}

/// The records' point: 40,000 sessions, 250,000 holds; holds grow with sessions (6.25 per
/// session) and the grant rate with both.
pub fn plan(max_sessions: usize) -> Vec<Step> {
    [
        (1_000, 100),
        (2_500, 200),
        (5_000, 300),
        (10_000, 400),
        (20_000, 500),
        (40_000, 600),
    ]
    .into_iter()
    .filter(|(s, _)| *s <= max_sessions)
    .map(|(sessions, grants_per_sec)| Step {
        sessions,
        holds: sessions * 25 / 4,
        grants_per_sec,
    })
    .collect()
}

pub struct StepResult {
    pub step: Step,
    /// Seconds it took to add this step's sessions and holds.
    pub build_secs: f64,
    pub keepalives_per_sec: f64,
    pub keepalives_at_etcd_per_sec: f64,
    pub grants_per_sec: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub failed: u64,
    /// Grants not started because too many were in flight (the arbiter fell behind).
    pub shed: u64,
    pub arbiter_cpu: f64,
    pub etcd_cpu: f64,
    pub load_cpu: f64,
    pub arbiter_rss_mib: f64,
    pub etcd_rss_mib: f64,
    /// KeepAlive streams the arbiter ended during the window (reopened by the load).
    pub broken_streams: u64,
    /// etcd's slowest WAL fsync in the window (its histogram bucket's bound, ms): one slow
    /// fsync holds every write committed behind it, so the maximum, not a percentile.
    pub fsync_max_ms: Option<f64>,
    /// p99 of raw etcd grant-shaped Txn + delete at [`FLOOR_RATE`] in the same window: what
    /// the store and machine alone do to a tail at that moment.
    pub floor_p99_us: u64,
}

impl StepResult {
    /// What ran out first, from this step's figures.
    pub fn saturated(&self) -> String {
        let target_ka = self.step.sessions as f64 / RENEW_EVERY.as_secs_f64();
        let total_cpu = self.arbiter_cpu + self.etcd_cpu + self.load_cpu;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let busiest = [
            ("arbiter", self.arbiter_cpu),
            ("etcd", self.etcd_cpu),
            ("load generator", self.load_cpu),
        ]
        .into_iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map_or("", |b| b.0);
        let mut why = Vec::new();
        if total_cpu > 0.85 * 100.0 * cores {
            why.push(format!(
                "the machine's CPU ({total_cpu:.0}% of {:.0}%; busiest: {busiest})",
                100.0 * cores
            ));
        } else if self.arbiter_cpu > 85.0 || self.etcd_cpu > 85.0 {
            why.push(format!("one core in the {busiest}"));
        }
        if self.keepalives_per_sec < 0.9 * target_ka {
            why.push(format!(
                "renewals ({:.0}/s of {target_ka:.0}/s)",
                self.keepalives_per_sec
            ));
        }
        if self.broken_streams > 0 {
            why.push(format!(
                "keepalive streams broken ({})",
                self.broken_streams
            ));
        }
        if Duration::from_micros(self.floor_p99_us) > P99_BUDGET {
            why.push(format!(
                "etcd itself (raw Txn p99 {} ms in the same window; slowest fsync ≤ {:.0} ms)",
                self.floor_p99_us / 1000,
                self.fsync_max_ms.unwrap_or(0.0)
            ));
        }
        if self.shed > 0 {
            why.push(format!("grants shed ({})", self.shed));
        }
        if why.is_empty() {
            "–".into()
        } else {
            why.join("; ")
        }
    }
}

pub struct Scale {
    pub results: Vec<StepResult>,
    /// Why the run ended before the last planned step, if it did.
    pub stopped: Option<String>,
}

pub async fn steps(
    env: &Env,
    plan: &[Step],
    window: Duration,
    budget: Duration,
) -> anyhow::Result<Scale> {
    let started = Instant::now();
    let pids = pids(env)?;
    let conns = Arc::new(Conns::open(env).await?);
    let mut sessions: Vec<Session> = Vec::new();
    let mut holds = 0usize;
    let mut renewer = Renewer::default();
    let mut results = Vec::new();
    let mut stopped = None;
    for (n, &step) in plan.iter().enumerate() {
        if started.elapsed() > budget {
            stopped = Some(format!("time budget ({} s) spent", budget.as_secs()));
            break;
        }
        let t = Instant::now();
        let deadline = t + Duration::from_secs(150)
            .min(budget.saturating_sub(started.elapsed()) + Duration::from_secs(30));
        let built = async {
            // In chunks, each renewed as soon as it is open: opening a step's sessions can
            // take longer than their TTL.
            while sessions.len() < step.sessions {
                let end = (sessions.len() + 1_024).min(step.sessions);
                let fresh =
                    open_sessions(&conns, sessions.len()..end, 1..=GATE_CLIENTS, deadline).await?;
                renewer.add(&conns, &fresh);
                sessions.extend(fresh);
            }
            let all = Arc::new(sessions.clone());
            hold_keys(
                &conns,
                &all,
                &format!("{SCALE_PREFIX}/h"),
                holds..step.holds,
                deadline,
            )
            .await?;
            holds = step.holds.max(holds);
            anyhow::Ok(())
        }
        .await;
        if let Err(e) = built {
            stopped = Some(format!(
                "step {} ({} sessions, {} holds) could not be built: {e:#}",
                n + 1,
                step.sessions,
                step.holds
            ));
            break;
        }
        let build_secs = t.elapsed().as_secs_f64();
        // One renewal period to settle, so the window sees steady renewals.
        tokio::time::sleep(RENEW_EVERY).await;
        let r = measure_step(
            env, &pids, &conns, &sessions, &renewer, step, n, window, build_secs,
        )
        .await?;
        eprintln!(
            "scale: {} sessions {} holds {}/s: {:.0} keepalives/s, {:.0} grants/s, p50 {} us p99 {} us (raw Txn p99 {} us, slowest fsync {:?} s); cpu arbiter {:.0}% etcd {:.0}% load {:.0}%; rss arbiter {:.0} MiB etcd {:.0} MiB",
            step.sessions,
            step.holds,
            step.grants_per_sec,
            r.keepalives_per_sec,
            r.grants_per_sec,
            r.p50_us,
            r.p99_us,
            r.floor_p99_us,
            r.fsync_max_ms.map(|ms| ms / 1000.0),
            r.arbiter_cpu,
            r.etcd_cpu,
            r.load_cpu,
            r.arbiter_rss_mib,
            r.etcd_rss_mib
        );
        // Steps go on past a p99 crossing: a tail at a small step can be the machine's noise,
        // and the later steps show what grows with load.
        results.push(r);
    }
    drop(renewer);
    let unclosed = close_sessions(&conns, &Arc::new(sessions)).await;
    if unclosed > 0 {
        eprintln!("scale: {unclosed} sessions could not be closed");
    }
    Ok(Scale { results, stopped })
}

#[allow(clippy::too_many_arguments)]
pub async fn measure_step(
    env: &Env,
    pids: &Pids,
    conns: &Arc<Conns>,
    sessions: &[Session],
    renewer: &Renewer,
    step: Step,
    n: usize,
    window: Duration,
    build_secs: f64,
) -> anyhow::Result<StepResult> {
    let granters: Arc<Vec<Session>> = Arc::new(sessions.iter().take(256).cloned().collect());
    let load_pid = std::process::id();
    let (a0, e0, l0) = (sample(pids.arbiter)?, sample(pids.etcd)?, sample(load_pid)?);
    let ka0 = renewer.ok.load(Ordering::Relaxed);
    let broken0 = renewer.broken_streams.load(Ordering::Relaxed);
    let etcd_ka0 = env.stack.etcd.stream_messages("LeaseKeepAlive")?;
    let fsync0 = fsync_buckets(env)?;
    let (grants, floor) = tokio::join!(
        grant_load(conns, &granters, step.grants_per_sec, window, n),
        floor_load(env, FLOOR_RATE, window, n)
    );
    let mut floor = floor?;
    floor.sort_unstable();
    let (a1, e1, l1) = (sample(pids.arbiter)?, sample(pids.etcd)?, sample(load_pid)?);
    let ka = renewer.ok.load(Ordering::Relaxed) - ka0;
    let etcd_ka = env.stack.etcd.stream_messages("LeaseKeepAlive")? - etcd_ka0;
    let fsync = fsync_buckets(env)?;
    let secs = a1.at.duration_since(a0.at).as_secs_f64();
    let mut lat = grants.latencies_us;
    lat.sort_unstable();
    Ok(StepResult {
        step,
        build_secs,
        keepalives_per_sec: ka as f64 / secs,
        keepalives_at_etcd_per_sec: etcd_ka as f64 / secs,
        grants_per_sec: lat.len() as f64 / window.as_secs_f64(),
        p50_us: crate::ops::percentile(&lat, 0.50),
        p99_us: crate::ops::percentile(&lat, 0.99),
        failed: grants.failed,
        shed: grants.shed,
        arbiter_cpu: cpu_percent(&a0, &a1),
        etcd_cpu: cpu_percent(&e0, &e1),
        load_cpu: cpu_percent(&l0, &l1),
        arbiter_rss_mib: a1.rss_mib,
        etcd_rss_mib: e1.rss_mib,
        broken_streams: renewer.broken_streams.load(Ordering::Relaxed) - broken0,
        fsync_max_ms: bucket_quantile(&fsync0, &fsync, 1.0).map(|s| s * 1000.0),
        floor_p99_us: crate::ops::percentile(&floor, 0.99),
    })
}

pub fn render(s: &Scale) -> String {
    let mut t = String::from(
        "\n| scale step: sessions / holds / grants offered per s | keepalives/s (at etcd) | grants/s | grant p50 µs | p99 µs | raw Txn p99 µs, same window | slowest fsync ms | CPU % arbiter / etcd / load | RSS MiB arbiter / etcd | build s | saturated |\n|---|---:|---:|---:|---:|---:|---:|---|---|---:|---|\n",
    );
    for r in &s.results {
        let _ = writeln!(
            t,
            "| {} / {} / {} | {:.0} ({:.0}) | {:.0}{} | {} | {}{} | {} | {} | {:.0} / {:.0} / {:.0} | {:.0} / {:.0} | {:.0} | {} |",
            r.step.sessions,
            r.step.holds,
            r.step.grants_per_sec,
            r.keepalives_per_sec,
            r.keepalives_at_etcd_per_sec,
            r.grants_per_sec,
            if r.failed > 0 {
                format!(" ({} failed)", r.failed)
            } else {
                String::new()
            },
            r.p50_us,
            r.p99_us,
            if std::time::Duration::from_micros(r.p99_us) > P99_BUDGET {
                " **> 40 ms**"
            } else {
                ""
            },
            r.floor_p99_us,
            r.fsync_max_ms
                .map_or("–".to_owned(), |ms| format!("≤ {ms:.0}")),
            r.arbiter_cpu,
            r.etcd_cpu,
            r.load_cpu,
            r.arbiter_rss_mib,
            r.etcd_rss_mib,
            r.build_secs,
            r.saturated()
        );
    }
    let crossed = s
        .results
        .iter()
        .find(|r| Duration::from_micros(r.p99_us) > P99_BUDGET);
    let _ = writeln!(
        t,
        "\n{}{}",
        match crossed {
            Some(r) => format!(
                "Grant p99 crosses 40 ms at {} sessions / {} holds / {} grants/s.",
                r.step.sessions, r.step.holds, r.step.grants_per_sec
            ),
            None => "Grant p99 stayed within 40 ms at every step run.".to_owned(),
        },
        s.stopped
            .as_ref()
            .map(|w| format!(" Stopped early: {w}."))
            .unwrap_or_default()
    );
    t
}
