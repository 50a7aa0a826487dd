//! `lockctl`: the operator and workload CLI. One module per subcommand group, each with its
//! arguments and its work: `remote` (acquire, release, inspect, validate) and `run` talk to
//! the service through Envoy (`conn`); `store` (epoch, roles, restore), `shards`,
//! `registry`, `grants`, `register`, `audit` and `force` are for operators.
//!
//! Exit codes: 0 success; 1 refused by the service (the reason is printed), or for
//! `registry diff` changes found; 2 usage or local input error (bad registry, bad token);
//! 3 cannot reach the service or etcd.

mod audit;
mod conn;
mod defrag;
mod elect;
mod epoch;
mod force;
mod grants;
mod keys;
mod refusal;
mod register;
mod registry;
mod remote;
mod run;
mod shards;
mod store;
mod top;

use clap::{Parser, Subcommand};
pub use conn::Conn;
use std::process::ExitCode;

#[derive(Parser)]
#[command(about = "fenced lock service: take and release locks, manage epoch and registry")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Take a lock: opens a session for the key's class and acquires. Prints the token.
    /// Several keys are taken as one set (AcquireAll: all or none, one token for every
    /// key; release it with `release --token TOKEN KEY...`). --shared takes a reader hold of
    /// a `shared: true` class's key; --permit one permit of a semaphore's key (a `permits: N`
    /// class), printed as `permit=`. The hold lasts until released or until the session's
    /// TTL lapses (lockctl renews the session while it waits, not after it exits).
    Acquire {
        /// The key, or 2..=16 keys to take together as one set.
        #[arg(required = true, value_name = "KEY")]
        keys: Vec<String>,
        /// How long to wait in the key's queue (e.g. 30s, 500ms); 0s refuses at once if
        /// it is held. The service ends a wait at 300 s; a longer one is asked again.
        #[arg(long, default_value = "0s", value_parser = run::parse_duration)]
        wait: std::time::Duration,
        /// A shared (reader) hold of one key of a `shared: true` class: many at once, none
        /// while an exclusive hold has it. Release it with `release --shared`.
        #[arg(long, conflicts_with = "permit")]
        shared: bool,
        /// One permit of a semaphore's key (a `permits: N` class): up to N holders at once,
        /// each on its own permit. Release it with `release --permit`.
        #[arg(long)]
        permit: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// Run COMMAND while holding KEY (like flock): the token is in $LOCK_TOKEN, the key in
    /// $LOCK_KEY; several keys are held as one set (AcquireAll), their names in $LOCK_KEYS
    /// (sorted, space-separated); --shared holds one key as a reader; --permit holds one
    /// permit of a semaphore's key, its number in $LOCK_PERMIT. COMMAND runs in its
    /// own process group, which is stopped (SIGTERM, then SIGKILL after --grace) if the
    /// hold is fenced, gets SIGTERM/SIGINT/SIGHUP forwarded, and gets SIGKILL if lockctl
    /// dies. Every way out releases the lock and closes the session. Exit: the command's
    /// status; 1 refused; 2 bad input or COMMAND cannot start; 3 the service or etcd unreachable (NO_QUORUM); 4 fenced;
    /// 128+N after signal N.
    Run {
        /// The key, or 2..=16 keys to hold together as one set.
        #[arg(required = true, value_name = "KEY")]
        keys: Vec<String>,
        /// How long to wait for the lock (e.g. 10s, 500ms).
        #[arg(long, default_value = "0s", value_parser = run::parse_duration)]
        wait: std::time::Duration,
        /// Between SIGTERM and SIGKILL when the hold is fenced.
        #[arg(long, default_value = "5s", value_parser = run::parse_duration)]
        grace: std::time::Duration,
        /// Hold the key shared (a reader hold of a `shared: true` class's key).
        #[arg(long, conflicts_with = "permit")]
        shared: bool,
        /// Hold one permit of a semaphore's key (a `permits: N` class).
        #[arg(long)]
        permit: bool,
        #[command(flatten)]
        conn: Conn,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Run COMMAND while this process leads KEY (leader election: leadership is the hold).
    /// Campaigns, waiting in KEY's queue as long as it takes; then runs COMMAND as `run`
    /// does, the term in $LOCK_TOKEN. With --again, campaigns again when COMMAND exits
    /// non-zero, the leadership is lost (4) or the service is out of reach (3); a signal or
    /// an exit 0 ends it.
    Elect {
        key: String,
        /// Campaign again after a failed or lost term.
        #[arg(long)]
        again: bool,
        /// Between SIGTERM and SIGKILL when the leadership is lost.
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
    /// Who holds KEY now, then every change of it, one line each (never a token), until
    /// interrupted or COUNT changes. A hint: what it shows may be over already.
    Observe {
        key: String,
        /// Exit after this many changes (the first is the current holder).
        #[arg(long)]
        count: Option<u64>,
        /// Resume after REVISION@STORE_EPOCH (a line's `revision=` and `store_epoch=`)
        /// instead of starting from now.
        #[arg(long, value_parser = remote::parse_resume)]
        after: Option<(i64, u32)>,
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
    /// Release a lock with the token `acquire` printed: `release KEY TOKEN`, `release
    /// --shared KEY TOKEN` for a shared hold, `release --permit KEY TOKEN` for a permit, or
    /// `release --token TOKEN KEY...` for a set (ReleaseAll: every key of it in one
    /// transaction).
    Release {
        /// KEY TOKEN; with --token, the key or the keys of the set.
        #[arg(required = true, value_name = "KEY [TOKEN]")]
        args: Vec<String>,
        /// The token, before the keys: required for a set.
        #[arg(long)]
        token: Option<u64>,
        /// The hold is shared (`acquire --shared`).
        #[arg(long, conflicts_with = "permit")]
        shared: bool,
        /// The hold is a permit (`acquire --permit`).
        #[arg(long)]
        permit: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// Epoch record administration (ADR-03).
    Epoch {
        #[command(subcommand)]
        cmd: epoch::EpochCmd,
    },
    /// A key's history from the audit store (ADR-21): grants, handoffs, releases,
    /// expiries, forced releases, oldest first.
    Audit(audit::AuditArgs),
    /// Tiers and entity shards (ADR-07, 09): the shard map on the coord cluster (`--etcd`),
    /// moves by adding a shard, pinning a namespace or draining a shard, and the simulation.
    Shards {
        #[command(subcommand)]
        cmd: shards::ShardsCmd,
    },
    /// Two-person force release of a leaked lock (ADR-20), through the admin API
    /// (`lock-admin`): one operator files, a different one approves; both sign in at the
    /// IdP (an ID token from --id-token-file or $LOCK_ID_TOKEN, or --device-login).
    ForceRelease {
        #[command(subcommand)]
        cmd: force::ForceCmd,
    },
    /// etcd maintenance: defragmentation one member at a time, the leader last (ADR-05/10;
    /// root's certificate).
    Etcd {
        #[command(subcommand)]
        cmd: defrag::EtcdCmd,
    },
    /// etcd users and roles: arbiter reads /sys/ and writes /l/ /s/ /q/ /x/ /r/ /d/ /p/;
    /// operator reads /sys/ /l/ /s/ /q/ /x/ /r/ /d/ /p/ and writes /sys/shard (moves); auditor
    /// reads / and writes /audit/; force (lock-admin) writes /l/ /s/ /q/ /x/ /r/ /p/
    /// /sys/force/ /sys/force-request/ /sys/epoch /sys/advance-request/ and reads /sys/shard
    /// (run with the root user's client certificate).
    Roles {
        #[command(subcommand)]
        cmd: store::RolesCmd,
    },
    /// What is held now, from the store as the operator: the namespaces holding keys, or a
    /// page of one namespace's held keys with their holders, sessions, waiters and flags
    /// (held long, expiring, session gone, waiver expired). Never a token.
    Top(top::TopArgs),
    /// Registry documents (ADR-24).
    Registry {
        #[command(subcommand)]
        cmd: registry::RegistryCmd,
    },
    /// The standing risk register (ADR-01): every advisory correctness class with its risk
    /// owner and waiver expiry (expired ones flagged) and, given etcd, its current holds.
    Register(register::RegisterArgs),
    /// Restore an etcd member from a snapshot with `etcdutl snapshot restore`, always with a
    /// fresh --initial-cluster-token so the restored cluster gets a new cluster ID and the
    /// arbiters seal until an epoch advance (`lockctl epoch advance request`). A restore
    /// with the original flags would keep the old ID.
    Restore(store::RestoreArgs),
    /// The edge filter's configuration compiled from a registry.
    Grants {
        #[command(subcommand)]
        cmd: grants::GrantsCmd,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let done = |()| ExitCode::SUCCESS;
    let result = match Cli::parse().cmd {
        Cmd::Run {
            keys: k,
            wait,
            grace,
            shared,
            permit,
            conn,
            command,
        } => match keys::Take::of(k, keys::Mode::of(shared, permit)) {
            Ok(take) => run::run(&conn, &take, wait, grace, &command).await,
            Err(e) => Err(Failure::input(e)),
        },
        Cmd::Elect {
            key,
            again,
            grace,
            conn,
            command,
        } => elect::elect(&conn, &key, again, grace, &command).await,
        Cmd::GroupGuard { pgid, parent } => Ok(run::group_guard(pgid, parent).await),
        Cmd::Acquire {
            keys: k,
            wait,
            shared,
            permit,
            conn,
        } => match keys::Take::of(k, keys::Mode::of(shared, permit)) {
            Ok(take) => remote::acquire(&conn, &take, wait).await.map(done),
            Err(e) => Err(Failure::input(e)),
        },
        Cmd::Release {
            args,
            token,
            shared,
            permit,
            conn,
        } => match keys::Release::of(args, token, keys::Mode::of(shared, permit)) {
            Ok(what) => remote::release(&conn, &what).await.map(done),
            Err(e) => Err(Failure::input(e)),
        },
        Cmd::Inspect { key, conn } => remote::inspect(&conn, &key).await.map(done),
        Cmd::Observe {
            key,
            count,
            after,
            conn,
        } => remote::observe(&conn, &key, count, after).await.map(done),
        Cmd::Validate { key, token, conn } => remote::validate(&conn, &key, token).await.map(done),
        Cmd::Epoch { cmd } => epoch::run(cmd).await.map(done),
        Cmd::Roles { cmd } => store::roles(cmd).await.map(done),
        Cmd::Etcd { cmd } => defrag::run(cmd).await.map(done),
        Cmd::Restore(args) => store::restore(&args).map(done),
        Cmd::Audit(args) => audit::audit(args).await.map(done),
        Cmd::Register(args) => register::register(args).await.map(done),
        Cmd::Top(args) => top::top(args).await.map(done),
        Cmd::ForceRelease { cmd } => force::run(cmd).await.map(done),
        Cmd::Shards { cmd } => shards::run(cmd).await.map(done),
        Cmd::Registry { cmd } => registry::registry(cmd).await,
        Cmd::Grants { cmd } => grants::grants(cmd).map(done),
    };
    match result {
        Ok(code) => code,
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
    /// The exit code of [`Failure::unreachable`].
    pub const UNREACHABLE: u8 = 3;

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
            exit: Self::UNREACHABLE,
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

    /// `lockctl roles`'s help names every role and every prefix it grants, as
    /// etcd_roles.rs grants them (a prefix added there and not here fails).
    #[test]
    fn the_roles_help_names_every_grant() {
        use clap::CommandFactory as _;
        let mut cli = super::Cli::command();
        let help = cli
            .find_subcommand_mut("roles")
            .unwrap()
            .render_long_help()
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        for role in lock_store::etcd_roles::ROLES {
            let at = help
                .find(&format!("{} ", role.name))
                .unwrap_or_else(|| panic!("role {} missing: {help}", role.name));
            let rest = &help[at..];
            let end = lock_store::etcd_roles::ROLES
                .iter()
                .filter_map(|r| rest[1..].find(&format!("; {} ", r.name)))
                .min()
                .unwrap_or(rest.len() - 1);
            let said = &rest[..=end];
            for (prefix, _) in role.grants {
                assert!(
                    said.split([' ', ';', ',', '(', ')']).any(|w| w == *prefix),
                    "role {}: {prefix} missing from its part of the help: {said}",
                    role.name
                );
            }
        }
    }
}
