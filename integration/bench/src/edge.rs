//! Where the edge's CPU goes (`bench --only edge`): the same acquire+release through Envoys
//! that differ in one thing each, beside the stack's arbiter, with the CPU of Envoy, the
//! arbiter, etcd and the load generator read from the processes over each cell. Cells
//! alternate between the variants round after round, so drift on a shared machine falls on
//! all of them; the median cell of each variant is reported.

use crate::env::{Env, SHIPPED_ENVOY_WORKERS};
use crate::observe::{Role, Watched};
use crate::ops::{Cell, Op, Route, Shape, measure_ops};
use lock_client::stub::{self as remote, Svid};
use lock_integration::envoy::{Envoy, EnvoyConfig, Tweaks};
use lock_integration::pki::OPERATOR;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

/// Which wasm filter the variant runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wasm {
    /// The lock filter as shipped (the client sends `lock-key`: the fast path).
    Lock,
    /// A filter that does nothing (`integration/bench/noop-filter`): the wasm machinery.
    Noop,
    /// No wasm filter at all.
    None,
}

struct Variant {
    name: &'static str,
    wasm: Wasm,
    workers: usize,
    tweaks: Tweaks,
    /// Two unary requests per lock, or one `Hold` stream (issue 33).
    shape: Shape,
}

impl Variant {
    fn requests_per_lock(&self) -> f64 {
        match self.shape {
            Shape::Unary => 2.0,
            Shape::Stream => 1.0,
        }
    }
}

const OGHTTP2: &str = "envoy.reloadable_features.http2_use_oghttp2";

fn variants() -> Vec<Variant> {
    let v = |name, wasm, workers, tweaks| Variant {
        name,
        wasm,
        workers,
        tweaks,
        shape: Shape::Unary,
    };
    let stream = |v: Variant| Variant {
        shape: Shape::Stream,
        ..v
    };
    let runtime = |flag: &str, on| Tweaks {
        runtime: vec![(flag.to_owned(), on)],
        ..Tweaks::default()
    };
    let no_stats = Tweaks {
        no_stats: true,
        ..Tweaks::default()
    };
    let no_xfcc = Tweaks {
        no_xfcc: true,
        ..Tweaks::default()
    };
    let bare = Tweaks {
        no_xfcc: true,
        ..no_stats.clone()
    };
    let shipped = SHIPPED_ENVOY_WORKERS;
    vec![
        stream(v(
            "as shipped, hold stream (lock-client)",
            Wasm::Lock,
            shipped,
            Tweaks::default(),
        )),
        stream(v(
            "no filter, no XFCC, no stats, hold stream",
            Wasm::None,
            shipped,
            bare.clone(),
        )),
        v(
            "as shipped: lock filter, XFCC",
            Wasm::Lock,
            shipped,
            Tweaks::default(),
        ),
        v("lock filter, 2 workers", Wasm::Lock, 2, Tweaks::default()),
        v(
            "lock filter, nghttp2 codec",
            Wasm::Lock,
            shipped,
            runtime(OGHTTP2, false),
        ),
        v(
            "lock filter, oghttp2 codec",
            Wasm::Lock,
            shipped,
            runtime(OGHTTP2, true),
        ),
        v("lock filter, no stats", Wasm::Lock, shipped, no_stats),
        v(
            "no-op wasm filter, XFCC",
            Wasm::Noop,
            shipped,
            Tweaks::default(),
        ),
        v("no filter, XFCC", Wasm::None, shipped, Tweaks::default()),
        v("no filter, no XFCC", Wasm::None, shipped, no_xfcc),
        v("no filter, no XFCC, no stats", Wasm::None, shipped, bare),
    ]
}

/// The no-op filter, built by `make bench` (`cargo build --release -p lock-noop-filter
/// --target wasm32-wasip1`).
fn noop_wasm() -> PathBuf {
    lock_integration::paths::workspace_root()
        .join("target/wasm32-wasip1/release/lock_noop_filter.wasm")
}

fn start(env: &Env, i: usize, v: &Variant) -> anyhow::Result<Envoy> {
    let c = &env.stack.envoy_config;
    let mut config = EnvoyConfig::new(&c.cert_dir, c.filter.clone(), c.arbiters.clone())?;
    config.workers = Some(v.workers);
    config.tweaks = v.tweaks.clone();
    match v.wasm {
        Wasm::Lock => {}
        Wasm::Noop => {
            let wasm = noop_wasm();
            anyhow::ensure!(
                wasm.exists(),
                "{} not built: `cargo build --release -p lock-noop-filter --target wasm32-wasip1` (make bench does)",
                wasm.display()
            );
            config.wasm = wasm;
        }
        Wasm::None => config.without_filter = true,
    }
    // Each variant its own ECDS file beside its own certificate folder name.
    let dir = env.stack.dir.join(format!("edge-variant-{i}"));
    std::fs::create_dir_all(&dir)?;
    let certs = dir.join("certs");
    if !certs.exists() {
        std::os::unix::fs::symlink(&c.cert_dir, &certs)?;
    }
    config.cert_dir = certs;
    // Ports picked free can be taken before Envoy binds them (seen in a full run).
    Envoy::start_on_free_ports(&dir, &mut config, true)
}

/// One variant's median cell.
struct Row {
    name: &'static str,
    cell: Cell,
}

/// Every variant at `concurrency`, `rounds` alternating cells of `length` each; returns
/// the table.
pub async fn run(
    env: &Env,
    concurrencies: &[usize],
    rounds: usize,
    length: Duration,
) -> anyhow::Result<String> {
    let variants = variants();
    let mut envoys = Vec::new();
    for (i, v) in variants.iter().enumerate() {
        envoys.push(start(env, i, v)?);
    }
    let svid = env.stack.pki.svid("bench-edge", OPERATOR)?;
    let s = Svid {
        cert: Some(&svid.cert),
        key: Some(&svid.key),
        ca: &svid.ca,
    };
    let pid = |p: &lock_integration::process::Proc| p.pid().unwrap_or(0);
    let arbiter = env
        .stack
        .arbiters
        .first()
        .map(|a| Watched::new(Role::Arbiter, pid(&a.proc)));
    let mut table = String::from(
        "\n| Envoy variant (same arbiter and etcd) | concurrency | ops/s | Envoy µs / request | arbiter µs / request | etcd µs / lock | client µs / lock | total µs / lock |\n|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for &c in concurrencies {
        let mut cells: Vec<Vec<Cell>> = variants.iter().map(|_| Vec::new()).collect();
        for round in 0..rounds {
            for (i, (v, envoy)) in variants.iter().zip(&envoys).enumerate() {
                let url = format!("https://127.0.0.1:{}", envoy.listen.port());
                let route = match v.wasm {
                    Wasm::Lock => Route::Edge,
                    // Nothing at the edge sets the headers: the bench does, as an honest
                    // edge would have.
                    Wasm::Noop | Wasm::None => Route::SetHeaders,
                };
                let mut ops = Vec::new();
                for w in 0..c {
                    let key = format!("pay/ledger/edge-{i}-{round}-{w}");
                    let client = remote::connect(&url, &s, "localhost").await?;
                    ops.push(Op::arbiter_shaped(client, key, route, v.shape).await?);
                }
                let mut watched = vec![Watched::new(Role::Envoy, pid(&envoy.proc))];
                watched.extend(arbiter);
                watched.push(Watched::new(Role::Etcd, pid(&env.stack.etcd.proc)));
                watched.push(Watched::client());
                let cell = measure_ops(ops, length, &watched).await?;
                eprintln!(
                    "edge c={c} {:<44} {:>6.0} ops/s  Envoy {:>4.0} us/request",
                    v.name,
                    cell.ops as f64 / cell.secs,
                    cell.cpu.of(Role::Envoy).unwrap_or(0.0) / v.requests_per_lock()
                );
                cells[i].push(cell);
            }
        }
        for (v, mut runs) in variants.iter().zip(cells) {
            // The median by total CPU per cycle.
            runs.sort_by(|a, b| a.cpu.total().total_cmp(&b.cpu.total()));
            let Some(cell) = runs.into_iter().nth(rounds / 2) else {
                continue;
            };
            let per_request = v.requests_per_lock();
            let row = Row { name: v.name, cell };
            let cpu = |r: Role| row.cell.cpu.of(r).unwrap_or(0.0);
            let _ = writeln!(
                table,
                "| {} | {c} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
                row.name,
                row.cell.ops as f64 / row.cell.secs,
                cpu(Role::Envoy) / per_request,
                cpu(Role::Arbiter) / per_request,
                cpu(Role::Etcd),
                cpu(Role::Client),
                row.cell.cpu.total(),
            );
        }
    }
    Ok(table)
}
