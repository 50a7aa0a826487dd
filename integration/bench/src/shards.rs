//! Tiers and shards on one machine (issue 24): the same uncontended acquire+release load
//! straight at one arbiter, on one cluster, then on a coord cluster with one and with two
//! entity shards. Every cluster shares these two cores and one disk, so more clusters do
//! not buy throughput here; what the rows show is how the write load spreads (raft
//! proposals committed per second on each cluster) and what the extra hop of routing costs
//! the grant's p50 and p99.

use crate::ops::{Cell, Op, Route, measure_ops};
use lock_integration::{Stack, StackOptions};
use std::path::Path;
use std::time::Duration;

pub struct Row {
    pub shards: usize,
    pub cell: Cell,
    /// Proposals committed per second, per cluster (coord first), during the cell.
    pub writes_per_sec: Vec<(String, f64)>,
}

pub async fn measure(
    registry: &Path,
    shards: usize,
    workers: usize,
    length: Duration,
) -> anyhow::Result<Row> {
    let stack = Stack::start(StackOptions {
        arbiters: 1,
        registry: registry.to_path_buf(),
        entity_shards: shards,
        // Homes are whole keys here (`pay/ledger/bench-<w>`): the workers' keys spread
        // over the shards instead of sharing the home `pay/ledger`.
        shard_depth: 2,
        ..Default::default()
    })
    .await?;
    let mut ops = Vec::new();
    for w in 0..workers {
        let c = stack.arbiter_direct(0).await?;
        ops.push(Op::arbiter(c, format!("pay/ledger/bench-{w}"), Route::SetHeaders).await?);
    }
    let clusters: Vec<&lock_integration::etcd::Etcd> =
        std::iter::once(&stack.etcd).chain(&stack.shards).collect();
    let proposals =
        |c: &lock_integration::etcd::Etcd| c.metric("etcd_server_proposals_committed_total");
    let before = clusters
        .iter()
        .map(|c| proposals(c))
        .collect::<anyhow::Result<Vec<u64>>>()?;
    let cell = measure_ops(ops, length, &[]).await?;
    let mut writes_per_sec = Vec::new();
    for (c, b) in clusters.iter().zip(before) {
        let name = if shards == 0 {
            "single".to_owned()
        } else if c.name == stack.etcd.name {
            "coord".to_owned()
        } else {
            c.name.clone()
        };
        let during = proposals(c)?.saturating_sub(b);
        writes_per_sec.push((name, during as f64 / cell.secs));
    }
    Ok(Row {
        shards,
        cell,
        writes_per_sec,
    })
}

pub fn render(rows: &[Row], workers: usize) -> String {
    let mut out = format!(
        "\n| clusters (one arbiter, {workers} workers, uncontended) | ops/s | p50 µs | p99 µs | raft proposals/s per cluster |\n|---|---:|---:|---:|---|\n"
    );
    for r in rows {
        let label = match r.shards {
            0 => "one cluster (the default)".to_owned(),
            n => format!("coord + {n} entity shard{}", if n == 1 { "" } else { "s" }),
        };
        let writes = r
            .writes_per_sec
            .iter()
            .map(|(c, w)| format!("{c} {w:.0}"))
            .collect::<Vec<_>>()
            .join(", ");
        out.push_str(&format!(
            "| {label} | {:.0} | {} | {} | {writes} |\n",
            r.cell.ops as f64 / r.cell.secs,
            r.cell.p50_us,
            r.cell.p99_us
        ));
    }
    out
}

/// One cluster, coord + 1 shard, coord + 2 shards, 16 workers each; returns the table.
pub async fn run(registry: &std::path::Path, length: Duration) -> anyhow::Result<String> {
    let mut rows = Vec::new();
    for n in [0, 1, 2] {
        let row = measure(registry, n, 16, length).await?;
        eprintln!(
            "shards={n}: {:.0} ops/s p50 {} us p99 {} us, proposals/s {:?}",
            row.cell.ops as f64 / row.cell.secs,
            row.cell.p50_us,
            row.cell.p99_us,
            row.writes_per_sec
        );
        rows.push(row);
    }
    Ok(render(&rows, 16))
}
