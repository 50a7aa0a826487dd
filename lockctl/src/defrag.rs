//! `lockctl etcd defrag`: gives a compacted etcd's free pages back to the file system, one
//! member at a time (ADR-05/10).
//!
//! Compaction frees revisions inside etcd's database file; only a defragmentation shrinks
//! the file, and while it runs its member serves no reads or writes. So: every member must
//! be healthy (reachable, no errors, one agreed leader, no CORRUPT alarm) before each step;
//! followers go first and the leader last, so a leader change, if one happens, happens once
//! and at the end; and each member must be serving again and caught up with the leader
//! before the next one starts. With auth on, Maintenance.Defragment is for etcd's root
//! user only. The order and the refusals are `plan`, a pure function; the rest is I/O.
//!
//! | module    | owns                                                                   |
//! |-----------|------------------------------------------------------------------------|
//! | `plan`    | the order and the refusals, from what a survey saw (pure)              |
//! | `members` | the survey (each member's Status, the alarms) and a member's catch-up  |
//!
//! This file walks the plan: a survey and its plan again before each member, then that
//! member's defragmentation and its catch-up.

use crate::Failure;
use crate::store::EtcdArgs;
use clap::Subcommand;
// `members` takes it from here: one place to change when it leaves lock-arbiter.
use lock_store::etcd_tls::EtcdTls;
use std::time::{Duration, Instant};

mod members;
mod plan;

use members::{caught_up, connect, survey};
use plan::{Seen, State, plan};

#[derive(Subcommand)]
pub enum EtcdCmd {
    /// Defragment every member, followers first and the leader last, each only while every
    /// member is healthy and once the one before is serving and caught up (root's
    /// certificate: Defragment is an admin call).
    Defrag {
        #[command(flatten)]
        store: EtcdArgs,
        /// Print the order and each member's database size without defragmenting.
        #[arg(long)]
        dry_run: bool,
    },
}

/// How long one member's defragmentation may take (it blocks that member meanwhile).
const DEFRAG_TIMEOUT: Duration = Duration::from_secs(600);

/// `lockctl etcd ...`.
pub async fn run(cmd: EtcdCmd) -> Result<(), Failure> {
    match cmd {
        EtcdCmd::Defrag { store, dry_run } => defrag(&store, dry_run).await,
    }
}

async fn defrag(store: &EtcdArgs, dry_run: bool) -> Result<(), Failure> {
    let tls = lock_store::etcd_tls::load(&store.etcd, &store.tls)
        .map_err(|e| Failure::input(e.to_string()))?;
    let tls = tls.as_ref();
    let (seen, corrupt, nospace) = survey(&store.etcd, tls).await?;
    let order = plan(&seen, &corrupt).map_err(|r| Failure::refused(r.to_string()))?;
    let leader = seen
        .iter()
        .find_map(|m| m.state.as_ref().ok().map(|s| s.leader));
    for (n, &i) in order.iter().enumerate() {
        let m = &seen[i];
        let role = if Some(m.id) == leader {
            "leader"
        } else {
            "follower"
        };
        let size = m
            .state
            .as_ref()
            .map(|s| (s.db_size, s.db_in_use))
            .unwrap_or((0, 0));
        println!(
            "{}. {} ({role}, {}): {} (in use {})",
            n + 1,
            m.name,
            m.url,
            mib(size.0),
            mib(size.1)
        );
    }
    if dry_run {
        return Ok(());
    }
    for (done, &i) in order.iter().enumerate() {
        let name = seen[i].name.clone();
        let url = seen[i].url.clone();
        // Every member healthy again before each step, not only before the first.
        let (now, corrupt, _) = survey(&store.etcd, tls).await?;
        let stopped = |why: String| {
            Failure::refused(format!(
                "stopped before {name} ({done} of {} defragmented): {why}",
                order.len()
            ))
        };
        plan(&now, &corrupt).map_err(|r| stopped(r.to_string()))?;
        let Some(before) = now
            .iter()
            .find(|m| m.url == url)
            .and_then(|m| m.state.clone().ok())
        else {
            return Err(stopped("it left the member list".into()));
        };
        let started = Instant::now();
        let mut member = connect(std::slice::from_ref(&url), tls, DEFRAG_TIMEOUT).await?;
        member
            .defragment()
            .await
            .map_err(|e| stopped(format!("defragment: {e}")))?;
        // The raft index the cluster had reached when this member stopped serving.
        let target = now
            .iter()
            .filter_map(|m| m.state.as_ref().ok().map(|s| s.raft_index))
            .max()
            .unwrap_or(0);
        let after = caught_up(&url, target, tls)
            .await
            .map_err(|why| stopped(format!("after its defragmentation: {why}")))?;
        println!(
            "defragmented {name} in {:.1} s: {} -> {} (in use {})",
            started.elapsed().as_secs_f64(),
            mib(before.db_size),
            mib(after.db_size),
            mib(after.db_in_use)
        );
    }
    if !nospace.is_empty() {
        println!(
            "a NOSPACE alarm is raised: once the space is back, disarm it (etcdctl alarm disarm)"
        );
    }
    Ok(())
}

fn mib(bytes: i64) -> String {
    match bytes < 1 << 20 {
        true => format!("{:.0} KiB", bytes as f64 / 1024.0),
        false => format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0)),
    }
}
