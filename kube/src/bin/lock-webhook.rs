//! `lock-webhook`: the registry's validating admission webhook (ADR-24). HTTPS only (the
//! API server calls webhooks over TLS, trusting the caBundle of the webhook configuration).

use anyhow::Context;
use clap::Parser;
use lock_kube::server::{Webhook, serve};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Parser)]
#[command(about = "Validating admission webhook for the lock registry's custom resources")]
struct Args {
    /// The registry in force (reviewed YAML or exported CRs), judged against on each review.
    #[arg(long, env = "LOCK_REGISTRY")]
    registry: PathBuf,
    #[arg(long, default_value = "127.0.0.1:8443")]
    listen: SocketAddr,
    #[arg(long)]
    tls_cert: PathBuf,
    #[arg(long)]
    tls_key: PathBuf,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    lock_store::logging::init();
    let args = Args::parse();
    let tls = lock_store::https::acceptor(&args.tls_cert, &args.tls_key)?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listen on {}", args.listen))?;
    println!("lock-webhook listening on {}", listener.local_addr()?);
    serve(
        listener,
        Arc::new(Webhook {
            registry: args.registry,
        }),
        tls,
    )
    .await?;
    Ok(())
}
