//! `bench`: side-by-side lock benchmarks in one run on one machine (`make bench`).
//!
//! Uncontended acquire+release (each worker its own key) at concurrency 1, 16 and 64 for:
//! the floor (a raw etcd grant-shaped Txn and a compare-delete Txn), etcd's own lock service
//! (v3lock Lock/Unlock), the arbiter called directly, the full path (Envoy + filter +
//! arbiter, mTLS), Redis SET NX PX + compare-and-delete script, PostgreSQL advisory locks.
//! Reports throughput, p50 and p99, and ratios to the floor and to v3lock. etcd runs with
//! fsync on (the service as shipped); Redis with its default no-fsync; PostgreSQL default.
//!
//! Every uncontended and hot-key row also gets the CPU time per operation of each process
//! on its path (Envoy, arbiter, etcd, Redis/PostgreSQL, the load generator), read from the
//! processes over the cell's window: on a shared 2-core machine throughput is CPU per
//! operation, and a gain must be told from noise.
//!
//! Also: 4 keys taken as one (`sets.rs`: AcquireAll beside four Acquires and etcd's v3lock
//! four times), readers and a writer on one shared key (`rw.rs`), one hot key with 64 waiters (handoffs, handoff latency, etcd writes and grant
//! attempts per handoff), where Envoy's CPU goes (`edge.rs`: the same calls through Envoys
//! that differ in one thing each), renewal cost with 1 and 500 holds per session, the filter's own
//! cost (the same Envoy with and without it), the authoriser with 100,000 grants (natively
//! and in wasm under V8), the arbiter's and etcd's memory with 100,000 held keys and 10,000
//! queued waiters, the design's scale point driven up in steps (`scale.rs`), and SVG charts.

mod authoriser;
mod chart;
mod edge;
mod env;
mod filter_cost;
mod hot_key;
mod load;
mod memory;
mod observe;
mod ops;
mod redis_server;
mod renewal;
mod rw;
mod scale;
mod sets;
mod shards;
mod uncontended;

use anyhow::Context as _;
use clap::Parser;
use lock_integration::registry::write_test_registry;
use std::path::PathBuf;
use std::time::Duration;

/// Every workload, in the order they run.
const WORKLOADS: &str =
    "uncontended,hot,sets,shared,edge,renewal,filter,memory,scale,scale-tmpfs,shards";

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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let run = |w: &str| args.only.iter().any(|o| o == w);
    let length = Duration::from_secs(args.seconds);
    let authoriser = authoriser::cost(100_000)?;
    eprint!("{authoriser}");
    // The test registry: the dev classes plus a long-TTL bench class and 64 identities
    // (hot-key waiters need one each).
    let registry_dir = tempfile::tempdir()?;
    let registry = write_test_registry(registry_dir.path())?;
    let env = env::start(&registry, None).await?;
    std::fs::create_dir_all(&args.out)?;
    let concurrency = if run("uncontended") {
        args.concurrency.clone()
    } else {
        Vec::new()
    };
    let uncontended = uncontended::run(&env, &concurrency, length, &args.out).await?;
    let mut table = format!("{uncontended}\n| measurement | | |\n|---|---|---|\n{authoriser}");
    if run("hot") {
        table.push_str(&hot_key::run(&env, args.waiters, length, &args.out).await?);
    }
    if run("sets") {
        table.push_str(&sets::run(&env, length).await?);
    }
    if run("shared") {
        table.push_str(&rw::run(&env, length).await?);
    }
    if run("edge") {
        // Envoy variants at the concurrencies the goals name (16 and 64), three rounds.
        table.push_str(&edge::run(&env, &[16, 64], 3, length).await?);
    }
    if run("renewal") {
        table.push_str(&renewal::run(&env).await?);
    }
    if run("filter") {
        table.push_str(&filter_cost::run(&env).await?);
    }
    if run("memory") {
        let (holds, waiters) = (args.memory_holds, args.memory_waiters);
        table.push_str(&memory::run(&env, holds, waiters, args.memory_waiters_per_key).await?);
    }
    let steps = scale::Settings {
        max_sessions: args.scale_max_sessions,
        window: Duration::from_secs(args.scale_window),
        budget: Duration::from_secs(args.scale_budget),
    };
    if run("scale") {
        table.push_str(&scale::run(&env, &steps, Some(&args.out)).await?);
    }
    if run("scale-tmpfs") {
        // The same steps with etcd's data directory on tmpfs, on a fresh stack: the disk's
        // fsync stalls set the tail of the run above, and this one shows the software's own.
        drop(env);
        let shm = tempfile::Builder::new()
            .prefix("lock-bench-tmpfs-")
            .tempdir_in("/dev/shm")
            .context("a folder on /dev/shm (tmpfs)")?;
        let on_tmpfs = env::start(&registry, Some(shm.path().to_path_buf())).await?;
        table.push_str(
            "\nThe same scale steps with etcd's data directory on tmpfs (tmpfs: not durable; isolates the software from fsync stalls):\n",
        );
        table.push_str(&scale::run(&on_tmpfs, &steps, None).await?);
        drop(on_tmpfs);
    }
    if run("shards") {
        // Last: every cluster is on this machine, so nothing else may run beside them.
        table.push_str(&shards::run(&registry, length).await?);
    }
    println!("{table}");
    // Only a run of every workload replaces latest.md (the manual's performance page includes it);
    // a run narrowed with --only writes partial.md beside it.
    let all = WORKLOADS.split(',').all(run);
    let name = if all { "latest.md" } else { "partial.md" };
    std::fs::write(args.out.join(name), &table)?;
    eprintln!("written: {}", args.out.join(name).display());
    Ok(())
}
