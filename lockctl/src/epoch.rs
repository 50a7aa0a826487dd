//! `lockctl epoch ...` (ADR-03): `init` (etcd root's bootstrap step), and the advance:
//! `request|approve|list` against lock-admin (two people), `break-glass` against etcd
//! with root's certificate.

use crate::Failure;
use crate::force::AdminConn;
use crate::store::{EtcdArgs, allocate, connect, failed};
use clap::Subcommand;
use lock_store::epoch::next::Source;
use lock_store::etcd_tls::EtcdTlsFiles;
use lock_store::layout::AdvancedBy;
use lock_store::{StoreError, epoch};

#[derive(Subcommand)]
pub enum EpochCmd {
    /// Create /sys/epoch bound to the cluster ID, if absent: epoch 1, or with `--coord` an
    /// epoch allocated from the coord cluster (a new entity shard's). etcd root's: a
    /// bootstrap step beside `roles apply`.
    Init {
        #[command(flatten)]
        store: EtcdArgs,
        /// With several clusters: the coord cluster's URLs, where the first epoch is
        /// allocated above every epoch any cluster has had.
        #[arg(long, value_delimiter = ',')]
        coord: Vec<String>,
    },
    /// The epoch advance (after a restore): one transaction that moves the epoch from E,
    /// binds it to the store's current cluster ID and deletes every hold and durable
    /// waiter. It ends every hold, so it takes two people: one files, another approves
    /// (lock-admin, ADR-03).
    Advance {
        #[command(subcommand)]
        cmd: AdvanceCmd,
    },
}

#[derive(Subcommand)]
pub enum AdvanceCmd {
    /// File an advance from epoch FROM; prints the request id. Another operator approves.
    Request {
        /// The epoch the store is at now (the approval advances from exactly it).
        #[arg(long)]
        from: u16,
        /// Why (kept in the epoch record and the audit trail).
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        admin: AdminConn,
    },
    /// Approve and run request ID (never your own): every hold on the cluster ends.
    Approve {
        id: String,
        #[command(flatten)]
        admin: AdminConn,
    },
    /// Pending advance requests.
    List {
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        admin: AdminConn,
    },
    /// Break-glass: advance now, alone, with etcd root's certificate (the operator's is
    /// refused by etcd). For when lock-admin or the IdP is down. Recorded in the epoch
    /// record and the audit trail as break-glass, with your name and reason.
    BreakGlass {
        #[command(flatten)]
        store: EtcdArgs,
        #[arg(long)]
        from: u16,
        #[arg(long)]
        reason: String,
        /// Who is doing this (kept in the record).
        #[arg(long)]
        operator: String,
        /// With several clusters: the coord cluster's URLs; the new epoch is allocated
        /// there, above every epoch any cluster has had, instead of FROM+1. Required on an
        /// entity shard (refused without it); on the coord cluster itself, its own
        /// allocator is used.
        #[arg(long, value_delimiter = ',')]
        coord: Vec<String>,
    },
}

/// `lockctl epoch ...`.
pub async fn run(cmd: EpochCmd) -> Result<(), Failure> {
    match cmd {
        EpochCmd::Init { store, coord } => {
            let first = match coord.is_empty() {
                true => 1,
                false => allocate(&coord, &store.tls, 0).await?,
            };
            epoch_init(&store.etcd, &store.tls, first).await
        }
        EpochCmd::Advance { cmd } => match cmd {
            AdvanceCmd::BreakGlass {
                store,
                from,
                reason,
                operator,
                coord,
            } => {
                if reason.trim().is_empty() || operator.trim().is_empty() {
                    return Err(Failure::input(
                        "break-glass needs --reason and --operator: they are kept in the record",
                    ));
                }
                let next = break_glass_epoch(&store, &coord, from).await?;
                eprintln!(
                    "WARNING: break-glass epoch advance by {operator}, without a second operator: every hold on this cluster ends, and the record and audit trail say so."
                );
                let by = AdvancedBy {
                    request: String::new(),
                    reason: reason.trim().to_owned(),
                    requester: operator.trim().to_owned(),
                    approver: String::new(),
                    break_glass: true,
                };
                epoch_advance(&store.etcd, &store.tls, from, next, by).await
            }
            other => advance(other).await,
        },
    }
}

/// The epoch break-glass advances to, by the two-person path's rule
/// (`epoch::next::source`): E+1 on a lone cluster (None); once there are shards, from the
/// coord cluster's allocator (`--coord`, or the cluster itself when it is the coord). An
/// entity shard without `--coord` is refused: E+1 there may be another cluster's epoch.
/// Unlike the two-person path, an allocator below FROM does not stop it: it allocates
/// above both, as `--coord` always has.
async fn break_glass_epoch(
    store: &EtcdArgs,
    coord_urls: &[String],
    from: u16,
) -> Result<Option<u16>, Failure> {
    let cluster = connect(&store.etcd, &store.tls).await?;
    let coord = match coord_urls.is_empty() {
        true => None,
        false => Some(connect(coord_urls, &store.tls).await?),
    };
    let estate = lock_store::shard_map::read_estate(&cluster, coord.as_ref())
        .await
        .map_err(failed)?;
    match epoch::next::source(from, &estate) {
        Ok(Source::OnCluster(_)) => Ok(None),
        Ok(Source::Coord) => {
            let coord = coord.as_ref().unwrap_or(&cluster);
            lock_store::shard_map::allocate_epoch(coord, from)
                .await
                .map(Some)
                .map_err(failed)
        }
        Err(e) => Err(Failure::refused(format!("{e}; nothing was advanced"))),
    }
}

async fn epoch_advance(
    etcd: &[String],
    tls: &EtcdTlsFiles,
    from: u16,
    next: Option<u16>,
    by: AdvancedBy,
) -> Result<(), Failure> {
    let store = connect(etcd, tls).await?;
    match epoch::advance(&store, from, next, Some(by)).await {
        Ok(rec) => {
            println!(
                "epoch advanced {from} -> {} (break-glass), bound to cluster {}; every hold and durable waiter deleted",
                rec.epoch, rec.cluster_id
            );
            Ok(())
        }
        Err(StoreError::Etcd(e)) if e.to_string().contains("permission denied") => {
            Err(Failure::refused(format!(
                "etcd refused ({e}): break-glass needs etcd root's certificate; operators advance through lock-admin (`lockctl epoch advance request`)"
            )))
        }
        Err(e) => Err(failed(e)),
    }
}

async fn epoch_init(etcd: &[String], tls: &EtcdTlsFiles, first: u16) -> Result<(), Failure> {
    let store = connect(etcd, tls).await?;
    match epoch::init_with(&store, first).await {
        Ok((rec, true)) => {
            println!(
                "epoch {} created, bound to cluster {}",
                rec.epoch, rec.cluster_id
            );
            Ok(())
        }
        Ok((rec, false)) => {
            println!(
                "epoch {} already exists, bound to cluster {}",
                rec.epoch, rec.cluster_id
            );
            Ok(())
        }
        Err(e) => Err(failed(e)),
    }
}

/// `lockctl epoch advance request|approve|list`, against lock-admin.
async fn advance(cmd: AdvanceCmd) -> Result<(), Failure> {
    match cmd {
        AdvanceCmd::Request {
            from,
            reason,
            admin,
        } => {
            let r = crate::force::client(&admin)
                .await?
                .file_advance(from, &reason)
                .await?;
            println!("{}", r.id);
            eprintln!(
                "filed: advance cluster {} from epoch {}; every hold on it ends when another operator approves `{}`",
                r.cluster_id, r.from, r.id
            );
            Ok(())
        }
        AdvanceCmd::Approve { id, admin } => {
            let a = crate::force::client(&admin)
                .await?
                .approve_advance(&id)
                .await?;
            let by = a.record.advanced_by.as_ref();
            println!(
                "epoch advanced to {}, bound to cluster {}; every hold and durable waiter deleted; requested by {}, approved by {}",
                a.record.epoch,
                a.record.cluster_id,
                by.map_or("?", |b| b.requester.as_str()),
                by.map_or("?", |b| b.approver.as_str()),
            );
            Ok(())
        }
        AdvanceCmd::List {
            json: as_json,
            admin,
        } => {
            let l = crate::force::client(&admin).await?.list_advances().await?;
            if as_json {
                println!("{}", serde_json::to_string_pretty(&l).unwrap_or_default());
                return Ok(());
            }
            println!("pending:");
            for r in &l.pending {
                println!(
                    "  {}  from epoch {}  cluster {}  by {}  reason: {}",
                    r.id, r.from, r.cluster_id, r.requester.name, r.reason
                );
            }
            Ok(())
        }
        AdvanceCmd::BreakGlass { .. } => Err(Failure::input(
            "break-glass runs against etcd, not lock-admin",
        )),
    }
}
