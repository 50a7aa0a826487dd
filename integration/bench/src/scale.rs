//! Load at the scale the design records size for: many renewing sessions, many held keys,
//! queued waiters and a steady grant rate, straight at one arbiter (the entity cluster's
//! side: etcd + arbiter; the edge scales separately).
//!
//! - [`memory`]: the arbiter's and etcd's resident memory idle, with 100,000 held keys, and
//!   with 10,000 waiters queued on them.
//! - [`steps`]: sessions (renewing every 5 s, TTL/3 of a 15 s class), holds (6.25 per
//!   session, the records' 250,000 / 40,000) and an open-loop grant rate driven up in steps;
//!   per step keepalives/s, grants/s, grant p50/p99 and CPU and memory of arbiter, etcd and
//!   the load generator, until the last step or the time budget.
//!
//! Every loop is bounded in count and time; a step that cannot be built in time is reported,
//! not waited for.

use super::Env;
use anyhow::Context as _;
use lock_client::proto::lock_client::LockClient;
use lock_config::proto::v1::{
    AcquireRequest, CloseSessionRequest, InspectRequest, KeepAliveRequest, OpenSessionRequest,
    ReleaseRequest,
};
use lock_integration::as_from_edge;
use lock_integration::registry::{GATE_CLIENTS, SCALE_PREFIX, SCALE_TTL, gate_id};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

/// The design's grant latency budget (p99).
pub const P99_BUDGET: Duration = Duration::from_millis(40);
/// How often each session renews: TTL/3, as lock-client does.
const RENEW_EVERY: Duration = Duration::from_secs(SCALE_TTL as u64 / 3);
/// Sessions one KeepAlive stream carries (the arbiter allows 16).
const SESSIONS_PER_STREAM: usize = 16;
/// Requests in flight while building sessions and holds.
const BUILD_CONCURRENCY: usize = 64;
/// Connections to the arbiter the load is spread over.
const CONNECTIONS: usize = 32;

/// A session opened straight at the arbiter, and the identity that owns it.
#[derive(Clone)]
struct Session {
    id: i64,
    identity: String,
}

struct Conns(Vec<LockClient<Channel>>);

impl Conns {
    async fn open(env: &Env) -> anyhow::Result<Self> {
        let mut v = Vec::with_capacity(CONNECTIONS);
        for _ in 0..CONNECTIONS {
            v.push(env.stack.arbiter_direct(0).await?);
        }
        Ok(Self(v))
    }

    fn get(&self, i: usize) -> LockClient<Channel> {
        self.0[i % self.0.len()].clone()
    }
}

/// Runs `f(i)` for `i` in `range` with at most `concurrency` in flight; fails when any call
/// fails or the whole batch is not done by `deadline`.
async fn bounded_batch<T, F, Fut>(
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
async fn open_sessions(
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
fn acquire_request(key: &str, s: &Session, wait_millis: u64) -> tonic::Request<AcquireRequest> {
    as_from_edge(
        AcquireRequest {
            key: key.to_owned(),
            session_id: s.id,
            wait_millis,
        },
        Some(key),
        Some(&s.identity),
    )
}

/// Acquires keys `{prefix}/{i}` for `i` in `range`, key `i` by session `i % len`.
async fn hold_keys(
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
async fn close_sessions(conns: &Arc<Conns>, sessions: &Arc<Vec<Session>>) -> usize {
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
struct Renewer {
    tasks: JoinSet<()>,
    ok: Arc<AtomicU64>,
    broken_streams: Arc<AtomicU64>,
    streams: usize,
}

impl Renewer {
    fn add(&mut self, conns: &Conns, sessions: &[Session]) {
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

    fn stream(&mut self, mut c: LockClient<Channel>, identity: String, ids: Vec<i64>) {
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

/// CPU time and resident memory of one process, from /proc.
#[derive(Clone, Copy)]
struct ProcSample {
    cpu: Duration,
    rss_mib: f64,
    at: Instant,
}

fn sample(pid: u32) -> anyhow::Result<ProcSample> {
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
fn cpu_percent(a: &ProcSample, b: &ProcSample) -> f64 {
    let wall = b.at.duration_since(a.at).as_secs_f64().max(1e-9);
    100.0 * b.cpu.saturating_sub(a.cpu).as_secs_f64() / wall
}

struct Pids {
    arbiter: u32,
    etcd: u32,
}

fn pids(env: &Env) -> anyhow::Result<Pids> {
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
fn write_heap_profile(arbiter: u32) -> anyhow::Result<bool> {
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
async fn count_queued(
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
async fn measure_step(
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
        p50_us: super::percentile(&lat, 0.50),
        p99_us: super::percentile(&lat, 0.99),
        failed: grants.failed,
        shed: grants.shed,
        arbiter_cpu: cpu_percent(&a0, &a1),
        etcd_cpu: cpu_percent(&e0, &e1),
        load_cpu: cpu_percent(&l0, &l1),
        arbiter_rss_mib: a1.rss_mib,
        etcd_rss_mib: e1.rss_mib,
        broken_streams: renewer.broken_streams.load(Ordering::Relaxed) - broken0,
        fsync_max_ms: bucket_quantile(&fsync0, &fsync, 1.0).map(|s| s * 1000.0),
        floor_p99_us: super::percentile(&floor, 0.99),
    })
}

/// etcd's WAL fsync histogram: (upper bound in seconds, cumulative count).
fn fsync_buckets(env: &Env) -> anyhow::Result<Vec<(f64, u64)>> {
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
fn bucket_quantile(before: &[(f64, u64)], after: &[(f64, u64)], q: f64) -> Option<f64> {
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

/// Raw etcd grant-shaped transactions (put-if-absent with a lease, then delete) per second
/// beside each step's grant load.
const FLOOR_RATE: u32 = 50;

/// Open loop of raw grant-shaped Txn + delete at `rate` for `window`; Txn latencies (µs).
async fn floor_load(
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
            kv.txn(super::grant_shaped_txn(&key, lease)).await?;
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

struct GrantLoad {
    latencies_us: Vec<u64>,
    failed: u64,
    shed: u64,
}

/// Open loop: a grant (Acquire of a fresh key, then its Release) every 1/rate s for
/// `window`; a grant is shed rather than queued in the load generator when 1,000 are
/// already in flight. Latency is the Acquire's.
async fn grant_load(
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
