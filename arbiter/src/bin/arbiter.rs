//! `arbiter`: parse flags, load and validate the registry, connect to etcd, bind loopback,
//! serve until SIGINT/SIGTERM.

use anyhow::{Context as _, bail};
use clap::Parser;
use lock_arbiter::{Engine, Store, registry_files, server};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
#[command(about = "lock.v1 arbiter: etcd grant transactions, sessions, epoch seal")]
struct Args {
    /// Address to serve on. Loopback only: the arbiter trusts x-lock-identity from Envoy,
    /// so nothing else may reach it.
    #[arg(long, default_value = "127.0.0.1:7400", env = "ARBITER_LISTEN")]
    listen: SocketAddr,
    /// etcd client URLs, comma-separated.
    #[arg(
        long,
        default_value = "http://127.0.0.1:2379",
        env = "ARBITER_ETCD",
        value_delimiter = ','
    )]
    etcd: Vec<String>,
    /// Registry directory (*.yaml): classes decide TTLs.
    #[arg(long, env = "ARBITER_REGISTRY")]
    registry: PathBuf,
    /// Name reported in x-lock-arbiter.
    #[arg(long, default_value = "arbiter", env = "ARBITER_ID")]
    id: String,
    /// Bound on every etcd call; past it a request fails NO_QUORUM.
    #[arg(long, default_value_t = 2000, env = "ARBITER_STORE_TIMEOUT_MS")]
    store_timeout_ms: u64,
    /// Debug builds only: inject a deliberate bug (repeatable) so the release gate can
    /// show it catches it. Never in a release build.
    #[cfg(debug_assertions)]
    #[arg(long = "inject-bug", hide = true)]
    inject_bug: Vec<lock_arbiter::bugs::Bug>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    if !args.listen.ip().is_loopback() {
        bail!(
            "refusing to listen on {}: the arbiter trusts x-lock-identity and must be reachable only by Envoy (loopback)",
            args.listen
        );
    }
    let registry = registry_files::load(&args.registry)
        .with_context(|| format!("loading registry {}", args.registry.display()))?;
    let store = Store::connect(&args.etcd, Duration::from_millis(args.store_timeout_ms))
        .await
        .context("connecting to etcd")?;
    #[allow(unused_mut)]
    let mut engine = Engine::new(store, Arc::new(registry));
    #[cfg(debug_assertions)]
    {
        engine.bugs = lock_arbiter::bugs::Bugs::new(args.inject_bug.clone());
    }
    if !engine.bugs.is_empty() {
        tracing::warn!(bugs = ?engine.bugs, "DELIBERATE BUGS INJECTED: this arbiter is unsafe, for the release gate only");
    }
    let engine = Arc::new(engine);
    if let Err(e) = engine.epoch.refresh(&engine.store).await {
        // Not fatal: the arbiter serves refusals (SEALED) until the epoch exists.
        tracing::warn!(error = %e, "epoch not usable yet");
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr()?;
    // The harness waits for this line (port 0 picks a free port).
    println!("arbiter {} listening on {addr}", args.id);
    tracing::info!(id = args.id, %addr, "serving lock.v1");
    server::serve(listener, engine, &args.id, shutdown()).await?;
    Ok(())
}

async fn shutdown() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}
