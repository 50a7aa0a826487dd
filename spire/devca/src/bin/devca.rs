//! `devca`: create the development CA and issue X.509-SVIDs from the command line.
//!
//!   devca init  --dir DIR --trust-domain dev.lock.local
//!   devca issue --dir DIR --spiffe-id spiffe://dev.lock.local/ns/pay/sa/ledger --name ledger [--dns localhost] [--hours 1]
//!   devca workload-api --dir DIR --socket PATH --spiffe-id ID [--ttl-seconds 3600]

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use lock_devca::{DevCa, Leaf, workload_api};
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;

#[derive(Parser)]
#[command(about = "Development CA issuing X.509-SVIDs (not for production: use SPIRE)")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create the CA in DIR (kept if it exists).
    Init {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value = "dev.lock.local")]
        trust_domain: String,
    },
    /// Issue an SVID into DIR/NAME.pem and DIR/NAME.key.
    Issue {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        spiffe_id: String,
        #[arg(long)]
        name: String,
        #[arg(long)]
        dns: Vec<String>,
        #[arg(long, default_value_t = 1)]
        hours: i64,
    },
    /// Serve the SPIFFE Workload API (X.509) on a unix socket, handing every caller an
    /// SVID for SPIFFE_ID valid for TTL and rotated at half of it (a SPIRE agent's
    /// behaviour, without its attestation: the socket's mode 0600 is the access control).
    WorkloadApi {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        socket: PathBuf,
        #[arg(long)]
        spiffe_id: String,
        #[arg(long, default_value_t = 3600)]
        ttl_seconds: u64,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().cmd {
        Cmd::Init { dir, trust_domain } => {
            DevCa::load_or_create(&dir, &trust_domain).context("creating the dev CA")?;
            println!("dev CA in {}", dir.display());
        }
        Cmd::Issue {
            dir,
            spiffe_id,
            name,
            dns,
            hours,
        } => {
            let ca = DevCa::load(&dir).context("loading the dev CA (run `devca init` first)")?;
            let mut leaf = Leaf::svid(&spiffe_id).valid_for(time::Duration::hours(hours));
            for d in &dns {
                leaf = leaf.with_dns(d);
            }
            ca.issue(&leaf)?.save(&dir, &name)?;
            println!("{} -> {}/{name}.pem", spiffe_id, dir.display());
        }
        Cmd::WorkloadApi {
            dir,
            socket,
            spiffe_id,
            ttl_seconds,
        } => {
            let ca = DevCa::load(&dir).context("loading the dev CA (run `devca init` first)")?;
            let ttl = std::time::Duration::from_secs(ttl_seconds.max(2));
            let issuer = workload_api::Issuer::new(ca, &spiffe_id, ttl)?;
            // A socket left by an earlier run would make bind fail.
            let _ = std::fs::remove_file(&socket);
            let listener = tokio::net::UnixListener::bind(&socket)
                .with_context(|| format!("binding {}", socket.display()))?;
            std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))?;
            tokio::spawn(issuer.clone().rotate_forever());
            println!(
                "workload api: serving {spiffe_id} on unix://{} (ttl {}s)",
                socket.display(),
                ttl.as_secs()
            );
            tonic::transport::Server::builder()
                .add_service(issuer.service())
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::UnixListenerStream::new(listener),
                    async {
                        let _ = tokio::signal::ctrl_c().await;
                    },
                )
                .await?;
        }
    }
    Ok(())
}
