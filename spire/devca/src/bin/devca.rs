//! `devca`: create the development CA and issue X.509-SVIDs from the command line.
//!
//!   devca init  --dir DIR --trust-domain dev.lock.local
//!   devca issue --dir DIR --spiffe-id spiffe://dev.lock.local/ns/pay/sa/ledger --name ledger [--dns localhost] [--hours 1]

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use lock_devca::{DevCa, Leaf};
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
}

fn main() -> anyhow::Result<()> {
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
    }
    Ok(())
}
