//! The filter's own cost: the same Envoy listener, TLS and route with and without the lock
//! filter, in front of the same arbiter. Without the filter the client sets the headers the
//! filter would have set. Cells alternate (A, B, A, B, ...) so drift on a shared machine
//! falls on both; the median of each side's p50 is reported.

use crate::env::Env;
use crate::ops::{Cell, Op, Route, measure_ops};
use lock_client::stub::{self as remote, Svid};
use lock_integration::envoy::{Envoy, EnvoyConfig};
use lock_integration::pki::OPERATOR;
use std::time::Duration;

pub struct FilterCost {
    pub concurrency: usize,
    pub with_p50_us: u64,
    pub without_p50_us: u64,
    pub with_ops: f64,
    pub without_ops: f64,
}

impl FilterCost {
    /// Per request: an acquire+release is two requests through the filter.
    pub fn per_request_us(&self) -> f64 {
        (self.with_p50_us as f64 - self.without_p50_us as f64) / 2.0
    }
}

/// A second Envoy, identical but for the missing filter.
pub fn start_plain_envoy(env: &Env) -> anyhow::Result<Envoy> {
    let c = &env.stack.envoy_config;
    let mut config = EnvoyConfig::new(&c.cert_dir, c.filter.clone(), c.arbiters.clone())?;
    config.without_filter = true;
    let dir = env.stack.dir.join("plain-envoy");
    std::fs::create_dir_all(&dir)?;
    Envoy::start(&dir, &config)
}

pub async fn measure(
    env: &Env,
    plain: &Envoy,
    concurrency: usize,
    rounds: usize,
    cell: Duration,
) -> anyhow::Result<FilterCost> {
    let svid = env.stack.pki.svid("bench-filter-cost", OPERATOR)?;
    let s = Svid {
        cert: Some(&svid.cert),
        key: Some(&svid.key),
        ca: &svid.ca,
    };
    let plain_url = format!("https://127.0.0.1:{}", plain.listen.port());
    let mut with: Vec<Cell> = Vec::new();
    let mut without: Vec<Cell> = Vec::new();
    for round in 0..rounds {
        for filtered in [true, false] {
            let mut ops = Vec::new();
            for w in 0..concurrency {
                let key = format!("pay/ledger/filter-cost-{round}-{w}");
                // With the filter on its fast path (the key as `lock-key`, as lock-client
                // sends it); without, the bench sets the edge's headers itself.
                let (url, route) = if filtered {
                    (env.stack.endpoint(), Route::Edge)
                } else {
                    (plain_url.clone(), Route::SetHeaders)
                };
                let c = remote::connect(&url, &s, "localhost").await?;
                ops.push(Op::arbiter(c, key, route).await?);
            }
            let cell = measure_ops(ops, cell, &[]).await?;
            if filtered {
                with.push(cell);
            } else {
                without.push(cell);
            }
        }
    }
    let median = |cells: &mut Vec<Cell>| {
        cells.sort_by_key(|c| c.p50_us);
        cells
            .get(cells.len() / 2)
            .map_or((0, 0.0), |c| (c.p50_us, c.ops as f64 / c.secs))
    };
    let (with_p50_us, with_ops) = median(&mut with);
    let (without_p50_us, without_ops) = median(&mut without);
    Ok(FilterCost {
        concurrency,
        with_p50_us,
        without_p50_us,
        with_ops,
        without_ops,
    })
}

/// What a refusal costs and shows: an identity without a grant (the orders worker on
/// `pay/ledger`) asks about a held key, a free key and a key of an undeclared namespace, on
/// both paths. Every answer is the same NOT_GRANTED from the edge; the latencies should be
/// too (a difference would tell the caller something about a key it may not see, ADR-19).
pub struct Denial {
    pub state: &'static str,
    pub fast: bool,
    pub p50_us: u64,
    pub p99_us: u64,
}

pub async fn denials(env: &Env, calls: usize) -> anyhow::Result<Vec<Denial>> {
    use lock_config::proto::v1::{AcquireRequest, InspectRequest, OpenSessionRequest};
    use lock_integration::pki::{LEDGER, ORDERS};
    // The held key, held by its rightful owner for the whole measurement.
    let held = "pay/ledger/denial-held";
    let mut owner = env.stack.workload(LEDGER).await?;
    let session = owner
        .open_session(remote::keyed(OpenSessionRequest { key: held.into() }, held))
        .await?
        .into_inner()
        .session_id;
    owner
        .acquire(remote::keyed(
            AcquireRequest {
                key: held.into(),
                session_id: session,
                wait_millis: 0,
                ..Default::default()
            },
            held,
        ))
        .await?;
    let mut stranger = env.stack.workload(ORDERS).await?;
    let mut out = Vec::new();
    for (state, key) in [
        ("held", held),
        ("free", "pay/ledger/denial-free"),
        ("nonexistent namespace", "nope/denial"),
    ] {
        for fast in [true, false] {
            let mut lat = Vec::with_capacity(calls);
            for _ in 0..calls {
                let msg = InspectRequest { key: key.into() };
                let req = if fast {
                    remote::keyed(msg, key)
                } else {
                    tonic::Request::new(msg)
                };
                let t = std::time::Instant::now();
                let r = stranger.inspect(req).await;
                lat.push(u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX));
                let reason = r
                    .err()
                    .and_then(|s| lock_integration::reason_of(&s).map(|r| r.0));
                anyhow::ensure!(
                    reason == Some(lock_config::Reason::NotGranted),
                    "{key}: expected NOT_GRANTED, got {reason:?}"
                );
            }
            lat.sort_unstable();
            out.push(Denial {
                state,
                fast,
                p50_us: crate::ops::percentile(&lat, 0.50),
                p99_us: crate::ops::percentile(&lat, 0.99),
            });
        }
    }
    Ok(out)
}

/// The filter's cost (the same Envoy with and without it) and the denial's latency for
/// each key state; returns the tables.
pub async fn run(env: &Env) -> anyhow::Result<String> {
    let plain = start_plain_envoy(env)?;
    let mut table = String::from(
        "\n| filter cost | p50 with filter µs | p50 without µs | per request µs | ops/s with | ops/s without |\n|---|---:|---:|---:|---:|---:|\n",
    );
    for c in [1, 16] {
        let f = measure(env, &plain, c, 3, Duration::from_secs(2)).await?;
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
    let rows = denials(env, 300).await?;
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
    Ok(table)
}
