//! `lock-registry-sync`: the registry's custom resources reach the arbiters (ADR-24). Watches
//! LockClass, LockGrant, Namespace and PauseTestResult in one namespace and writes the whole
//! set to `--out`, the folder the arbiters' `--registry` reads, whenever it changes and
//! passes the registry's one validation; an invalid set is not written (the last good set
//! stays; `lock_registry_sync_refused` and the log say why).

use anyhow::Context as _;
use clap::Parser;
use lock_kube::sync::{admin, run};
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Parser)]
#[command(about = "Writes the lock registry's custom resources to the arbiters' registry folder")]
struct Args {
    /// A kubeconfig file; without one, the pod's service account (in-cluster config).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The namespace holding the registry's resources.
    #[arg(long, default_value = "lock-registry")]
    namespace: String,
    /// The registry folder to keep (the arbiters' `--registry`); this controller's own.
    #[arg(long)]
    out: PathBuf,
    /// `GET /metrics` and `/healthz` (200 once listed and the folder holds a set) here
    /// (plaintext; loopback or a pod address).
    #[arg(long, default_value = "127.0.0.1:0")]
    admin_listen: SocketAddr,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    lock_store::logging::init();
    // The kube client's TLS: rustls with ring, as everywhere in the workspace.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = Args::parse();
    let admin = tokio::net::TcpListener::bind(args.admin_listen)
        .await
        .with_context(|| format!("binding the admin listener {}", args.admin_listen))?;
    // The harness reads the bound address from here, as it does the arbiter's.
    println!("admin listening on {}", admin.local_addr()?);
    tokio::spawn(admin::serve(admin, args.out.clone()));
    let client = run::client(args.kubeconfig.as_deref()).await?;
    println!(
        "lock-registry-sync watching namespace {} into {}",
        args.namespace,
        args.out.display()
    );
    run::run(client, args.namespace, args.out).await
}
