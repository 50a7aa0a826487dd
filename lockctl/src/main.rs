//! `lockctl`: the operator and workload CLI.
//!
//! Exit codes: 0 success; 1 refused by the service (the reason is printed), or for
//! `registry diff` changes found; 2 usage or local input error (bad registry, bad token);
//! 3 cannot reach the service or etcd.

mod force;
mod offline;
mod refusal;
mod remote;
mod run;
mod shards;

use clap::{Parser, Subcommand};
use lock_arbiter::etcd_tls::EtcdTlsFiles;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(about = "fenced lock service: take and release locks, manage epoch and registry")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args, Clone)]
pub struct Conn {
    /// Envoy's lock.v1 endpoint; `http://127.0.0.1:PORT` is the workload's mesh sidecar,
    /// which presents the workload's SVID to the edge (plaintext goes to loopback only).
    #[arg(long, env = "LOCK_ENDPOINT", default_value = "https://127.0.0.1:8443")]
    pub endpoint: String,
    /// The SPIFFE Workload API (e.g. `unix:///run/spire/agent.sock`): the SVID and bundle
    /// come from it instead of files.
    #[arg(long, env = "SPIFFE_ENDPOINT_SOCKET")]
    pub spiffe_socket: Option<String>,
    /// This workload's X.509-SVID (PEM).
    #[arg(long, env = "LOCK_SVID")]
    pub svid: Option<PathBuf>,
    /// The SVID's private key (PEM).
    #[arg(long, env = "LOCK_SVID_KEY")]
    pub svid_key: Option<PathBuf>,
    /// Trust bundle (PEM) that signs Envoy's certificate.
    #[arg(long, env = "LOCK_CA")]
    pub ca: Option<PathBuf>,
    /// Name to verify in Envoy's certificate.
    #[arg(long, env = "LOCK_SERVER_NAME", default_value = "localhost")]
    pub server_name: String,
}

impl Conn {
    /// The client configuration: the mesh sidecar for an `http://` endpoint; else SVID
    /// files when all three are given; else the Workload API when its socket is (the
    /// variable SPIRE sets in a workload's environment).
    pub async fn config(&self) -> Result<lock_client::Config, Failure> {
        use lock_client::{Config, Credentials};
        if self.endpoint.starts_with("http://") {
            return Ok(Config::mesh_sidecar(self.endpoint.clone()));
        }
        if let (Some(cert), Some(key), Some(ca)) = (&self.svid, &self.svid_key, &self.ca) {
            return Ok(Config::files(
                self.endpoint.clone(),
                cert,
                key,
                ca,
                self.server_name.clone(),
            ));
        }
        match &self.spiffe_socket {
            Some(socket) => {
                let source = lock_client::workload_api_source(socket)
                    .await
                    .map_err(|e| Failure::unreachable(e.to_string()))?;
                Ok(Config {
                    endpoint: self.endpoint.clone(),
                    credentials: Credentials::WorkloadApi {
                        source,
                        server_name: self.server_name.clone(),
                    },
                    instance: None,
                })
            }
            _ => Err(Failure::input(
                "no identity: give --svid, --svid-key and --ca (LOCK_SVID, LOCK_SVID_KEY, \
                 LOCK_CA), or --spiffe-socket (SPIFFE_ENDPOINT_SOCKET) for the Workload API, or an http:// \
                 endpoint for the mesh sidecar",
            )),
        }
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Take a lock: opens a session for the key's class and acquires. Prints the token.
    /// The hold lasts until released or until the session's TTL lapses (lockctl does not
    /// keep the session alive after it exits).
    Acquire {
        key: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Run COMMAND while holding KEY (like flock): the token is in $LOCK_TOKEN. COMMAND runs
    /// in its own process group, which is stopped (SIGTERM, then SIGKILL after --grace) if
    /// the hold is fenced, gets SIGTERM/SIGINT/SIGHUP forwarded, and gets SIGKILL if lockctl
    /// dies. Every way out releases the lock and closes the session. Exit: the command's
    /// status; 1 refused; 2 bad input or COMMAND cannot start; 3 unreachable; 4 fenced;
    /// 128+N after signal N.
    Run {
        key: String,
        /// How long to wait for the lock (e.g. 10s, 500ms).
        #[arg(long, default_value = "0s", value_parser = run::parse_duration)]
        wait: std::time::Duration,
        /// Between SIGTERM and SIGKILL when the hold is fenced.
        #[arg(long, default_value = "5s", value_parser = run::parse_duration)]
        grace: std::time::Duration,
        #[command(flatten)]
        conn: Conn,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Who holds KEY, since when, and how many wait (never the token).
    Inspect {
        key: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Is TOKEN the current grant of KEY? Exit 0 if it is, 1 if not. One linearizable read:
    /// prefer the resource's own conditional write, which is atomic with the write.
    Validate {
        key: String,
        token: u64,
        #[command(flatten)]
        conn: Conn,
    },
    /// Internal to `lockctl run`: SIGKILL process group PGID once process PARENT is gone.
    #[command(hide = true)]
    GroupGuard {
        #[arg(long)]
        pgid: i32,
        #[arg(long)]
        parent: i32,
    },
    /// Release a lock with the token `acquire` printed.
    Release {
        key: String,
        token: u64,
        #[command(flatten)]
        conn: Conn,
    },
    /// Epoch record administration (ADR-03).
    Epoch {
        #[command(subcommand)]
        cmd: EpochCmd,
    },
    /// A key's history from the audit store (ADR-21): grants, handoffs, releases,
    /// expiries, forced releases, oldest first. KEY is a lock key, or `/s/<lease>` for a
    /// session.
    Audit {
        key: String,
        /// Only events observed in this last stretch (e.g. 30m, 12h, 7d).
        #[arg(long)]
        since: Option<String>,
        /// The audit store (PostgreSQL URL).
        #[arg(long, env = "LOCK_AUDIT_DB")]
        db: String,
        /// Print JSON lines instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Tiers and entity shards (ADR-07, 09): the shard map on the coord cluster (`--etcd`),
    /// moves by adding a shard, pinning a namespace or draining a shard, and the simulation.
    Shards {
        #[command(subcommand)]
        cmd: ShardsCmd,
    },
    /// Two-person force release of a leaked lock (ADR-20), through the admin API
    /// (`lock-admin`): one operator files, a different one approves; both sign in at the
    /// IdP (an ID token from --id-token-file or $LOCK_ID_TOKEN, or --device-login).
    ForceRelease {
        #[command(subcommand)]
        cmd: ForceCmd,
    },
    /// etcd users and roles: the arbiter may read /sys/ and write /l/ /s/ /q/, the operator
    /// also /sys/ (run with the root user's client certificate).
    Roles {
        #[command(subcommand)]
        cmd: RolesCmd,
    },
    /// Registry documents (ADR-24).
    Registry {
        #[command(subcommand)]
        cmd: RegistryCmd,
    },
    /// The standing risk register (ADR-01): every advisory correctness class with its risk
    /// owner and waiver expiry (expired ones flagged) and, given etcd, its current holds.
    Register {
        dir: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Count the current holds of each class in this store.
        #[arg(long, value_delimiter = ',')]
        etcd: Vec<String>,
        #[command(flatten)]
        etcd_tls: EtcdTlsFiles,
        /// The arbiters' admin listeners (host:port): grants per class since their start,
        /// summed over them (`lock_arbiter_grants_total`).
        #[arg(long, value_delimiter = ',')]
        metrics: Vec<String>,
    },
    /// Restore an etcd member from a snapshot with `etcdutl snapshot restore`, always with a
    /// fresh --initial-cluster-token so the restored cluster gets a new cluster ID and the
    /// arbiters seal until `lockctl epoch advance` (DESIGN 8: identical flags keep the ID).
    Restore {
        #[arg(long)]
        snapshot: PathBuf,
        /// New data directory (must not exist).
        #[arg(long)]
        data_dir: PathBuf,
        #[arg(long)]
        name: String,
        /// e.g. m1=http://10.0.0.1:2380,m2=...
        #[arg(long)]
        initial_cluster: String,
        #[arg(long)]
        initial_advertise_peer_urls: String,
        #[arg(long, env = "LOCK_ETCDUTL", default_value = "etcdutl")]
        etcdutl: PathBuf,
        /// Reuse this cluster token instead of a fresh one (all members of one restored
        /// cluster need the same token; generate it once, pass it to each member).
        #[arg(long)]
        cluster_token: Option<String>,
    },
    /// The edge filter's configuration compiled from a registry.
    Grants {
        #[command(subcommand)]
        cmd: GrantsCmd,
    },
}

/// etcd client URLs for the commands that talk to the store directly.
#[derive(clap::Args)]
struct EtcdArgs {
    #[arg(
        long,
        env = "LOCK_ETCD",
        default_value = "http://127.0.0.1:2379",
        value_delimiter = ','
    )]
    etcd: Vec<String>,
    /// The etcd credential (the `operator` user for the epoch, `root` for roles).
    #[command(flatten)]
    tls: EtcdTlsFiles,
}

#[derive(Subcommand)]
enum ShardsCmd {
    /// Set up the shard map on the coord cluster (`--etcd`): the epoch allocator, each
    /// shard's epoch (allocated there) and fence, the map at version 1. Arbiters then run
    /// with `--shards`. Idempotent.
    Init {
        #[command(flatten)]
        store: EtcdArgs,
        /// An entity shard, NAME=URL[,URL...] (repeat for each).
        #[arg(long = "shard", required = true, value_parser = shards::parse_shard)]
        shards: Vec<lock_config::shards::Shard>,
        /// Path segments after the namespace that make a key's home (0: the namespace).
        #[arg(long, default_value_t = 1)]
        depth: u8,
    },
    /// The map in force (and one being moved to), each shard's epoch and the map version
    /// its fence serves.
    Show {
        #[command(flatten)]
        store: EtcdArgs,
    },
    /// Add a shard NAME=URL[,URL...]: about 1/(N+1) of the keys move to it (drained first:
    /// their new grants are refused MOVING until the move completes).
    Add {
        #[command(flatten)]
        store: EtcdArgs,
        #[arg(value_parser = shards::parse_shard)]
        shard: lock_config::shards::Shard,
        #[command(flatten)]
        moving: MoveArgs,
    },
    /// Pin NAMESPACE to shard --to (ADR-09's override), or back to hashing with --unpin.
    Move {
        #[command(flatten)]
        store: EtcdArgs,
        namespace: String,
        #[arg(long, required_unless_present = "unpin")]
        to: Option<String>,
        #[arg(long, conflicts_with = "to")]
        unpin: bool,
        #[command(flatten)]
        moving: MoveArgs,
    },
    /// Take shard NAME out of the map: its keys move to the others.
    Drain {
        #[command(flatten)]
        store: EtcdArgs,
        name: String,
        #[command(flatten)]
        moving: MoveArgs,
    },
    /// Rendezvous hashing of KEYS deterministic keys over N shards, one shard added: keys
    /// moved (against the ideal 1/(N+1)), moves between old shards (always 0), and the
    /// largest and smallest shard over the mean. Pure computation, no cluster.
    Simulate {
        #[arg(long, default_value_t = 100_000)]
        keys: usize,
        /// Namespaces the keys are spread over.
        #[arg(long, default_value_t = 1000)]
        namespaces: usize,
        /// Shard counts to add one shard to.
        #[arg(long, value_delimiter = ',', default_value = "1,2,4,10,50")]
        shards: Vec<usize>,
        /// Home depth (path segments after the namespace).
        #[arg(long, default_value_t = 1)]
        depth: u8,
    },
}

#[derive(clap::Args)]
struct MoveArgs {
    /// Seconds to wait for holds of moving keys to end; past it nothing moves.
    #[arg(long, default_value_t = 120)]
    wait: u64,
    /// Accept an epoch advance of a receiving shard whose epoch is not above its sources'
    /// (it ends that shard's holds, as any advance does).
    #[arg(long)]
    advance_destination: bool,
}

impl MoveArgs {
    fn options(&self) -> lock_arbiter::rehome::MoveOptions {
        lock_arbiter::rehome::MoveOptions {
            wait: std::time::Duration::from_secs(self.wait),
            advance_destinations: self.advance_destination,
        }
    }
}

#[derive(Subcommand)]
pub enum ForceCmd {
    /// File a request to release KEY's current hold; prints the request id. A second
    /// operator approves it with `approve ID` (or on the approval page).
    Request {
        key: String,
        /// Why (kept with the record and in the audit trail).
        #[arg(long)]
        reason: String,
        /// Also revoke the holder's session: every hold it has ends.
        #[arg(long)]
        revoke_session: bool,
        #[command(flatten)]
        admin: force::AdminConn,
    },
    /// Approve and execute request ID (never your own).
    Approve {
        id: String,
        #[command(flatten)]
        admin: force::AdminConn,
    },
    /// Pending requests and the releases executed in the last 24 h.
    List {
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        admin: force::AdminConn,
    },
}

#[derive(Subcommand)]
enum RolesCmd {
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

#[derive(Subcommand)]
enum EpochCmd {
    /// Create /sys/epoch (epoch 1, bound to the cluster ID) if absent.
    Init {
        #[command(flatten)]
        store: EtcdArgs,
    },
    /// After a restore: one transaction that moves the epoch from FROM to FROM+1, binds it
    /// to the store's current cluster ID and deletes every hold and durable waiter. Every
    /// token issued afterwards is larger than every token issued before.
    Advance {
        #[command(flatten)]
        store: EtcdArgs,
        /// The epoch the store is at now (a guard against advancing twice).
        #[arg(long)]
        from: u16,
        /// With several clusters (tiers and shards): the coord cluster's URLs. The new
        /// epoch is allocated there, above every epoch any cluster has had, instead of
        /// FROM+1 (which another cluster may already have used).
        #[arg(long, value_delimiter = ',')]
        coord: Vec<String>,
    },
}

#[derive(Subcommand)]
enum RegistryCmd {
    /// Validate a registry directory and print each class's cost and liveness bound.
    Check {
        dir: PathBuf,
        /// Expected concurrent sessions per class, for the keepalive load estimate.
        #[arg(long, default_value_t = 1000)]
        sessions: u64,
    },
    /// What a change does: identities gaining and losing prefixes, namespaces moving
    /// region, classes changing enforcement, posture, TTL or tier (with their renewal cost
    /// and liveness bound). OLD and NEW are directories, or `REV:DIR` read from git (e.g.
    /// `origin/main:registry`). Exit 0: no change (or none risky, with --fail-on risky);
    /// 1: changes; 2: a registry is invalid.
    Diff {
        old: String,
        new: String,
        /// Expected concurrent sessions per class, for the keepalive load estimate.
        #[arg(long, default_value_t = 1000)]
        sessions: u64,
        /// Which changes make the exit status 1.
        #[arg(long, value_enum, default_value_t = offline::FailOn::Any)]
        fail_on: offline::FailOn,
    },
    /// Who serves which version: each Envoy's filter configuration (its
    /// `lock_edge.config_version` gauge) and each arbiter's registry (its `/status`),
    /// against what DIR compiles to. Exit 0: all current; 1: some stale; 3: unreachable.
    Status {
        dir: PathBuf,
        #[arg(long)]
        region: String,
        #[arg(long = "trust-domain", required = true)]
        trust_domains: Vec<String>,
        /// Envoy admin listeners (host:port).
        #[arg(long, value_delimiter = ',')]
        envoy_admin: Vec<String>,
        /// Arbiter admin listeners (host:port).
        #[arg(long, value_delimiter = ',')]
        arbiter_admin: Vec<String>,
    },
    /// The CustomResourceDefinitions of the registry's kinds, generated from the document
    /// types: written to OUT (one file per kind), or with --check, compared with OUT
    /// (exit 1 when they differ: regenerate).
    Crds {
        #[arg(long, default_value = "deploy/kubernetes/crds")]
        out: PathBuf,
        #[arg(long)]
        check: bool,
    },
}

#[derive(Subcommand)]
enum GrantsCmd {
    /// Print the filter's plugin configuration (JSON) for one region.
    Compile {
        dir: PathBuf,
        #[arg(long)]
        region: String,
        #[arg(long = "trust-domain", required = true)]
        trust_domains: Vec<String>,
    },
    /// Validate the registry, compile the filter configuration and write Envoy's ECDS
    /// resource atomically (temp file + rename); Envoy applies it without a restart.
    Push {
        dir: PathBuf,
        #[arg(long)]
        region: String,
        #[arg(long = "trust-domain", required = true)]
        trust_domains: Vec<String>,
        /// The ECDS file Envoy's `path_config_source` watches.
        #[arg(long)]
        out: PathBuf,
        /// lock_filter.wasm as Envoy should load it (keep it unchanged between pushes so
        /// Envoy keeps the VM and its rate buckets).
        #[arg(long)]
        wasm: PathBuf,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cmd = Cli::parse().cmd;
    if let Cmd::Run {
        key,
        wait,
        grace,
        conn,
        command,
    } = &cmd
    {
        return match run::run(conn, key, *wait, *grace, command).await {
            Ok(code) => code,
            Err(e) => {
                eprintln!("lockctl: {}", e.message);
                ExitCode::from(e.exit)
            }
        };
    }
    if let Cmd::GroupGuard { pgid, parent } = &cmd {
        return run::group_guard(*pgid, *parent).await;
    }
    let result = match cmd {
        Cmd::Run { .. } | Cmd::GroupGuard { .. } => Ok(()),
        Cmd::Register {
            dir,
            json,
            etcd,
            etcd_tls,
            metrics,
        } => offline::register(&dir, json, &etcd, &etcd_tls, &metrics).await,
        Cmd::Acquire { key, conn } => remote::acquire(&conn, &key).await,
        Cmd::Release { key, token, conn } => remote::release(&conn, &key, token).await,
        Cmd::Inspect { key, conn } => remote::inspect(&conn, &key).await,
        Cmd::Validate { key, token, conn } => remote::validate(&conn, &key, token).await,
        Cmd::Epoch {
            cmd: EpochCmd::Init { store },
        } => offline::epoch_init(&store.etcd, &store.tls).await,
        Cmd::Epoch {
            cmd: EpochCmd::Advance { store, from, coord },
        } => match coord.is_empty() {
            true => offline::epoch_advance(&store.etcd, &store.tls, from, None).await,
            false => match shards::allocate(&coord, &store.tls, from).await {
                Ok(next) => offline::epoch_advance(&store.etcd, &store.tls, from, Some(next)).await,
                Err(e) => Err(e),
            },
        },
        Cmd::Audit {
            key,
            since,
            db,
            json,
        } => offline::audit(&key, since.as_deref(), &db, json).await,
        Cmd::ForceRelease { cmd } => force::run(cmd).await,
        Cmd::Shards {
            cmd:
                ShardsCmd::Simulate {
                    keys,
                    namespaces,
                    shards,
                    depth,
                },
        } => {
            offline::shards_simulate(keys, namespaces, &shards, depth);
            Ok(())
        }
        Cmd::Shards {
            cmd:
                ShardsCmd::Init {
                    store,
                    shards: list,
                    depth,
                },
        } => shards::init(&store.etcd, &store.tls, list, depth).await,
        Cmd::Shards {
            cmd: ShardsCmd::Show { store },
        } => shards::show(&store.etcd, &store.tls).await,
        Cmd::Shards {
            cmd:
                ShardsCmd::Add {
                    store,
                    shard,
                    moving,
                },
        } => {
            let change = shards::Change::Add(shard);
            shards::change(&store.etcd, &store.tls, change, moving.options()).await
        }
        Cmd::Shards {
            cmd:
                ShardsCmd::Move {
                    store,
                    namespace,
                    to,
                    unpin: _,
                    moving,
                },
        } => {
            let change = shards::Change::Pin { namespace, to };
            shards::change(&store.etcd, &store.tls, change, moving.options()).await
        }
        Cmd::Shards {
            cmd:
                ShardsCmd::Drain {
                    store,
                    name,
                    moving,
                },
        } => {
            let change = shards::Change::Drain(name);
            shards::change(&store.etcd, &store.tls, change, moving.options()).await
        }
        Cmd::Roles {
            cmd: RolesCmd::Apply { store, dry_run },
        } => offline::roles(&store.etcd, &store.tls, !dry_run).await,
        Cmd::Roles {
            cmd: RolesCmd::Show { store },
        } => offline::roles(&store.etcd, &store.tls, false).await,
        Cmd::Restore {
            snapshot,
            data_dir,
            name,
            initial_cluster,
            initial_advertise_peer_urls,
            etcdutl,
            cluster_token,
        } => offline::restore(&offline::RestoreArgs {
            snapshot,
            data_dir,
            name,
            initial_cluster,
            initial_advertise_peer_urls,
            etcdutl,
            cluster_token,
        }),
        Cmd::Registry {
            cmd: RegistryCmd::Check { dir, sessions },
        } => offline::registry_check(&dir, sessions),
        Cmd::Registry {
            cmd:
                RegistryCmd::Diff {
                    old,
                    new,
                    sessions,
                    fail_on,
                },
        } => match offline::registry_diff(&old, &new, sessions, fail_on) {
            Ok(true) => return ExitCode::from(1),
            Ok(false) => Ok(()),
            Err(e) => Err(e),
        },
        Cmd::Registry {
            cmd: RegistryCmd::Crds { out, check },
        } => match offline::registry_crds(&out, check) {
            Ok(true) => return ExitCode::from(1),
            Ok(false) => Ok(()),
            Err(e) => Err(e),
        },
        Cmd::Registry {
            cmd:
                RegistryCmd::Status {
                    dir,
                    region,
                    trust_domains,
                    envoy_admin,
                    arbiter_admin,
                },
        } => match offline::registry_status(
            &dir,
            &region,
            &trust_domains,
            &envoy_admin,
            &arbiter_admin,
        )
        .await
        {
            Ok(true) => return ExitCode::from(1),
            Ok(false) => Ok(()),
            Err(e) => Err(e),
        },
        Cmd::Grants {
            cmd:
                GrantsCmd::Compile {
                    dir,
                    region,
                    trust_domains,
                },
        } => offline::grants_compile(&dir, &region, &trust_domains),
        Cmd::Grants {
            cmd:
                GrantsCmd::Push {
                    dir,
                    region,
                    trust_domains,
                    out,
                    wasm,
                },
        } => offline::grants_push(&dir, &region, &trust_domains, &out, &wasm),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lockctl: {}", e.message);
            ExitCode::from(e.exit)
        }
    }
}

/// A failure with its exit code.
pub struct Failure {
    pub exit: u8,
    pub message: String,
}

impl Failure {
    pub fn refused(message: impl Into<String>) -> Self {
        Self {
            exit: 1,
            message: message.into(),
        }
    }
    pub fn input(message: impl Into<String>) -> Self {
        Self {
            exit: 2,
            message: message.into(),
        }
    }
    pub fn unreachable(message: impl Into<String>) -> Self {
        Self {
            exit: 3,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory as _;
        super::Cli::command().debug_assert();
    }
}
