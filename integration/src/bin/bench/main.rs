//! `bench`: side-by-side lock benchmarks in one run on one machine (`make bench`).
//!
//! Uncontended acquire+release (each worker its own key) at concurrency 1, 16 and 64 for:
//! the floor (a raw etcd grant-shaped Txn and a compare-delete Txn), etcd's own lock service
//! (v3lock Lock/Unlock), the arbiter called directly, the full path (Envoy + filter +
//! arbiter, mTLS), Redis SET NX PX + compare-and-delete script, PostgreSQL advisory locks.
//! Reports throughput, p50 and p99, and ratios to the floor and to v3lock. etcd runs with
//! fsync on (the service as shipped); Redis with its default no-fsync; PostgreSQL default.
//!
//! Not yet measured (issue 8 stays open): the hot-key handoff workload, renewal cost, the
//! filter's own cost, authoriser lookups at 100,000 grants, memory, the scale steps, charts.

use anyhow::Context as _;
use clap::Parser;
use etcd_client::{Compare, CompareOp, LockOptions, PutOptions, Txn, TxnOp};
use lock_arbiter::proto::lock_client::LockClient;
use lock_config::proto::v1::{AcquireRequest, OpenSessionRequest, ReleaseRequest};
use lock_integration::pki::OPERATOR;
use lock_integration::postgres::{Postgres, connect};
use lock_integration::redis::Redis;
use lock_integration::{Stack, StackOptions};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

#[derive(Parser)]
struct Args {
    /// Seconds per (system, concurrency) cell.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    #[arg(long, default_value = "1,16,64", value_delimiter = ',')]
    concurrency: Vec<usize>,
    /// Where results/latest.md is written.
    #[arg(long, default_value = "bench-results")]
    out: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum System {
    RawTxn,
    V3Lock,
    ArbiterDirect,
    FullPath,
    Redis,
    Postgres,
}

impl System {
    const ALL: [System; 6] = [
        System::RawTxn,
        System::V3Lock,
        System::ArbiterDirect,
        System::FullPath,
        System::Redis,
        System::Postgres,
    ];

    fn name(self) -> &'static str {
        match self {
            System::RawTxn => "etcd raw Txn (floor)",
            System::V3Lock => "etcd v3lock",
            System::ArbiterDirect => "arbiter direct",
            System::FullPath => "full path (Envoy+filter+arbiter)",
            System::Redis => "Redis SET NX PX",
            System::Postgres => "PostgreSQL advisory",
        }
    }
}

struct Env {
    stack: Stack,
    redis: Redis,
    pg: Postgres,
}

/// One cell's result.
struct Cell {
    ops: usize,
    secs: f64,
    p50_us: u64,
    p99_us: u64,
}

/// The authoriser with `n` grants (one identity each, one prefix each): compile time and
/// mean lookup time over a million lookups (half granted, half not), natively.
fn authoriser_cost(n: usize) -> anyhow::Result<String> {
    use lock_config::filter_config::{FilterConfig, FilterGrant};
    let config = FilterConfig {
        region: "local".into(),
        trust_domains: vec!["dev.lock.local".into()],
        namespaces: [("pay".to_owned(), "local".to_owned())].into(),
        grants: (0..n)
            .map(|i| FilterGrant {
                spiffe_id: format!("spiffe://dev.lock.local/ns/pay/sa/svc-{i}"),
                prefixes: vec![format!("pay/p{}/x{i}", i % 1000)],
                rate: None,
            })
            .collect(),
        default_rate: None,
    };
    let t = Instant::now();
    let compiled = config.compile()?;
    let compile = t.elapsed();
    const LOOKUPS: usize = 1_000_000;
    let probes: Vec<(String, lock_config::LockKey)> = (0..1000)
        .map(|j| {
            let i = (j * 7919) % n;
            // Even probes are covered by the identity's grant, odd ones are not.
            let key = if j % 2 == 0 {
                format!("pay/p{}/x{i}/42", i % 1000)
            } else {
                format!("pay/p{}/y{i}", i % 1000)
            };
            lock_config::LockKey::parse(&key)
                .map(|k| (format!("spiffe://dev.lock.local/ns/pay/sa/svc-{i}"), k))
        })
        .collect::<Result<_, _>>()?;
    let t = Instant::now();
    let mut granted = 0usize;
    for k in 0..LOOKUPS {
        let (id, key) = &probes[k % probes.len()];
        granted += usize::from(
            compiled
                .authoriser
                .authorise(std::hint::black_box(id), key)
                .is_some(),
        );
    }
    let per = t.elapsed().as_nanos() as f64 / LOOKUPS as f64;
    anyhow::ensure!(
        granted == LOOKUPS / 2,
        "lookup results are wrong: {granted}"
    );
    Ok(format!(
        "| authoriser, {n} grants (native) | compile {:.0} ms | lookup {per:.0} ns mean over {LOOKUPS} |\n",
        compile.as_secs_f64() * 1000.0
    ))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let authoriser = authoriser_cost(100_000)?;
    eprint!("{authoriser}");
    let stack = Stack::start(StackOptions {
        arbiters: 1,
        ..Default::default()
    })
    .await?;
    let redis = Redis::start(&stack.dir)?;
    let pg = Postgres::start(&stack.dir)?;
    let env = Env { stack, redis, pg };
    let mut results = Vec::new();
    for &c in &args.concurrency {
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
    let table = format!(
        "{}\n| measurement | | |\n|---|---|---|\n{authoriser}",
        render(&results)
    );
    println!("{table}");
    std::fs::create_dir_all(&args.out)?;
    std::fs::write(args.out.join("latest.md"), &table)?;
    Ok(())
}

async fn measure(env: &Env, sys: System, workers: usize, length: Duration) -> anyhow::Result<Cell> {
    let mut tasks = Vec::new();
    let start_at = Instant::now() + Duration::from_millis(500);
    let stop_at = start_at + length;
    for w in 0..workers {
        let op = Op::new(env, sys, w).await?;
        tasks.push(tokio::spawn(async move { op.run(start_at, stop_at).await }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await??);
    }
    lat.sort_unstable();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    Ok(Cell {
        ops: lat.len(),
        secs: length.as_secs_f64(),
        p50_us: pct(0.50),
        p99_us: pct(0.99),
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
        direct: bool,
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

/// Through Envoy the edge sets the headers; straight to the arbiter the bench does.
fn with_headers<T>(msg: T, key: &str, direct: bool) -> tonic::Request<T> {
    if direct {
        lock_integration::as_from_edge(msg, Some(key), Some(OPERATOR))
    } else {
        tonic::Request::new(msg)
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
            System::ArbiterDirect | System::FullPath => {
                let direct = sys == System::ArbiterDirect;
                let mut c = if direct {
                    env.stack.arbiter_direct(0).await?
                } else {
                    env.stack.workload(OPERATOR).await?
                };
                let session = c
                    .open_session(with_headers(
                        OpenSessionRequest { key: key.clone() },
                        &key,
                        direct,
                    ))
                    .await?
                    .into_inner()
                    .session_id;
                // Keep the session alive for the run: one renewal now, TTL 30 s > a cell.
                Op::Arbiter {
                    c,
                    key,
                    session,
                    direct,
                }
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
                let grant = Txn::new()
                    .when(vec![Compare::create_revision(
                        key.as_str(),
                        CompareOp::Equal,
                        0,
                    )])
                    .and_then(vec![TxnOp::put(
                        key.as_str(),
                        "holder",
                        Some(PutOptions::new().with_lease(*lease)),
                    )]);
                let r = kv.txn(grant).await?;
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
                direct,
            } => {
                let g = c
                    .acquire(with_headers(
                        AcquireRequest {
                            key: key.clone(),
                            session_id: *session,
                            wait_millis: 0,
                        },
                        key,
                        *direct,
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
                    *direct,
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

fn render(results: &[(System, usize, Cell)]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| system | concurrency | ops/s | p50 µs | p99 µs | ops/s ÷ floor | p50 ÷ floor | ops/s ÷ v3lock |\n|---|---:|---:|---:|---:|---:|---:|---:|"
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
            "| {} | {c} | {:.0} | {} | {} | {:.2} | {:.2} | {:.2} |",
            sys.name(),
            tput(cell),
            cell.p50_us,
            cell.p99_us,
            floor.map_or(0.0, |f| tput(cell) / tput(f)),
            floor.map_or(0.0, |f| cell.p50_us as f64 / f.p50_us.max(1) as f64),
            v3.map_or(0.0, |v| tput(cell) / tput(v)),
        );
    }
    out
}
