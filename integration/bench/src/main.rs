//! `bench`: side-by-side lock benchmarks in one run on one machine (`make bench`).
//!
//! Uncontended acquire+release (each worker its own key) at concurrency 1, 16 and 64 for:
//! the floor (a raw etcd grant-shaped Txn and a compare-delete Txn), etcd's own lock service
//! (v3lock Lock/Unlock), the arbiter called directly, the full path (Envoy + filter +
//! arbiter, mTLS), Redis SET NX PX + compare-and-delete script, PostgreSQL advisory locks.
//! Reports throughput, p50 and p99, and ratios to the floor and to v3lock. etcd runs with
//! fsync on (the service as shipped); Redis with its default no-fsync; PostgreSQL default.
//!
//! Also: one hot key with 64 waiters (handoffs, handoff latency, etcd writes and grant
//! attempts per handoff), renewal cost with 1 and 500 holds per session, the filter's own
//! cost (the same Envoy with and without it), the authoriser with 100,000 grants (natively
//! and in wasm under V8), the arbiter's and etcd's memory with 100,000 held keys and 10,000
//! queued waiters, the design's scale point driven up in steps (`scale.rs`), and SVG charts.

mod chart;
mod filter_cost;
mod hot_key;
mod redis_server;
mod renewal;
mod scale;
mod shards;

use crate::redis_server::Redis;
use anyhow::Context as _;
use clap::Parser;
use etcd_client::{Compare, CompareOp, LockOptions, PutOptions, Txn, TxnOp};
use lock_client::proto::lock_client::LockClient;
use lock_config::proto::v1::{AcquireRequest, OpenSessionRequest, ReleaseRequest};
use lock_integration::pki::OPERATOR;
use lock_integration::postgres::Postgres;
use lock_integration::registry::write_test_registry;
use lock_integration::{Stack, StackOptions};
use lock_pause_test::connect;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// Every workload, in the order they run.
const WORKLOADS: &str = "uncontended,hot,renewal,filter,memory,scale,scale-tmpfs,shards";

#[derive(Parser)]
struct Args {
    /// Seconds per (system, concurrency) cell.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    #[arg(long, default_value = "1,16,64", value_delimiter = ',')]
    concurrency: Vec<usize>,
    /// Where latest.md (a run of every workload) or partial.md and the charts are written.
    #[arg(long, default_value = "bench-results")]
    out: PathBuf,
    /// Waiters on the hot key.
    #[arg(long, default_value_t = 64)]
    waiters: usize,
    /// Workloads to run.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = WORKLOADS
    )]
    only: Vec<String>,
    /// Held keys and queued waiters for the memory measurement.
    #[arg(long, default_value_t = 100_000)]
    memory_holds: usize,
    #[arg(long, default_value_t = 10_000)]
    memory_waiters: usize,
    /// Queued waiters per held key in the memory measurement (each key has one head).
    #[arg(long, default_value_t = 10)]
    memory_waiters_per_key: usize,
    /// Scale steps: the largest step's sessions (the records' point is 40,000).
    #[arg(long, default_value_t = 40_000)]
    scale_max_sessions: usize,
    /// Scale steps: seconds of grant load measured per step.
    #[arg(long, default_value_t = 8)]
    scale_window: u64,
    /// Scale steps: no new step starts after this many seconds.
    #[arg(long, default_value_t = 200)]
    scale_budget: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum System {
    RawTxn,
    V3Lock,
    ArbiterDirect,
    /// The same arbiter hop without TLS (`--insecure-plaintext`, never deployed): beside
    /// `ArbiterDirect` it prices the mutual TLS every edge-to-arbiter hop pays.
    ArbiterPlaintext,
    FullPath,
    /// The full path for a client that does not send `lock-key` (grpcurl, other stubs):
    /// the edge pauses for the body.
    FullPathBody,
    Redis,
    Postgres,
}

impl System {
    const ALL: [System; 8] = [
        System::RawTxn,
        System::V3Lock,
        System::ArbiterDirect,
        System::ArbiterPlaintext,
        System::FullPath,
        System::FullPathBody,
        System::Redis,
        System::Postgres,
    ];

    fn name(self) -> &'static str {
        match self {
            System::RawTxn => "etcd raw Txn (floor)",
            System::V3Lock => "etcd v3lock",
            System::ArbiterDirect => "arbiter direct (mTLS)",
            System::ArbiterPlaintext => "arbiter direct, plaintext (unsafe baseline)",
            System::FullPath => "full path (Envoy+filter+arbiter)",
            System::FullPathBody => "full path, key in the body only (no lock-key)",
            System::Redis => "Redis SET NX PX",
            System::Postgres => "PostgreSQL advisory",
        }
    }
}

struct Env {
    stack: Stack,
    /// A second arbiter on the same etcd, plaintext: the TLS cost's baseline.
    plaintext: lock_integration::arbiter::Arbiter,
    redis: Redis,
    pg: Postgres,
}

/// One cell's result.
struct Cell {
    ops: usize,
    secs: f64,
    p50_us: u64,
    p99_us: u64,
    /// Latency at each of [`chart::PERCENTILES`], for the charts.
    curve: Vec<u64>,
    /// etcd raft proposals committed per operation (None: not an etcd system). An
    /// acquire+release is two writes; fewer means writes were shared (group commit).
    proposals: Option<f64>,
}

/// The floor's grant: put `key` with `lease` if it does not exist, as the arbiter's grant
/// transaction does without its epoch and session compares.
fn grant_shaped_txn(key: &str, lease: i64) -> Txn {
    Txn::new()
        .when(vec![Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then(vec![TxnOp::put(
            key,
            "holder",
            Some(PutOptions::new().with_lease(lease)),
        )])
}

/// Latency (µs) at percentile `p` of sorted `lat`.
fn percentile(lat: &[u64], p: f64) -> u64 {
    lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0)
}

/// The authoriser with `n` grants (one identity each, one prefix each): compile time and
/// mean lookup time over a million lookups (half granted, half not), natively and inside a
/// wasm engine: the same code (`lock_filter::cost`) built as `authoriser_cost.wasm` and run
/// under Node's WASI, whose V8 is the engine family of Envoy's wasm runtime.
fn authoriser_cost(n: usize) -> anyhow::Result<String> {
    const LOOKUPS: usize = 1_000_000;
    let native = lock_filter::cost::measure(n, LOOKUPS)?;
    let mut rows = format!(
        "| authoriser, {n} grants (native) | compile {:.0} ms | lookup {:.0} ns mean over {LOOKUPS} |\n",
        native.compile.as_secs_f64() * 1000.0,
        native.per_lookup_ns
    );
    match authoriser_cost_in_wasm(n, LOOKUPS) {
        Ok(line) => rows.push_str(&line),
        Err(e) => {
            // Reported in the table rather than failing the run: the other rows stand.
            eprintln!("authoriser in wasm: {e:#}");
            rows.push_str(&format!(
                "| authoriser, {n} grants (wasm, V8) | not measured: {e} | |\n"
            ));
        }
    }
    Ok(rows)
}

fn authoriser_cost_in_wasm(n: usize, lookups: usize) -> anyhow::Result<String> {
    let root = lock_integration::paths::workspace_root();
    let wasm = root.join("target/wasm32-wasip1/release/authoriser_cost.wasm");
    anyhow::ensure!(
        wasm.exists(),
        "{} not found: `cargo build --release -p lock-filter --target wasm32-wasip1` builds it",
        wasm.display()
    );
    let out = std::process::Command::new("node")
        .arg("--no-warnings")
        .arg(root.join("integration/scripts/run-wasi.mjs"))
        .arg(&wasm)
        .args([n.to_string(), lookups.to_string()])
        .output()
        .context("running node (integration/scripts/install-deps.sh installs it)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    anyhow::ensure!(
        out.status.success(),
        "authoriser_cost.wasm failed: {}{}",
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    let field = |name: &str| -> anyhow::Result<f64> {
        text.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .with_context(|| format!("no {name} in {text:?}"))?
            .parse::<f64>()
            .with_context(|| format!("{name} in {text:?}"))
    };
    let engine = std::process::Command::new("node")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    Ok(format!(
        "| authoriser, {n} grants (wasm, V8 of Node {engine}) | compile {:.0} ms | lookup {:.0} ns mean over {lookups} |\n",
        field("compile_ms")?,
        field("per_lookup_ns")?
    ))
}

/// The bench's stack (one arbiter, Envoy, etcd), a plaintext arbiter beside it, Redis and
/// PostgreSQL; in `dir` if given (the scale steps on tmpfs), else a temp folder on disk.
async fn start_env(registry: &std::path::Path, dir: Option<PathBuf>) -> anyhow::Result<Env> {
    let stack = Stack::start(StackOptions {
        arbiters: 1,
        registry: registry.to_path_buf(),
        keep_dir: dir,
        ..Default::default()
    })
    .await?;
    let redis = Redis::start(&stack.dir)?;
    let pg = Postgres::start(&stack.dir)?;
    let plaintext = lock_integration::arbiter::Arbiter::start_with(
        &stack.dir,
        "arbiter-plaintext",
        &stack.etcd_access(),
        registry,
        &stack.pki,
        &["--insecure-plaintext"],
    )?;
    Ok(Env {
        stack,
        plaintext,
        redis,
        pg,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let run = |w: &str| args.only.iter().any(|o| o == w);
    let authoriser = authoriser_cost(100_000)?;
    eprint!("{authoriser}");
    // The test registry: the dev classes plus a long-TTL bench class and 64 identities
    // (hot-key waiters need one each).
    let registry_dir = tempfile::tempdir()?;
    let registry = write_test_registry(registry_dir.path())?;
    let env = start_env(&registry, None).await?;
    let mut results = Vec::new();
    let concurrency = if run("uncontended") {
        args.concurrency.clone()
    } else {
        Vec::new()
    };
    for &c in &concurrency {
        for sys in System::ALL {
            let cell = measure(&env, sys, c, Duration::from_secs(args.seconds))
                .await
                .with_context(|| format!("{} at concurrency {c}", sys.name()))?;
            eprintln!(
                "{:<34} c={c:<3} {:>8.0} ops/s  p50 {:>6} us  p99 {:>6} us",
                sys.name(),
                cell.ops as f64 / cell.secs,
                cell.p50_us,
                cell.p99_us
            );
            results.push((sys, c, cell));
        }
    }
    let mut table = format!(
        "{}\n| measurement | | |\n|---|---|---|\n{authoriser}",
        render(&results)
    );
    std::fs::create_dir_all(&args.out)?;
    for &c in &concurrency {
        let curves: Vec<chart::Curve> = results
            .iter()
            .filter(|(_, cc, _)| *cc == c)
            .map(|(sys, _, cell)| chart::Curve {
                label: sys.name().to_owned(),
                us: cell.curve.clone(),
            })
            .collect();
        let svg = chart::percentiles_svg(
            &format!("acquire+release latency by percentile, uncontended, concurrency {c}"),
            &curves,
        );
        std::fs::write(args.out.join(format!("latency-c{c}.svg")), svg)?;
    }
    if run("hot") {
        let mut hot = Vec::new();
        for sys in hot_key::HotSystem::ALL {
            let cell = hot_key::measure(&env, sys, args.waiters, Duration::from_secs(args.seconds))
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
        table.push_str(&render_hot(&hot, args.waiters));
        let curves: Vec<chart::Curve> = hot
            .iter()
            .map(|(sys, cell)| chart::Curve {
                label: sys.name().to_owned(),
                us: cell.curve.clone(),
            })
            .collect();
        let svg = chart::percentiles_svg(
            &format!(
                "hot-key handoff latency by percentile, {} waiters",
                args.waiters
            ),
            &curves,
        );
        std::fs::write(args.out.join("handoff.svg"), svg)?;
    }
    if run("renewal") {
        let mut rows = Vec::new();
        for holds in [1, 500] {
            let r = renewal::measure(&env, holds, Duration::from_secs(10)).await?;
            eprintln!(
                "renewal: {} holds -> {:.2} keepalives/s at etcd",
                r.holds, r.keepalives_per_sec
            );
            rows.push(r);
        }
        table.push_str(&format!(
            "\n| holds on one session | keepalives/s reaching etcd (expected {:.2}: one per TTL/3) |\n|---:|---:|\n",
            renewal::expected_per_sec()
        ));
        for r in rows {
            table.push_str(&format!("| {} | {:.2} |\n", r.holds, r.keepalives_per_sec));
        }
    }
    if run("filter") {
        let plain = filter_cost::start_plain_envoy(&env)?;
        table.push_str("\n| filter cost | p50 with filter µs | p50 without µs | per request µs | ops/s with | ops/s without |\n|---|---:|---:|---:|---:|---:|\n");
        for c in [1, 16] {
            let f = filter_cost::measure(&env, &plain, c, 3, Duration::from_secs(2)).await?;
            eprintln!(
                "filter cost c={c}: p50 {} us with, {} us without: {:.0} us per request",
                f.with_p50_us,
                f.without_p50_us,
                f.per_request_us()
            );
            table.push_str(&format!(
                "| acquire+release, concurrency {} (median of 3 alternating 2 s cells) | {} | {} | {:.0} | {:.0} | {:.0} |\n",
                f.concurrency,
                f.with_p50_us,
                f.without_p50_us,
                f.per_request_us(),
                f.with_ops,
                f.without_ops
            ));
        }
    }
    if run("filter") {
        let rows = filter_cost::denials(&env, 300).await?;
        table.push_str("\n| NOT_GRANTED for an identity without a grant (300 sequential Inspects each) | path | p50 µs | p99 µs |\n|---|---|---:|---:|\n");
        for d in rows {
            let path = if d.fast { "lock-key (fast)" } else { "body" };
            eprintln!(
                "denial {} {path}: p50 {} us p99 {} us",
                d.state, d.p50_us, d.p99_us
            );
            table.push_str(&format!(
                "| {} key | {path} | {} | {} |\n",
                d.state, d.p50_us, d.p99_us
            ));
        }
    }
    if run("memory") {
        let m = scale::memory(
            &env,
            args.memory_holds,
            args.memory_waiters,
            args.memory_waiters_per_key,
        )
        .await?;
        table.push_str(&format!(
            "\n| memory, {} held keys and {} queued waiters on {} of them (one arbiter) | arbiter RSS MiB | etcd RSS MiB |\n|---|---:|---:|\n",
            m.holds, m.waiters, m.keys_waited
        ));
        for (stage, arbiter, etcd) in &m.stages {
            table.push_str(&format!("| {stage} | {arbiter:.1} | {etcd:.1} |\n"));
        }
    }
    if run("scale") {
        let plan = scale::plan(args.scale_max_sessions);
        let s = scale::steps(
            &env,
            &plan,
            Duration::from_secs(args.scale_window),
            Duration::from_secs(args.scale_budget),
        )
        .await?;
        table.push_str(&render_scale(&s));
        let labels: Vec<String> = s
            .results
            .iter()
            .map(|r| format!("{}k s", r.step.sessions / 1000))
            .collect();
        let curve = |label: &str, f: fn(&scale::StepResult) -> u64| chart::Curve {
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
                u64::try_from(scale::P99_BUDGET.as_micros()).unwrap_or(u64::MAX),
                "p99 budget 40 ms",
            )),
        );
        std::fs::write(args.out.join("scale.svg"), svg)?;
    }
    if run("scale-tmpfs") {
        // The same steps with etcd's data directory on tmpfs, on a fresh stack: the disk's
        // fsync stalls set the tail of the run above, and this one shows the software's own.
        drop(env);
        let shm = tempfile::Builder::new()
            .prefix("lock-bench-tmpfs-")
            .tempdir_in("/dev/shm")
            .context("a folder on /dev/shm (tmpfs)")?;
        let on_tmpfs = start_env(&registry, Some(shm.path().to_path_buf())).await?;
        let plan = scale::plan(args.scale_max_sessions);
        let s = scale::steps(
            &on_tmpfs,
            &plan,
            Duration::from_secs(args.scale_window),
            Duration::from_secs(args.scale_budget),
        )
        .await?;
        table.push_str(
            "\nThe same scale steps with etcd's data directory on tmpfs (tmpfs: not durable; isolates the software from fsync stalls):\n",
        );
        table.push_str(&render_scale(&s));
        drop(on_tmpfs);
    }
    if run("shards") {
        // Last: every cluster is on this machine, so nothing else may run beside them.
        let mut rows = Vec::new();
        for n in [0, 1, 2] {
            let row = shards::measure(&registry, n, 16, Duration::from_secs(args.seconds)).await?;
            eprintln!(
                "shards={n}: {:.0} ops/s p50 {} us p99 {} us, proposals/s {:?}",
                row.cell.ops as f64 / row.cell.secs,
                row.cell.p50_us,
                row.cell.p99_us,
                row.writes_per_sec
            );
            rows.push(row);
        }
        table.push_str(&shards::render(&rows, 16));
    }
    println!("{table}");
    std::fs::create_dir_all(&args.out)?;
    // Only a run of every workload replaces latest.md (the manual's performance page includes it);
    // a run narrowed with --only writes partial.md beside it.
    let all = WORKLOADS.split(',').all(run);
    let name = if all { "latest.md" } else { "partial.md" };
    std::fs::write(args.out.join(name), &table)?;
    eprintln!("written: {}", args.out.join(name).display());
    Ok(())
}

fn render_scale(s: &scale::Scale) -> String {
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
            if std::time::Duration::from_micros(r.p99_us) > scale::P99_BUDGET {
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
        .find(|r| Duration::from_micros(r.p99_us) > scale::P99_BUDGET);
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

async fn measure(env: &Env, sys: System, workers: usize, length: Duration) -> anyhow::Result<Cell> {
    let mut ops = Vec::new();
    for w in 0..workers {
        ops.push(Op::new(env, sys, w).await?);
    }
    let on_etcd = !matches!(sys, System::Redis | System::Postgres);
    let proposals = || {
        env.stack
            .etcd
            .metric("etcd_server_proposals_committed_total")
    };
    let before = if on_etcd { proposals()? } else { 0 };
    let mut cell = measure_ops(ops, length).await?;
    if on_etcd {
        let during = proposals()?.saturating_sub(before);
        cell.proposals = Some(during as f64 / cell.ops.max(1) as f64);
    }
    Ok(cell)
}

/// Runs prepared workers side by side for `length`; latencies of every operation.
async fn measure_ops(ops: Vec<Op>, length: Duration) -> anyhow::Result<Cell> {
    let mut tasks = Vec::new();
    let start_at = Instant::now() + Duration::from_millis(500);
    let stop_at = start_at + length;
    for op in ops {
        tasks.push(tokio::spawn(async move { op.run(start_at, stop_at).await }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await??);
    }
    lat.sort_unstable();
    Ok(Cell {
        ops: lat.len(),
        secs: length.as_secs_f64(),
        p50_us: percentile(&lat, 0.50),
        p99_us: percentile(&lat, 0.99),
        curve: chart::PERCENTILES
            .iter()
            .map(|p| percentile(&lat, *p))
            .collect(),
        proposals: None,
    })
}

/// A worker's connection and key, set up before timing starts.
enum Op {
    RawTxn {
        kv: etcd_client::Client,
        key: String,
        lease: i64,
    },
    V3Lock {
        etcd: etcd_client::Client,
        name: String,
        lease: i64,
    },
    Arbiter {
        c: LockClient<Channel>,
        key: String,
        session: i64,
        route: Route,
    },
    Redis {
        conn: redis::aio::MultiplexedConnection,
        key: String,
        script: redis::Script,
    },
    Postgres {
        db: tokio_postgres::Client,
        id: i64,
    },
}

/// How a worker's requests travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// Through the edge with the key as `lock-key` metadata (the fast path).
    Edge,
    /// Through the edge with the key in the body only.
    EdgeBody,
    /// With the headers the edge would set: straight to an arbiter, or through an Envoy
    /// without the filter.
    SetHeaders,
}

/// Through Envoy the edge sets the headers; straight to the arbiter the bench does.
fn with_headers<T>(msg: T, key: &str, route: Route) -> tonic::Request<T> {
    match route {
        Route::Edge => lock_integration::routed(msg, key, None),
        Route::EdgeBody => tonic::Request::new(msg),
        Route::SetHeaders => lock_integration::routed(msg, key, Some(OPERATOR)),
    }
}

impl Op {
    async fn new(env: &Env, sys: System, w: usize) -> anyhow::Result<Self> {
        let key = format!("pay/ledger/bench-{w}");
        Ok(match sys {
            System::RawTxn | System::V3Lock => {
                let mut etcd = env.stack.etcd_client().await?;
                let lease = etcd.lease_grant(60, None).await?.id();
                if sys == System::RawTxn {
                    Op::RawTxn {
                        kv: etcd,
                        key: format!("/bench/raw/{w}"),
                        lease,
                    }
                } else {
                    Op::V3Lock {
                        etcd,
                        name: format!("/bench/v3lock/{w}"),
                        lease,
                    }
                }
            }
            System::ArbiterDirect
            | System::ArbiterPlaintext
            | System::FullPath
            | System::FullPathBody => {
                let route = match sys {
                    System::FullPath => Route::Edge,
                    System::FullPathBody => Route::EdgeBody,
                    _ => Route::SetHeaders,
                };
                let c = match sys {
                    System::ArbiterDirect => env.stack.arbiter_direct(0).await?,
                    System::ArbiterPlaintext => {
                        LockClient::connect(format!("http://{}", env.plaintext.addr)).await?
                    }
                    _ => env.stack.workload(OPERATOR).await?,
                };
                Op::arbiter(c, key, route).await?
            }
            System::Redis => {
                let client = redis::Client::open(env.redis.url())?;
                let conn = client.get_multiplexed_async_connection().await?;
                let script = redis::Script::new(
                    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end",
                );
                Op::Redis {
                    conn,
                    key: format!("bench:{w}"),
                    script,
                }
            }
            System::Postgres => Op::Postgres {
                db: connect(&env.pg.url()).await?,
                id: 1_000 + i64::try_from(w)?,
            },
        })
    }

    /// An arbiter worker over `c`, its requests sent by `route`.
    /// The session's TTL (30 s) outlasts a cell, so no renewals run.
    async fn arbiter(
        mut c: LockClient<Channel>,
        key: String,
        route: Route,
    ) -> anyhow::Result<Self> {
        let session = c
            .open_session(with_headers(
                OpenSessionRequest { key: key.clone() },
                &key,
                route,
            ))
            .await?
            .into_inner()
            .session_id;
        Ok(Op::Arbiter {
            c,
            key,
            session,
            route,
        })
    }

    /// Acquire+release in a loop between the two instants; latencies in µs.
    async fn run(mut self, start_at: Instant, stop_at: Instant) -> anyhow::Result<Vec<u64>> {
        tokio::time::sleep_until(start_at.into()).await;
        let mut lat = Vec::new();
        let mut n = 0u64;
        while Instant::now() < stop_at && lat.len() < 5_000_000 {
            let t = Instant::now();
            self.once(n).await?;
            lat.push(u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX));
            n += 1;
        }
        Ok(lat)
    }

    async fn once(&mut self, n: u64) -> anyhow::Result<()> {
        match self {
            Op::RawTxn { kv, key, lease } => {
                let r = kv.txn(grant_shaped_txn(key, *lease)).await?;
                anyhow::ensure!(r.succeeded(), "raw grant refused");
                let rev = r.header().map_or(0, |h| h.revision());
                let release = Txn::new()
                    .when(vec![Compare::create_revision(
                        key.as_str(),
                        CompareOp::Equal,
                        rev,
                    )])
                    .and_then(vec![TxnOp::delete(key.as_str(), None)]);
                kv.txn(release).await?;
            }
            Op::V3Lock { etcd, name, lease } => {
                let r = etcd
                    .lock(name.as_str(), Some(LockOptions::new().with_lease(*lease)))
                    .await?;
                etcd.unlock(r.key()).await?;
            }
            Op::Arbiter {
                c,
                key,
                session,
                route,
            } => {
                let g = c
                    .acquire(with_headers(
                        AcquireRequest {
                            key: key.clone(),
                            session_id: *session,
                            wait_millis: 0,
                        },
                        key,
                        *route,
                    ))
                    .await?
                    .into_inner();
                c.release(with_headers(
                    ReleaseRequest {
                        key: key.clone(),
                        token: g.token,
                        session_id: *session,
                    },
                    key,
                    *route,
                ))
                .await?;
            }
            Op::Redis { conn, key, script } => {
                let token = n.to_string();
                let ok: Option<String> = redis::cmd("SET")
                    .arg(key.as_str())
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(30_000)
                    .query_async(conn)
                    .await?;
                anyhow::ensure!(ok.is_some(), "redis lock refused");
                let _: i64 = script
                    .key(key.as_str())
                    .arg(&token)
                    .invoke_async(conn)
                    .await?;
            }
            Op::Postgres { db, id } => {
                db.execute("SELECT pg_advisory_lock($1)", &[id]).await?;
                db.execute("SELECT pg_advisory_unlock($1)", &[id]).await?;
            }
        }
        Ok(())
    }
}

fn render_hot(rows: &[(hot_key::HotSystem, hot_key::HotCell)], waiters: usize) -> String {
    let mut out = format!(
        "\n| one hot key, {waiters} waiters | handoffs/s | handoff p50 µs | p99 µs | etcd proposals / handoff | Txn / handoff | grant attempts / handoff | handoffs ÷ v3lock |\n|---|---:|---:|---:|---:|---:|---:|---:|\n"
    );
    let v3 = rows
        .iter()
        .find(|(s, _)| *s == hot_key::HotSystem::V3Lock)
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
    out
}

fn render(results: &[(System, usize, Cell)]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| system | concurrency | ops/s | p50 µs | p99 µs | ops/s ÷ floor | p50 ÷ floor | ops/s ÷ v3lock | etcd proposals / op |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for (sys, c, cell) in results {
        let find = |s: System| {
            results
                .iter()
                .find(|(x, y, _)| *x == s && y == c)
                .map(|r| &r.2)
        };
        let tput = |x: &Cell| x.ops as f64 / x.secs;
        let floor = find(System::RawTxn);
        let v3 = find(System::V3Lock);
        let _ = writeln!(
            out,
            "| {} | {c} | {:.0} | {} | {} | {:.2} | {:.2} | {:.2} | {} |",
            sys.name(),
            tput(cell),
            cell.p50_us,
            cell.p99_us,
            floor.map_or(0.0, |f| tput(cell) / tput(f)),
            floor.map_or(0.0, |f| cell.p50_us as f64 / f.p50_us.max(1) as f64),
            v3.map_or(0.0, |v| tput(cell) / tput(v)),
            cell.proposals.map_or("–".to_owned(), |p| format!("{p:.2}")),
        );
    }
    out
}
