//! Commands that talk to etcd directly as an operator (or etcd root): the epoch record
//! (ADR-03), users and roles, and restoring a member from a snapshot with a fresh cluster
//! token.

use crate::Failure;
use crate::force::AdminConn;
use clap::Subcommand;
use lock_arbiter::etcd_tls::EtcdTlsFiles;
use lock_arbiter::layout::AdvancedBy;
use lock_arbiter::{ArbiterError, Etcd, epoch};
use std::path::PathBuf;
use std::time::Duration;

/// etcd client URLs for the commands that talk to the store directly.
#[derive(clap::Args)]
pub struct EtcdArgs {
    #[arg(
        long,
        env = "LOCK_ETCD",
        default_value = "http://127.0.0.1:2379",
        value_delimiter = ','
    )]
    pub etcd: Vec<String>,
    /// The etcd credential (the `operator` user for the epoch, `root` for roles).
    #[command(flatten)]
    pub tls: EtcdTlsFiles,
}

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
        /// there, above every epoch any cluster has had, instead of FROM+1.
        #[arg(long, value_delimiter = ',')]
        coord: Vec<String>,
    },
}

#[derive(Subcommand)]
pub enum RolesCmd {
    /// Create or correct the users and roles, then enable auth; a second run changes nothing.
    Apply {
        #[command(flatten)]
        store: EtcdArgs,
        /// Print the changes without making them.
        #[arg(long)]
        dry_run: bool,
    },
    /// Print etcd's users and roles and what `apply` would change.
    Show {
        #[command(flatten)]
        store: EtcdArgs,
    },
}

/// `lockctl epoch ...`.
pub async fn epoch(cmd: EpochCmd) -> Result<(), Failure> {
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
                let next = match coord.is_empty() {
                    true => None,
                    false => Some(allocate(&coord, &store.tls, from).await?),
                };
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
            other => crate::force::advance(other).await,
        },
    }
}

/// A store error as lockctl reports it: no quorum is "unreachable" (exit 3), anything
/// else a refusal (exit 1).
pub fn failed(e: ArbiterError) -> Failure {
    match e {
        ArbiterError::NoQuorum => Failure::unreachable("etcd unreachable or without quorum"),
        e => Failure::refused(e.to_string()),
    }
}

/// The next epoch from the coord cluster's allocator, above `above` and every epoch any
/// cluster has had (tiers and shards: ADR-03, 07).
async fn allocate(coord_urls: &[String], tls: &EtcdTlsFiles, above: u16) -> Result<u16, Failure> {
    let coord = connect(coord_urls, tls).await?;
    lock_arbiter::shard_map::allocate_epoch(&coord, above)
        .await
        .map_err(failed)
}

/// `lockctl roles ...`.
pub async fn roles(cmd: RolesCmd) -> Result<(), Failure> {
    match cmd {
        RolesCmd::Apply { store, dry_run } => roles_plan(&store.etcd, &store.tls, !dry_run).await,
        RolesCmd::Show { store } => roles_plan(&store.etcd, &store.tls, false).await,
    }
}

pub(crate) async fn connect(etcd: &[String], tls: &EtcdTlsFiles) -> Result<Etcd, Failure> {
    let tls = lock_arbiter::etcd_tls::load(etcd, tls).map_err(|e| Failure::input(e.to_string()))?;
    Etcd::connect(etcd, Duration::from_secs(5), tls.as_ref())
        .await
        .map_err(|e| Failure::unreachable(format!("etcd: {e}")))
}

/// `lockctl roles show|apply`: reads etcd's users and roles, prints the plan to reach
/// `etcd_roles::ROLES`/`USERS`, and with `apply` makes it and enables auth.
async fn roles_plan(etcd: &[String], tls: &EtcdTlsFiles, apply: bool) -> Result<(), Failure> {
    use lock_arbiter::etcd_roles;
    let store = connect(etcd, tls).await?;
    let mut auth = store.auth_client();
    let failed = |e: etcd_client::Error| Failure::unreachable(format!("etcd: {e}"));
    let current = etcd_roles::read(&mut auth).await.map_err(failed)?;
    for (user, roles) in &current.users {
        let roles: Vec<&str> = roles.iter().map(String::as_str).collect();
        let ours = etcd_roles::USERS.iter().any(|u| u.name == user);
        println!(
            "user {user}: {}{}",
            roles.join(", "),
            if ours { "" } else { "  (not managed here)" }
        );
    }
    let changes = etcd_roles::plan(&current, etcd_roles::ROLES, etcd_roles::USERS);
    if changes.is_empty() {
        println!("users and roles as wanted");
    }
    for c in &changes {
        println!("{}{c}", if apply { "" } else { "would " });
    }
    if apply {
        etcd_roles::apply(&mut auth, &changes)
            .await
            .map_err(failed)?;
        println!("auth enabled");
    }
    Ok(())
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
        Err(ArbiterError::Store(m)) if m.contains("permission denied") => {
            Err(Failure::refused(format!(
                "etcd refused ({m}): break-glass needs etcd root's certificate; operators advance through lock-admin (`lockctl epoch advance request`)"
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

/// `lockctl restore`.
#[derive(clap::Args)]
pub struct RestoreArgs {
    #[arg(long)]
    pub snapshot: PathBuf,
    /// New data directory (must not exist).
    #[arg(long)]
    pub data_dir: PathBuf,
    #[arg(long)]
    pub name: String,
    /// e.g. m1=http://10.0.0.1:2380,m2=...
    #[arg(long)]
    pub initial_cluster: String,
    #[arg(long)]
    pub initial_advertise_peer_urls: String,
    #[arg(long, env = "LOCK_ETCDUTL", default_value = "etcdutl")]
    pub etcdutl: PathBuf,
    /// Reuse this cluster token instead of a fresh one (all members of one restored
    /// cluster need the same token; generate it once, pass it to each member).
    #[arg(long)]
    pub cluster_token: Option<String>,
}

pub fn restore(a: &RestoreArgs) -> Result<(), Failure> {
    if a.data_dir.exists() {
        return Err(Failure::input(format!(
            "{} exists: restore into a new folder",
            a.data_dir.display()
        )));
    }
    let token = a.cluster_token.clone().unwrap_or_else(fresh_cluster_token);
    let out = std::process::Command::new(&a.etcdutl)
        .args(["snapshot", "restore"])
        .arg(&a.snapshot)
        .arg("--data-dir")
        .arg(&a.data_dir)
        .args(["--name", &a.name])
        .args(["--initial-cluster", &a.initial_cluster])
        .args([
            "--initial-advertise-peer-urls",
            &a.initial_advertise_peer_urls,
        ])
        .args(["--initial-cluster-token", &token])
        .output()
        .map_err(|e| Failure::input(format!("running {}: {e}", a.etcdutl.display())))?;
    if !out.status.success() {
        return Err(Failure::refused(format!(
            "etcdutl snapshot restore failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    println!(
        "restored {} into {} with cluster token {token}",
        a.snapshot.display(),
        a.data_dir.display()
    );
    println!(
        "start the member(s) on it; arbiters answer SEALED until an epoch advance (`lockctl epoch advance request --from <epoch>`, approved by a second operator)"
    );
    Ok(())
}

/// A cluster token no earlier cluster used: the cluster ID is derived from it and the
/// member URLs, so a new token means a new cluster ID (ADR-03, DESIGN 8).
fn fresh_cluster_token() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("lock-restore-{nanos:x}-{}", std::process::id())
}
