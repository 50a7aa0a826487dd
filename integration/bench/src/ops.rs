//! One measured cell: workers running one system's acquire+release (or another operation)
//! in a loop for a fixed time, and the latencies they saw.

use crate::chart;
use crate::env::Env;
use crate::observe::{CpuPerOp, Role, Watched, cpu_by_role};
use etcd_client::{Compare, CompareOp, LockOptions, PutOptions, Txn, TxnOp};
use lock_client::proto::lock_client::LockClient;
use lock_config::proto::v1::{
    AcquireRequest, HoldRequest, HoldResponse, OpenSessionRequest, ReleaseRequest,
};
use lock_integration::pki::OPERATOR;
use lock_pause_test::connect;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum System {
    RawTxn,
    V3Lock,
    ArbiterDirect,
    /// The same arbiter hop without TLS (`--insecure-plaintext`, never deployed): beside
    /// `ArbiterDirect` it prices the mutual TLS every edge-to-arbiter hop pays.
    ArbiterPlaintext,
    /// lock-client's way: one `Hold` stream per lock (issue 33), `lock-key` metadata.
    FullPath,
    /// The full path as two unary calls (Acquire, Release) with `lock-key`: what grpcurl
    /// and other stubs send, a client with `limit_hold_streams(0)`, and every client before
    /// issue 33.
    FullPathUnary,
    /// The full path for a client that does not send `lock-key` (grpcurl, other stubs):
    /// the edge pauses for the body.
    FullPathBody,
    Redis,
    Postgres,
}

impl System {
    /// The processes on this system's path in `env`, and the load generator (CPU per
    /// operation).
    pub fn watched(self, env: &Env) -> Vec<Watched> {
        let pid = |p: &lock_integration::process::Proc| p.pid().unwrap_or(0);
        let etcd = Watched::new(Role::Etcd, pid(&env.stack.etcd.proc));
        let arbiter = env
            .stack
            .arbiters
            .first()
            .map(|a| Watched::new(Role::Arbiter, pid(&a.proc)));
        let envoy = Watched::new(Role::Envoy, pid(&env.stack.envoy.proc));
        let mut path = match self {
            System::RawTxn | System::V3Lock => vec![etcd],
            System::ArbiterDirect => arbiter.into_iter().chain([etcd]).collect(),
            System::ArbiterPlaintext => {
                vec![Watched::new(Role::Arbiter, pid(&env.plaintext.proc)), etcd]
            }
            System::FullPath | System::FullPathUnary | System::FullPathBody => {
                [envoy].into_iter().chain(arbiter).chain([etcd]).collect()
            }
            System::Redis => vec![Watched::new(Role::Server, pid(&env.redis.proc))],
            System::Postgres => vec![Watched {
                children: true,
                ..Watched::new(Role::Server, pid(&env.pg.proc))
            }],
        };
        path.push(Watched::client());
        path
    }

    pub const ALL: [System; 9] = [
        System::RawTxn,
        System::V3Lock,
        System::ArbiterDirect,
        System::ArbiterPlaintext,
        System::FullPath,
        System::FullPathUnary,
        System::FullPathBody,
        System::Redis,
        System::Postgres,
    ];

    pub fn name(self) -> &'static str {
        match self {
            System::RawTxn => "etcd raw Txn (floor)",
            System::V3Lock => "etcd v3lock",
            System::ArbiterDirect => "arbiter direct (mTLS)",
            System::ArbiterPlaintext => "arbiter direct, plaintext (unsafe baseline)",
            System::FullPath => "full path (Envoy+filter+arbiter), hold stream",
            System::FullPathUnary => "full path, unary Acquire + Release",
            System::FullPathBody => "full path, key in the body only (no lock-key)",
            System::Redis => "Redis SET NX PX",
            System::Postgres => "PostgreSQL advisory",
        }
    }
}

/// One cell's result.
pub struct Cell {
    pub ops: usize,
    pub secs: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    /// Latency at each of [`chart::PERCENTILES`], for the charts.
    pub curve: Vec<u64>,
    /// etcd raft proposals committed per operation (None: not an etcd system). An
    /// acquire+release is two writes; fewer means writes were shared (group commit).
    pub proposals: Option<f64>,
    /// CPU µs per operation of each watched process over the cell's window.
    pub cpu: CpuPerOp,
}

/// The floor's grant: put `key` with `lease` if it does not exist, as the arbiter's grant
/// transaction does without its epoch and session compares.
pub fn grant_shaped_txn(key: &str, lease: i64) -> Txn {
    Txn::new()
        .when(vec![Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then(vec![TxnOp::put(
            key,
            "holder",
            Some(PutOptions::new().with_lease(lease)),
        )])
}

/// Latency (µs) at percentile `p` of sorted `lat`.
pub fn percentile(lat: &[u64], p: f64) -> u64 {
    lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0)
}

/// The CPU of each `watched` process is read at the window's start and end (on this
/// machine every process shares two cores, so throughput is CPU per operation).
pub async fn measure_ops(
    ops: Vec<Op>,
    length: Duration,
    watched: &[Watched],
) -> anyhow::Result<Cell> {
    let mut tasks = Vec::new();
    let start_at = Instant::now() + Duration::from_millis(500);
    let stop_at = start_at + length;
    for op in ops {
        tasks.push(tokio::spawn(async move { op.run(start_at, stop_at).await }));
    }
    tokio::time::sleep_until(start_at.into()).await;
    let cpu_before = cpu_by_role(watched);
    tokio::time::sleep_until(stop_at.into()).await;
    let cpu_after = cpu_by_role(watched);
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await??);
    }
    lat.sort_unstable();
    Ok(Cell {
        cpu: CpuPerOp::between(&cpu_before, &cpu_after, lat.len()),
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
pub enum Op {
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
        shape: Shape,
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
pub enum Route {
    /// Through the edge with the key as `lock-key` metadata (the fast path).
    Edge,
    /// Through the edge with the key in the body only.
    EdgeBody,
    /// With the headers the edge would set: straight to an arbiter, or through an Envoy
    /// without the filter.
    SetHeaders,
}

/// How one lock travels: two unary calls, or one `Hold` stream (issue 33).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Unary,
    Stream,
}

/// Through Envoy the edge sets the headers; straight to the arbiter the bench does.
pub fn with_headers<T>(msg: T, key: &str, route: Route) -> tonic::Request<T> {
    match route {
        Route::Edge => lock_integration::routed(msg, key, None),
        Route::EdgeBody => tonic::Request::new(msg),
        Route::SetHeaders => lock_integration::routed(msg, key, Some(OPERATOR)),
    }
}

impl Op {
    pub async fn new(env: &Env, sys: System, w: usize) -> anyhow::Result<Self> {
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
            | System::FullPathUnary
            | System::FullPathBody => {
                let route = match sys {
                    System::FullPath | System::FullPathUnary => Route::Edge,
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
                let shape = match sys {
                    System::FullPath => Shape::Stream,
                    _ => Shape::Unary,
                };
                Op::arbiter_shaped(c, key, route, shape).await?
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
    pub async fn arbiter(
        c: LockClient<Channel>,
        key: String,
        route: Route,
    ) -> anyhow::Result<Self> {
        Self::arbiter_shaped(c, key, route, Shape::Unary).await
    }

    /// As [`Op::arbiter`], each lock taken in `shape`.
    pub async fn arbiter_shaped(
        mut c: LockClient<Channel>,
        key: String,
        route: Route,
        shape: Shape,
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
            shape,
        })
    }

    /// Acquire+release in a loop between the two instants; latencies in µs.
    pub async fn run(mut self, start_at: Instant, stop_at: Instant) -> anyhow::Result<Vec<u64>> {
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

    pub async fn once(&mut self, n: u64) -> anyhow::Result<()> {
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
                shape: Shape::Stream,
            } => {
                let acquire = AcquireRequest {
                    key: key.clone(),
                    session_id: *session,
                    wait_millis: 0,
                    ..Default::default()
                };
                let route = *route;
                hold_cycle(c, acquire, |s| with_headers(s, key, route))
                    .await?
                    .map_err(|s| anyhow::anyhow!("hold stream refused: {s}"))?;
            }
            Op::Arbiter {
                c,
                key,
                session,
                route,
                shape: Shape::Unary,
            } => {
                let g = c
                    .acquire(with_headers(
                        AcquireRequest {
                            key: key.clone(),
                            session_id: *session,
                            wait_millis: 0,
                            ..Default::default()
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
                        ..Default::default()
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

/// The requests of one `Hold` stream.
pub type Asks = tokio_stream::wrappers::ReceiverStream<HoldRequest>;

/// One lock as lock-client takes it (issue 33): a `Hold` stream carrying the acquire and,
/// once granted, its release. `wrap` adds the route's headers. Ok(Err): the acquire was
/// refused (a hot key's wait ran out); Ok(Ok): when the grant arrived.
pub async fn hold_cycle(
    c: &mut LockClient<Channel>,
    acquire: AcquireRequest,
    wrap: impl FnOnce(Asks) -> tonic::Request<Asks>,
) -> anyhow::Result<Result<Instant, tonic::Status>> {
    use lock_config::proto::v1::hold_request::Step as Ask;
    use lock_config::proto::v1::hold_response::Step as Answer;
    let (key, session_id) = (acquire.key.clone(), acquire.session_id);
    let (asks, rx) = tokio::sync::mpsc::channel(2);
    asks.try_send(HoldRequest {
        step: Some(Ask::Acquire(acquire)),
    })?;
    let mut answers = match c.hold(wrap(Asks::new(rx))).await {
        Ok(r) => r.into_inner(),
        Err(s) => return Ok(Err(s)),
    };
    let token = match answers.message().await {
        Ok(Some(HoldResponse {
            step: Some(Answer::Acquired(g)),
        })) => g.token,
        Ok(other) => anyhow::bail!("hold stream: {other:?} instead of a grant"),
        Err(s) => return Ok(Err(s)),
    };
    let granted = Instant::now();
    let release = ReleaseRequest {
        key,
        token,
        session_id,
        ..Default::default()
    };
    asks.send(HoldRequest {
        step: Some(Ask::Release(release)),
    })
    .await?;
    match answers.message().await? {
        Some(HoldResponse {
            step: Some(Answer::Released(_)),
        }) => Ok(Ok(granted)),
        other => anyhow::bail!("hold stream: {other:?} instead of the release"),
    }
}
