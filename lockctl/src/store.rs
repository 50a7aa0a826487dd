//! Commands that talk to etcd directly as an operator (or etcd root): users and roles, and
//! restoring a member from a snapshot with a fresh cluster token; the connection and
//! error mapping the other etcd commands (`epoch`, `shards`) share.

use crate::Failure;
use clap::Subcommand;
use lock_store::etcd_tls::EtcdTlsFiles;
use lock_store::{Etcd, StoreError};
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

/// A store error as lockctl reports it: no quorum is "unreachable" (exit 3), anything
/// else a refusal (exit 1).
pub fn failed(e: StoreError) -> Failure {
    match e {
        StoreError::NoQuorum => Failure::unreachable("etcd unreachable or without quorum"),
        e => Failure::refused(e.to_string()),
    }
}

/// The next epoch from the coord cluster's allocator, above `above` and every epoch any
/// cluster has had (tiers and shards: ADR-03, 07).
pub(crate) async fn allocate(
    coord_urls: &[String],
    tls: &EtcdTlsFiles,
    above: u16,
) -> Result<u16, Failure> {
    let coord = connect(coord_urls, tls).await?;
    lock_store::shard_map::allocate_epoch(&coord, above)
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
    let tls = lock_store::etcd_tls::load(etcd, tls).map_err(|e| Failure::input(e.to_string()))?;
    Etcd::connect(etcd, Duration::from_secs(5), tls.as_ref())
        .await
        .map_err(|e| Failure::unreachable(format!("etcd: {e}")))
}

/// `lockctl roles show|apply`: reads etcd's users and roles, prints the plan to reach
/// `etcd_roles::ROLES`/`USERS`, and with `apply` makes it and enables auth.
async fn roles_plan(etcd: &[String], tls: &EtcdTlsFiles, apply: bool) -> Result<(), Failure> {
    use lock_store::etcd_roles;
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
