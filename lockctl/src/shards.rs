//! `lockctl shards`: the shard map on the coord cluster (ADR-09) — set it up, show it, and
//! move keys by adding a shard, pinning a namespace, or draining a shard
//! (`lock_store::rehome`). `--etcd` is the coord cluster; shards are reached at their
//! endpoints in the map with the same credential.

use crate::Failure;
use crate::store::{EtcdArgs, failed};
use clap::Subcommand;
use lock_config::shards::{Shard, ShardMap, moves};
use lock_store::etcd_tls::EtcdTlsFiles;
use lock_store::rehome::{self, Connect, MoveOptions};
use lock_store::shard_map::{read_doc, read_epoch, read_fence};
use lock_store::{Etcd, StoreError};
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Subcommand)]
pub enum ShardsCmd {
    /// Set up the shard map on the coord cluster (`--etcd`): the epoch allocator, each
    /// shard's epoch (allocated there) and fence, the map at version 1. Arbiters then run
    /// with `--shards`. Idempotent.
    Init {
        #[command(flatten)]
        store: EtcdArgs,
        /// An entity shard, NAME=URL[,URL...] (repeat for each).
        #[arg(long = "shard", required = true, value_parser = parse_shard)]
        shards: Vec<lock_config::shards::Shard>,
        /// Path segments after the namespace that make a key's home (0: the namespace).
        #[arg(long, default_value_t = 1)]
        depth: u8,
    },
    /// The map in force (and one being moved to), each shard's epoch and the map version
    /// its fence serves.
    Show {
        #[command(flatten)]
        store: EtcdArgs,
    },
    /// Add a shard NAME=URL[,URL...]: about 1/(N+1) of the keys move to it (drained first:
    /// their new grants are refused MOVING until the move completes).
    Add {
        #[command(flatten)]
        store: EtcdArgs,
        #[arg(value_parser = parse_shard)]
        shard: lock_config::shards::Shard,
        #[command(flatten)]
        moving: MoveArgs,
    },
    /// Pin NAMESPACE to shard --to (ADR-09's override), or back to hashing with --unpin.
    Move {
        #[command(flatten)]
        store: EtcdArgs,
        namespace: String,
        #[arg(long, required_unless_present = "unpin")]
        to: Option<String>,
        #[arg(long, conflicts_with = "to")]
        unpin: bool,
        #[command(flatten)]
        moving: MoveArgs,
    },
    /// Take shard NAME out of the map: its keys move to the others.
    Drain {
        #[command(flatten)]
        store: EtcdArgs,
        name: String,
        #[command(flatten)]
        moving: MoveArgs,
    },
    /// Rendezvous hashing of KEYS deterministic keys over N shards, one shard added: keys
    /// moved (against the ideal 1/(N+1)), moves between old shards (always 0), and the
    /// largest and smallest shard over the mean. Pure computation, no cluster.
    Simulate {
        #[arg(long, default_value_t = 100_000)]
        keys: usize,
        /// Namespaces the keys are spread over.
        #[arg(long, default_value_t = 1000)]
        namespaces: usize,
        /// Shard counts to add one shard to.
        #[arg(long, value_delimiter = ',', default_value = "1,2,4,10,50")]
        shards: Vec<usize>,
        /// Home depth (path segments after the namespace).
        #[arg(long, default_value_t = 1)]
        depth: u8,
    },
}

#[derive(clap::Args)]
pub struct MoveArgs {
    /// Seconds to wait for holds of moving keys to end; past it nothing moves.
    #[arg(long, default_value_t = 120)]
    wait: u64,
    /// Accept an epoch advance of a receiving shard whose epoch is not above its sources'
    /// (it ends that shard's holds, as any advance does).
    #[arg(long)]
    advance_destination: bool,
}

impl MoveArgs {
    fn options(&self) -> lock_store::rehome::MoveOptions {
        lock_store::rehome::MoveOptions {
            wait: std::time::Duration::from_secs(self.wait),
            advance_destinations: self.advance_destination,
        }
    }
}

/// `lockctl shards ...`.
pub async fn run(cmd: ShardsCmd) -> Result<(), Failure> {
    match cmd {
        ShardsCmd::Simulate {
            keys,
            namespaces,
            shards,
            depth,
        } => {
            simulate(keys, namespaces, &shards, depth);
            Ok(())
        }
        ShardsCmd::Init {
            store,
            shards,
            depth,
        } => init(&store.etcd, &store.tls, shards, depth).await,
        ShardsCmd::Show { store } => show(&store.etcd, &store.tls).await,
        ShardsCmd::Add {
            store,
            shard,
            moving,
        } => {
            change(
                &store.etcd,
                &store.tls,
                Change::Add(shard),
                moving.options(),
            )
            .await
        }
        ShardsCmd::Move {
            store,
            namespace,
            to,
            unpin: _,
            moving,
        } => {
            let pin = Change::Pin { namespace, to };
            change(&store.etcd, &store.tls, pin, moving.options()).await
        }
        ShardsCmd::Drain {
            store,
            name,
            moving,
        } => {
            change(
                &store.etcd,
                &store.tls,
                Change::Drain(name),
                moving.options(),
            )
            .await
        }
    }
}

/// `NAME=URL[,URL...]`.
pub fn parse_shard(s: &str) -> Result<Shard, String> {
    let (name, urls) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected NAME=URL[,URL...]"))?;
    let endpoints: Vec<String> = urls
        .split(',')
        .filter(|u| !u.is_empty())
        .map(str::to_owned)
        .collect();
    if name.is_empty() || endpoints.is_empty() {
        return Err(format!("{s:?}: expected NAME=URL[,URL...]"));
    }
    Ok(Shard {
        name: name.to_owned(),
        endpoints,
    })
}

struct Connector {
    tls: EtcdTlsFiles,
}

impl Connect for Connector {
    async fn connect(&self, shard: &Shard) -> Result<Etcd, StoreError> {
        let tls = lock_store::etcd_tls::load(&shard.endpoints, &self.tls)?;
        Etcd::connect(&shard.endpoints, Duration::from_secs(5), tls.as_ref()).await
    }
}

/// The coord cluster, as lockctl's other store commands connect.
async fn coord(etcd: &[String], tls: &EtcdTlsFiles) -> Result<Etcd, Failure> {
    crate::store::connect(etcd, tls).await
}

pub async fn init(
    etcd: &[String],
    tls: &EtcdTlsFiles,
    shards: Vec<Shard>,
    depth: u8,
) -> Result<(), Failure> {
    let coord = coord(etcd, tls).await?;
    let map = ShardMap {
        version: 1,
        depth,
        shards,
        overrides: BTreeMap::new(),
    };
    let connect = Connector { tls: tls.clone() };
    let doc = rehome::init(&coord, &map, &connect).await.map_err(failed)?;
    println!(
        "shard map version {} on the coord cluster: {} shard(s), home depth {}",
        doc.current.version,
        doc.current.shards.len(),
        doc.current.depth
    );
    show_with(&coord, &connect).await
}

pub async fn show(etcd: &[String], tls: &EtcdTlsFiles) -> Result<(), Failure> {
    let coord = coord(etcd, tls).await?;
    show_with(&coord, &Connector { tls: tls.clone() }).await
}

async fn show_with(coord: &Etcd, connect: &Connector) -> Result<(), Failure> {
    let (doc, _) = read_doc(coord)
        .await
        .map_err(failed)?
        .ok_or_else(|| Failure::refused("no shard map on this cluster (single-cluster mode)"))?;
    let coord_epoch = read_epoch(coord)
        .await
        .map_err(failed)?
        .map(|(r, _)| r.epoch);
    println!(
        "map version {}{}, home depth {}",
        doc.current.version,
        doc.pending
            .as_ref()
            .map(|p| format!(" (moving to {})", p.version))
            .unwrap_or_default(),
        doc.current.depth
    );
    println!(
        "  coord      epoch {}",
        coord_epoch.map_or("-".into(), |e| e.to_string())
    );
    for s in doc.shards() {
        let state = match connect.connect(s).await {
            Ok(etcd) => match (read_epoch(&etcd).await, read_fence(&etcd).await) {
                (Ok(Some((r, _))), Ok(fence)) => format!(
                    "epoch {}, serves map {}{}",
                    r.epoch,
                    fence
                        .as_ref()
                        .map_or("-".into(), |(f, _)| f.version.to_string()),
                    fence
                        .as_ref()
                        .and_then(|(f, _)| f.pending)
                        .map(|p| format!(" (moving to {p})"))
                        .unwrap_or_default()
                ),
                (Ok(None), _) => "no epoch record".into(),
                (Err(e), _) | (_, Err(e)) => format!("unreadable: {e}"),
            },
            Err(e) => format!("unreachable: {e}"),
        };
        println!("  {:<10} {state}  {}", s.name, s.endpoints.join(","));
    }
    for (ns, to) in &doc.current.overrides {
        println!("  pinned     {ns} -> {to}");
    }
    Ok(())
}

/// What a change does to the current map.
pub enum Change {
    Add(Shard),
    Pin {
        namespace: String,
        to: Option<String>,
    },
    Drain(String),
}

pub async fn change(
    etcd: &[String],
    tls: &EtcdTlsFiles,
    change: Change,
    opts: MoveOptions,
) -> Result<(), Failure> {
    let coord = coord(etcd, tls).await?;
    let (doc, _) = read_doc(&coord)
        .await
        .map_err(failed)?
        .ok_or_else(|| Failure::refused("no shard map: run `lockctl shards init` first"))?;
    let next = match &doc.pending {
        // A move that stopped half-way: the same command finishes it.
        Some(p) => p.clone(),
        None => match change {
            Change::Add(shard) => moves::with_shard(&doc.current, shard),
            Change::Pin { namespace, to } => {
                moves::with_pin(&doc.current, &namespace, to.as_deref())
            }
            Change::Drain(name) => {
                if !doc.current.shards.iter().any(|s| s.name == name) {
                    return Err(Failure::input(format!("no shard {name} in the map")));
                }
                moves::without_shard(&doc.current, &name)
            }
        },
    };
    let connect = Connector { tls: tls.clone() };
    let mut say = |step: &str| println!("  {step}");
    let report = rehome::change(&coord, next, &connect, &opts, &mut say)
        .await
        .map_err(failed)?;
    println!(
        "moved: map {} -> {} in {:.1?} (waited {:.1?} for {} hold(s) of moving keys{})",
        report.from_version,
        report.to_version,
        report.took,
        report.drained_in,
        report.holds_waited_for,
        if report.advanced.is_empty() {
            String::new()
        } else {
            format!(
                "; epochs advanced: {}",
                report
                    .advanced
                    .iter()
                    .map(|(s, (a, b))| format!("{s} {a}->{b}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    );
    Ok(())
}

/// `lockctl shards simulate`: what adding one shard moves, and the balance after.
fn simulate(keys: usize, namespaces: usize, shards: &[usize], depth: u8) {
    use lock_config::shards::{sample_keys, simulate_add};
    let sample = sample_keys(keys, namespaces);
    println!("{keys} keys over {namespaces} namespaces, home depth {depth}; one shard added to N");
    println!("     N   moved   moved/keys  ideal 1/(N+1)  between old  max/mean  min/mean");
    for &n in shards {
        let s = simulate_add(n, &sample, depth);
        println!(
            "{:>6}  {:>6}  {:>10.4}  {:>13.4}  {:>11}  {:>8.3}  {:>8.3}",
            s.shards,
            s.moved,
            s.fraction,
            s.ideal,
            s.moved_between_old,
            s.max_over_mean,
            s.min_over_mean
        );
    }
}
