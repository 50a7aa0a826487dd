//! `devstack`: the local stack behind `make run`. Starts single-member etcd (with its
//! epoch), arbiters and Envoy with the filter, issues dev SVIDs, writes `<dir>/env.sh` for
//! `lockctl`, then serves until SIGINT/SIGTERM and tears everything down.

use clap::Parser;
use lock_integration::pki::{LEDGER, OPERATOR, ORDERS};
use lock_integration::sidecar::Sidecar;
use lock_integration::workload_api::WorkloadApi;
use lock_integration::{Stack, StackOptions};
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(Parser)]
struct Args {
    /// Folder for data, logs, SVIDs and env.sh (emptied at start).
    #[arg(long, default_value = ".run/stack")]
    dir: PathBuf,
    #[arg(long, default_value_t = 2)]
    arbiters: usize,
    #[arg(long, env = "LOCK_PORT", default_value_t = 8443)]
    port: u16,
    #[arg(long, env = "LOCK_ADMIN_PORT", default_value_t = 9901)]
    admin_port: u16,
    /// Entity shards (0: one etcd cluster, the default). N > 0: a coord cluster and N
    /// entity shards e1..eN, the shard map set up, the arbiters with `--shards`.
    #[arg(long, env = "LOCK_SHARDS", default_value_t = 0)]
    shards: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.dir.exists() {
        std::fs::remove_dir_all(&args.dir)?;
    }
    let dir = std::path::absolute(&args.dir)?;
    let stack = Stack::start(StackOptions {
        arbiters: args.arbiters,
        keep_dir: Some(dir.clone()),
        envoy_ports: Some((args.port, args.admin_port)),
        entity_shards: args.shards,
        ..Default::default()
    })
    .await?;
    let mut names = Vec::new();
    for (name, id) in [("ops", OPERATOR), ("ledger", LEDGER), ("orders", ORDERS)] {
        stack.pki.svid(name, id)?;
        names.push((name, id));
    }
    // The ledger's other two ways to connect: its SVID from the Workload API (what a SPIRE
    // agent serves) and its mesh sidecar (plaintext in, mTLS with its SVID out).
    let agent = WorkloadApi::start(
        &stack.pki,
        &dir.join("agent"),
        LEDGER,
        std::time::Duration::from_secs(3600),
    )?;
    let sidecar = Sidecar::start(
        &dir.join("sidecar"),
        stack.envoy.listen,
        &stack.pki.files("ledger"),
    )?;
    let ops = stack.pki.files("ops");
    let env = format!(
        "export LOCK_ENDPOINT={}\nexport LOCK_SVID={}\nexport LOCK_SVID_KEY={}\nexport LOCK_CA={}\nexport LOCK_ETCD={}\nexport LOCK_ETCD_CA={}\nexport LOCK_ETCD_CERT={}\nexport LOCK_ETCD_KEY={}\nexport PATH=\"{}:$PATH\"\n",
        stack.endpoint(),
        ops.cert.display(),
        ops.key.display(),
        ops.ca.display(),
        stack.etcd.client_url,
        // lockctl's store commands (epoch, register --etcd) as etcd's operator user.
        stack.etcd.pki.ca().display(),
        stack.etcd.pki.cert("operator").display(),
        stack.etcd.pki.key("operator").display(),
        lock_integration::paths::workspace_bin("lockctl")?
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
    );
    std::fs::write(dir.join("env.sh"), env)?;

    let mut msg = String::new();
    writeln!(msg, "lock stack is up (folder {})", dir.display())?;
    writeln!(
        msg,
        "  envoy   {} (admin http://{})",
        stack.endpoint(),
        stack.envoy.admin
    )?;
    for a in &stack.arbiters {
        writeln!(msg, "  {}  {}", a.id, a.addr)?;
    }
    writeln!(
        msg,
        "  etcd    {} (TLS, client certificates, roles; {}/{{operator,root}}.pem)",
        stack.etcd.client_url,
        stack.etcd.pki.dir.display()
    )?;
    for shard in &stack.shards {
        writeln!(
            msg,
            "  {:<7} {} (entity shard; the cluster above is the coord cluster: lockctl shards show)",
            shard.name, shard.client_url
        )?;
    }
    writeln!(
        msg,
        "  the ledger's Workload API {} and mesh sidecar {}",
        agent.endpoint(),
        sidecar.endpoint()
    )?;
    writeln!(
        msg,
        "  SVIDs   {}/{{ops,ledger,orders}}.pem",
        stack.pki.dir.display()
    )?;
    for (name, id) in &names {
        writeln!(msg, "          {name:<7} {id}")?;
    }
    writeln!(msg)?;
    writeln!(msg, "take a lock (as the operator identity):")?;
    writeln!(msg, "  source {}/env.sh", dir.display())?;
    writeln!(
        msg,
        "  lockctl acquire pay/ledger/42          # prints token=... epoch=... revision=..."
    )?;
    writeln!(msg, "  lockctl release pay/ledger/42 <token>")?;
    writeln!(
        msg,
        "as the ledger, its SVID from the Workload API, or through its sidecar:"
    )?;
    writeln!(
        msg,
        "  env -u LOCK_SVID SPIFFE_ENDPOINT_SOCKET={} lockctl acquire pay/ledger/43",
        agent.endpoint()
    )?;
    writeln!(
        msg,
        "  LOCK_ENDPOINT={} lockctl acquire pay/ledger/44",
        sidecar.endpoint()
    )?;
    writeln!(msg, "stop with: make stop")?;
    std::fs::write(dir.join("ready"), &msg)?;
    print!("{msg}");

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    drop(sidecar);
    drop(agent);
    drop(stack);
    Ok(())
}
