//! `lock-admin`: the force-release admin API and approval page (ADR-20), on its own
//! listener. Runs as the etcd `force` user.

use anyhow::Context;
use clap::Parser;
use lock_force::advance_store::AdvanceStore;
use lock_force::api::App;
use lock_force::oidc::{OidcSettings, Verifier};
use lock_force::server;
use lock_force::store::ForceStore;
use lock_force::web_session::PageState;
use lock_store::Etcd;
use lock_store::etcd_tls::{self, EtcdTlsFiles};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
#[command(about = "Two-person force release: admin API and approval page (ADR-20)")]
struct Args {
    #[arg(
        long,
        env = "LOCK_ETCD",
        value_delimiter = ',',
        default_value = "http://127.0.0.1:2379"
    )]
    etcd: Vec<String>,
    /// The admin server's etcd credential (the `force` user).
    #[command(flatten)]
    credential: EtcdTlsFiles,
    /// With entity shards, on a shard's lock-admin: the coord cluster's URLs (reached with
    /// the same credential). The shard's epoch advances then take their epoch from the
    /// coord cluster's allocator; without it they are refused (COORD_REQUIRED), never
    /// given E+1. Not needed where --etcd is the coord cluster or a lone cluster.
    #[arg(long, env = "LOCK_COORD_ETCD", value_delimiter = ',')]
    coord: Vec<String>,
    /// The registry folder (for each class's enforcement, shown to approvers).
    #[arg(long, env = "LOCK_REGISTRY")]
    registry: Option<PathBuf>,
    #[command(flatten)]
    oidc: OidcSettings,
    #[arg(long, default_value = "127.0.0.1:8480")]
    listen: SocketAddr,
    /// This server's URL as browsers reach it (the IdP redirects to <url>/callback).
    #[arg(long)]
    public_url: Option<String>,
    /// Serve HTTPS with this certificate chain and key (required off loopback).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// How long a filed request waits for approval, seconds.
    #[arg(long, default_value_t = 3600)]
    request_ttl: u64,
    /// The audit store (PostgreSQL URL, a reader's credential): the explorer's key page
    /// shows the key's latest rows from it. Unset: the page names `lockctl audit` instead.
    #[arg(long, env = "LOCK_AUDIT_DB")]
    audit_db: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    lock_store::logging::init();
    let args = Args::parse();
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(c), Some(k)) => Some(server::tls_acceptor(c, k)?),
        _ => {
            server::plaintext_allowed(args.listen)?;
            None
        }
    };
    let etcd_tls = etcd_tls::load(&args.etcd, &args.credential)?;
    let etcd = Etcd::connect(&args.etcd, Duration::from_secs(5), etcd_tls.as_ref())
        .await
        .context("etcd")?;
    let mut advances = AdvanceStore::new(etcd.clone(), Duration::from_secs(args.request_ttl));
    if !args.coord.is_empty() {
        let coord_tls = etcd_tls::load(&args.coord, &args.credential)?;
        let coord = Etcd::connect(&args.coord, Duration::from_secs(5), coord_tls.as_ref())
            .await
            .context("the coord cluster's etcd")?;
        advances = advances.with_coord(coord);
    }
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .context("HTTP client")?;
    let verifier = Verifier::new(args.oidc, http.clone())
        .await
        .context("the OIDC issuer")?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listen on {}", args.listen))?;
    let local = listener.local_addr()?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let public_url = args
        .public_url
        .unwrap_or_else(|| format!("{scheme}://{local}"));
    let app = Arc::new(App {
        advances,
        store: ForceStore::new(etcd, args.registry, Duration::from_secs(args.request_ttl)),
        verifier,
        page: PageState::new(public_url.clone(), tls.is_some(), http),
        audit_db: args.audit_db,
    });
    // Tests and scripts wait for this line.
    println!("lock-admin listening on {local} ({public_url})");
    server::serve(listener, app, tls).await?;
    Ok(())
}
