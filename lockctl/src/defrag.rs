//! `lockctl etcd defrag`: gives a compacted etcd's free pages back to the file system, one
//! member at a time (ADR-05/10).
//!
//! Compaction frees revisions inside etcd's database file; only a defragmentation shrinks
//! the file, and while it runs its member serves no reads or writes. So: every member must
//! be healthy (reachable, no errors, one agreed leader, no CORRUPT alarm) before each step;
//! followers go first and the leader last, so a leader change, if one happens, happens once
//! and at the end; and each member must be serving again and caught up with the leader
//! before the next one starts. With auth on, Maintenance.Defragment is for etcd's root
//! user only. The order and the refusals are [`plan`], a pure function; the rest is I/O.

use crate::Failure;
use crate::store::EtcdArgs;
use clap::Subcommand;
use etcd_client::{AlarmAction, AlarmType, Client, ConnectOptions};
use lock_store::etcd_tls::EtcdTls;
use std::time::{Duration, Instant};

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

/// A member as one survey saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub id: u64,
    pub name: String,
    pub url: String,
    /// Its Status answer, or why there was none.
    pub state: Result<State, String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    /// The leader this member follows (0: none).
    pub leader: u64,
    pub db_size: i64,
    pub db_in_use: i64,
    pub raft_index: u64,
    /// etcd's own error strings (e.g. a NOSPACE alarm's).
    pub errors: Vec<String>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refusal {
    #[error("no members answered the member list")]
    NoMembers,
    #[error("member {name} is not healthy: {why}")]
    Unhealthy { name: String, why: String },
    #[error("the members do not agree on one leader (an election is under way?)")]
    NoLeader,
    #[error(
        "member {name} has a CORRUPT alarm: do not defragment it; replace or restore it (docs: Operating, Restoring etcd safely)"
    )]
    Corrupt { name: String },
}

/// The order to defragment `seen` in (indexes into it): followers by name, the leader
/// last; or why not now. `corrupt`: member ids with a CORRUPT alarm. A NOSPACE alarm does
/// not refuse: defragmentation is its remedy (its error string is expected then).
pub fn plan(seen: &[Seen], corrupt: &[u64]) -> Result<Vec<usize>, Refusal> {
    if seen.is_empty() {
        return Err(Refusal::NoMembers);
    }
    let mut leaders = Vec::new();
    for m in seen {
        if corrupt.contains(&m.id) {
            return Err(Refusal::Corrupt {
                name: m.name.clone(),
            });
        }
        let state = m.state.as_ref().map_err(|why| Refusal::Unhealthy {
            name: m.name.clone(),
            why: why.clone(),
        })?;
        if let Some(e) = state.errors.iter().find(|e| !e.contains("NOSPACE")) {
            return Err(Refusal::Unhealthy {
                name: m.name.clone(),
                why: e.clone(),
            });
        }
        leaders.push(state.leader);
    }
    let leader = leaders[0];
    if leader == 0 || leaders.iter().any(|l| *l != leader) || !seen.iter().any(|m| m.id == leader) {
        return Err(Refusal::NoLeader);
    }
    let mut order: Vec<usize> = (0..seen.len()).collect();
    order.sort_by_key(|&i| (seen[i].id == leader, seen[i].name.clone()));
    Ok(order)
}

/// How long one member's defragmentation may take (it blocks that member meanwhile).
const DEFRAG_TIMEOUT: Duration = Duration::from_secs(600);
/// How long a defragmented member has to serve again and catch up with the leader.
const CATCH_UP: Duration = Duration::from_secs(60);
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

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

/// The members, each asked for its Status on its own URL, and the ids with a CORRUPT and
/// with a NOSPACE alarm. The member list and the alarms come from the first of `urls`
/// that answers (a client balancing over all of them may pick a member that is down).
async fn survey(
    urls: &[String],
    tls: Option<&EtcdTls>,
) -> Result<(Vec<Seen>, Vec<u64>, Vec<u64>), Failure> {
    let mut last = String::from("no --etcd URL");
    let mut answered = None;
    for url in urls {
        let listed = match open(std::slice::from_ref(url), tls, CALL_TIMEOUT).await {
            Ok(mut c) => c.member_list().await.map(|l| (c, l)),
            Err(e) => Err(e),
        };
        match listed {
            Ok(found) => {
                answered = Some(found);
                break;
            }
            Err(e) => last = format!("{url}: {e}"),
        }
    }
    let Some((mut cluster, members)) = answered else {
        return Err(Failure::unreachable(format!("etcd member list: {last}")));
    };
    let mut seen = Vec::new();
    for m in members.members() {
        let url = m.client_urls().first().cloned().unwrap_or_default();
        let state = match url.is_empty() {
            true => Err("no client URL (not started?)".to_owned()),
            false => status(&url, tls).await,
        };
        seen.push(Seen {
            id: m.id(),
            name: m.name().to_owned(),
            url,
            state,
        });
    }
    // Alarms are read through Raft: with a member down or no agreed leader the call can
    // only time out. The caller's plan refuses on the members' health first.
    if plan(&seen, &[]).is_err() {
        return Ok((seen, Vec::new(), Vec::new()));
    }
    let alarms = cluster
        .alarm(AlarmAction::Get, AlarmType::None, None)
        .await
        .map_err(|e| Failure::unreachable(format!("etcd alarm list: {e}")))?;
    let of = |kind: AlarmType| {
        alarms
            .alarms()
            .iter()
            .filter(|a| a.alarm() == kind)
            .map(|a| a.member_id())
            .collect::<Vec<u64>>()
    };
    Ok((seen, of(AlarmType::Corrupt), of(AlarmType::Nospace)))
}

async fn status(url: &str, tls: Option<&EtcdTls>) -> Result<State, String> {
    let mut c = open(&[url.to_owned()], tls, CALL_TIMEOUT)
        .await
        .map_err(|e| e.to_string())?;
    let s = c.status().await.map_err(|e| e.to_string())?;
    Ok(State {
        leader: s.leader(),
        db_size: s.db_size(),
        db_in_use: s.raft_used_db_size(),
        raft_index: s.raft_index(),
        errors: s.errors().to_vec(),
    })
}

/// Waits (bounded) until the member at `url` answers Status again with raft index
/// `target` reached; returns that answer.
async fn caught_up(url: &str, target: u64, tls: Option<&EtcdTls>) -> Result<State, String> {
    let until = Instant::now() + CATCH_UP;
    loop {
        let last = match status(url, tls).await {
            Ok(s) if s.raft_index >= target => return Ok(s),
            Ok(s) => format!("raft index {} of {target}", s.raft_index),
            Err(e) => e,
        };
        if Instant::now() >= until {
            return Err(format!("not caught up within {CATCH_UP:?}: {last}"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn open(
    urls: &[String],
    tls: Option<&EtcdTls>,
    timeout: Duration,
) -> Result<Client, etcd_client::Error> {
    let mut opts = ConnectOptions::new()
        .with_connect_timeout(CALL_TIMEOUT)
        .with_timeout(timeout);
    if let Some(tls) = tls {
        opts = opts.with_tls(tls.options());
    }
    Client::connect(urls, Some(opts)).await
}

async fn connect(
    urls: &[String],
    tls: Option<&EtcdTls>,
    timeout: Duration,
) -> Result<Client, Failure> {
    open(urls, tls, timeout)
        .await
        .map_err(|e| Failure::unreachable(format!("etcd {}: {e}", urls.join(","))))
}

fn mib(bytes: i64) -> String {
    match bytes < 1 << 20 {
        true => format!("{:.0} KiB", bytes as f64 / 1024.0),
        false => format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(id: u64, name: &str, leader: u64) -> Seen {
        Seen {
            id,
            name: name.into(),
            url: format!("https://{name}:2379"),
            state: Ok(State {
                leader,
                db_size: 100,
                db_in_use: 10,
                raft_index: 7,
                errors: vec![],
            }),
        }
    }

    #[test]
    fn the_plan_table() {
        let healthy = vec![m(1, "c", 2), m(2, "a", 2), m(3, "b", 2)];
        let mut down = healthy.clone();
        down[2].state = Err("connection refused".into());
        let mut erring = healthy.clone();
        erring[0].state.as_mut().unwrap().errors = vec!["raft: slow disk".into()];
        let mut nospace = healthy.clone();
        nospace[0].state.as_mut().unwrap().errors =
            vec!["etcdserver: mvcc: database space exceeded (NOSPACE)".into()];
        let mut split = healthy.clone();
        split[1].state.as_mut().unwrap().leader = 3;
        let leaderless: Vec<Seen> = healthy
            .iter()
            .map(|s| {
                let mut s = s.clone();
                s.state.as_mut().unwrap().leader = 0;
                s
            })
            .collect();
        let gone_leader: Vec<Seen> = healthy
            .iter()
            .map(|s| {
                let mut s = s.clone();
                s.state.as_mut().unwrap().leader = 9;
                s
            })
            .collect();
        type Case = (
            &'static str,
            Vec<Seen>,
            Vec<u64>,
            Result<Vec<usize>, Refusal>,
        );
        let cases: Vec<Case> = vec![
            (
                "followers by name, then the leader",
                healthy.clone(),
                vec![],
                Ok(vec![2, 0, 1]),
            ),
            (
                "a member down refuses",
                down,
                vec![],
                Err(Refusal::Unhealthy {
                    name: "b".into(),
                    why: "connection refused".into(),
                }),
            ),
            (
                "a member reporting an error refuses",
                erring,
                vec![],
                Err(Refusal::Unhealthy {
                    name: "c".into(),
                    why: "raft: slow disk".into(),
                }),
            ),
            (
                "NOSPACE is what defragmentation is for",
                nospace,
                vec![],
                Ok(vec![2, 0, 1]),
            ),
            (
                "members disagreeing on the leader",
                split,
                vec![],
                Err(Refusal::NoLeader),
            ),
            ("no leader", leaderless, vec![], Err(Refusal::NoLeader)),
            (
                "a leader that is not a member",
                gone_leader,
                vec![],
                Err(Refusal::NoLeader),
            ),
            (
                "a CORRUPT alarm refuses",
                healthy.clone(),
                vec![3],
                Err(Refusal::Corrupt { name: "b".into() }),
            ),
            ("no members", vec![], vec![], Err(Refusal::NoMembers)),
            (
                "one member is its own leader",
                vec![m(5, "solo", 5)],
                vec![],
                Ok(vec![0]),
            ),
        ];
        for (name, seen, corrupt, want) in cases {
            assert_eq!(plan(&seen, &corrupt), want, "{name}");
        }
    }
}
