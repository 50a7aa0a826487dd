//! Uncontended acquire+release (each worker its own key) at each concurrency, for every
//! system side by side: the floor, v3lock, the arbiter direct, the full path, Redis,
//! PostgreSQL. Ratios to the floor and to v3lock, and a latency chart per concurrency.

use crate::chart;
use crate::env::Env;
use crate::observe::CpuPerOp;
use crate::ops::{Cell, Op, System, measure_ops};
use anyhow::Context as _;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

/// Every system at every concurrency; writes a chart per concurrency into `out`, returns
/// the table.
pub async fn run(
    env: &Env,
    concurrency: &[usize],
    length: Duration,
    out: &Path,
) -> anyhow::Result<String> {
    let mut results = Vec::new();
    for &c in concurrency {
        for sys in System::ALL {
            let cell = measure(env, sys, c, length)
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
    for &c in concurrency {
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
        std::fs::write(out.join(format!("latency-c{c}.svg")), svg)?;
    }
    Ok(render(&results))
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
    let mut cell = measure_ops(ops, length, &sys.watched(env)).await?;
    if on_etcd {
        let during = proposals()?.saturating_sub(before);
        cell.proposals = Some(during as f64 / cell.ops.max(1) as f64);
    }
    Ok(cell)
}

/// Runs prepared workers side by side for `length`; latencies of every operation.
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
    let _ = writeln!(
        out,
        "\n| CPU µs per acquire+release, read from each process over the cell | concurrency | ops/s | {} | total ÷ v3lock's |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        CpuPerOp::HEADER
    );
    for (sys, c, cell) in results {
        let v3 = results
            .iter()
            .find(|(x, y, _)| *x == System::V3Lock && y == c)
            .map(|r| r.2.cpu.total());
        let _ = writeln!(
            out,
            "| {} | {c} | {:.0} |{} {} |",
            sys.name(),
            cell.ops as f64 / cell.secs,
            cell.cpu.cells(),
            v3.filter(|v| *v > 0.0)
                .map_or("–".to_owned(), |v| format!("{:.2}", cell.cpu.total() / v)),
        );
    }
    out
}
