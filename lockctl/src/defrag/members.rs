//! What the members say, each asked on its own URL: the survey (the member list, each
//! member's Status, the CORRUPT and NOSPACE alarms) and, after a member's
//! defragmentation, whether it serves again and has caught up with the leader.

use super::{EtcdTls, Seen, State, plan};
use crate::Failure;
use etcd_client::{AlarmAction, AlarmType, Client, ConnectOptions};
use std::time::{Duration, Instant};

/// How long a defragmented member has to serve again and catch up with the leader.
const CATCH_UP: Duration = Duration::from_secs(60);
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The members, each asked for its Status on its own URL, and the ids with a CORRUPT and
/// with a NOSPACE alarm. The member list and the alarms come from the first of `urls`
/// that answers (a client balancing over all of them may pick a member that is down).
pub(super) async fn survey(
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
pub(super) async fn caught_up(
    url: &str,
    target: u64,
    tls: Option<&EtcdTls>,
) -> Result<State, String> {
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

pub(super) async fn connect(
    urls: &[String],
    tls: Option<&EtcdTls>,
    timeout: Duration,
) -> Result<Client, Failure> {
    open(urls, tls, timeout)
        .await
        .map_err(|e| Failure::unreachable(format!("etcd {}: {e}", urls.join(","))))
}
