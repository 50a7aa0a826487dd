//! The audit tailer (ADR-21): one active per cluster (an etcd election, held on the coord
//! cluster when there is one, as the record says, else on the audited cluster), it watches the
//! lock key space from its checkpoint with previous values, classifies each revision
//! (`classify.rs`), inserts the rows (idempotent) and checkpoints every few seconds. Rows
//! are stored before the checkpoint moves past them, so a tailer killed anywhere replays
//! from its checkpoint and nothing is lost or doubled.
//!
//! A compaction past the checkpoint (etcd cancels the watch with its compact revision) is
//! an explicit gap row and an alarm (metric + log); the lag is watched so it alarms at half
//! the compaction window, before that happens.

use crate::classify::{Change, FORCE_PREFIX, Kind, Row, classify, gap};
use crate::metrics::METRICS;
use crate::store::AuditStore;
use etcd_client::{Client, EventType, WatchOptions, WatchResponse};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// Everything the watch covers: the lock key space (`/l/`, `/s/`, `/sys/`, and `/q/`, `/x/`, which
/// `classify` skips) — every key of the service starts with `/`.
pub const WATCHED_PREFIX: &str = "/";
/// The elections among tailers, one per audited cluster: `/audit/election/<cluster id>`,
/// so the tailers of every cluster can campaign on one coord cluster.
pub const ELECTION: &str = "/audit/election";

/// The election of the tailers of cluster `cluster_id`.
pub fn election_name(cluster_id: &str) -> String {
    format!("{ELECTION}/{cluster_id}")
}

#[derive(Debug, Clone)]
pub struct TailerOptions {
    /// This tailer's name (shown as the election's leader value).
    pub id: String,
    /// How often the checkpoint is saved.
    pub checkpoint_every: Duration,
    /// etcd's compaction window in revisions (`--auto-compaction-retention` with mode
    /// `revision`); the tailer alarms when its lag passes half of it. None: no lag alarm.
    pub compaction_window: Option<i64>,
    /// The election lease's TTL: how soon a standby takes over from a dead leader.
    pub lease_ttl: i64,
    /// How often the leader scans the holds for the longest per class (None: never).
    pub hold_scan_every: Option<Duration>,
}

impl Default for TailerOptions {
    fn default() -> Self {
        Self {
            id: "lock-audit".into(),
            checkpoint_every: Duration::from_secs(2),
            compaction_window: None,
            lease_ttl: 5,
            hold_scan_every: Some(Duration::from_secs(30)),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TailError {
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("lost the election lease")]
    Deposed,
    #[error("the watch ended")]
    WatchEnded,
}

/// The changes of one watch response, grouped by revision, in order.
pub fn by_revision(resp: &WatchResponse) -> Vec<(i64, Vec<Change>)> {
    let mut out: Vec<(i64, Vec<Change>)> = Vec::new();
    for e in resp.events() {
        let Some(kv) = e.kv() else { continue };
        let key = String::from_utf8_lossy(kv.key()).into_owned();
        let prev = e.prev_kv().map(|p| p.value());
        let change = match e.event_type() {
            EventType::Put => Change::put(&key, kv.value(), prev),
            EventType::Delete => Change::delete(&key, prev),
        };
        let revision = kv.mod_revision();
        match out.last_mut() {
            Some((r, changes)) if *r == revision => changes.push(change),
            _ => out.push((revision, vec![change])),
        }
    }
    out
}

/// What the lag says (pure): alarm when the tailer is behind by more than half the
/// compaction window, so an operator acts before revisions are lost.
pub fn lag_alarm(head: i64, checkpoint: i64, window: Option<i64>) -> bool {
    window.is_some_and(|w| head.saturating_sub(checkpoint) > w / 2)
}

/// The cluster ID (hex, as etcdctl prints it), from any response header.
pub async fn cluster_id(client: &mut Client) -> Result<String, TailError> {
    let resp = client.get("/sys/epoch", None).await?;
    Ok(format!("{:x}", resp.header().map_or(0, |h| h.cluster_id())))
}

/// Runs until `stop` turns true: campaign on `election` (the coord cluster, or the audited
/// one), then tail `client`'s cluster while leader; on any failure, wait a moment and
/// campaign again (the checkpoint makes the restart exact).
pub async fn run<S: AuditStore + Sync>(
    client: Client,
    election: Client,
    store: &S,
    opts: &TailerOptions,
    mut stop: watch::Receiver<bool>,
) -> Result<(), TailError> {
    loop {
        if *stop.borrow() {
            return Ok(());
        }
        let round = lead_and_tail(client.clone(), election.clone(), store, opts, stop.clone());
        tokio::select! {
            r = round => {
                METRICS.leader.set(0);
                // A standby reports no holds: only the leader's scan is current.
                METRICS.longest_hold.clear();
                match r {
                    Ok(()) => return Ok(()),
                    Err(e) => tracing::warn!(error = %e, "audit tailer round ended; campaigning again"),
                }
            }
            _ = stop.wait_for(|s| *s) => return Ok(()),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn lead_and_tail<S: AuditStore + Sync>(
    mut client: Client,
    mut election: Client,
    store: &S,
    opts: &TailerOptions,
    stop: watch::Receiver<bool>,
) -> Result<(), TailError> {
    let name = election_name(&cluster_id(&mut client).await?);
    let lease = election.lease_grant(opts.lease_ttl, None).await?.id();
    let (mut keeper, mut acks) = election.lease_keep_alive(lease).await?;
    // Keep the lease while campaigning and tailing; losing it ends the round.
    let renew_every = Duration::from_secs(u64::try_from(opts.lease_ttl.max(3) / 3).unwrap_or(1));
    let keep = async {
        loop {
            keeper.keep_alive().await?;
            match acks.message().await? {
                Some(a) if a.ttl() > 0 => {}
                _ => return Err::<(), TailError>(TailError::Deposed),
            }
            tokio::time::sleep(renew_every).await;
        }
    };
    let work = async {
        election
            .campaign(name.as_str(), opts.id.as_str(), lease)
            .await?;
        METRICS.leader.set(1);
        tracing::info!(id = %opts.id, "audit tailer elected");
        let scan = async {
            match opts.hold_scan_every {
                Some(every) => Err(TailError::Etcd(
                    crate::longest::run(client.clone(), every).await,
                )),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = tail(client.clone(), store, opts, stop) => r,
            r = scan => r,
        }
    };
    let result = tokio::select! {
        r = keep => r,
        r = work => r,
    };
    let _ = election.lease_revoke(lease).await;
    result
}

/// Tails from the checkpoint until `stop`.
async fn tail<S: AuditStore + Sync>(
    mut client: Client,
    store: &S,
    opts: &TailerOptions,
    mut stop: watch::Receiver<bool>,
) -> Result<(), TailError> {
    let cluster = cluster_id(&mut client).await?;
    let mut checkpoint = store.checkpoint(&cluster).await?.unwrap_or(0);
    let mut saved = checkpoint;
    let mut last_save = Instant::now();
    'watch: loop {
        let options = WatchOptions::new()
            .with_prefix()
            .with_prev_key()
            .with_progress_notify()
            .with_start_revision(checkpoint + 1);
        let mut stream = client.watch(WATCHED_PREFIX, Some(options)).await?;
        loop {
            let next = tokio::select! {
                m = stream.message() => m?,
                _ = stop.wait_for(|s| *s) => {
                    store.save_checkpoint(&cluster, checkpoint).await?;
                    return Ok(());
                }
                () = tokio::time::sleep(opts.checkpoint_every) => {
                    if checkpoint > saved {
                        store.save_checkpoint(&cluster, checkpoint).await?;
                        saved = checkpoint;
                        last_save = Instant::now();
                    }
                    continue;
                }
            };
            let Some(resp) = next else {
                return Err(TailError::WatchEnded);
            };
            if resp.canceled() {
                let compacted = resp.compact_revision();
                if compacted > checkpoint + 1 {
                    // The revisions between the checkpoint and the compaction are gone.
                    let hole = gap(checkpoint + 1, compacted - 1);
                    store.insert(&cluster, std::slice::from_ref(&hole)).await?;
                    METRICS.gaps.inc();
                    tracing::error!(
                        from = checkpoint + 1,
                        to = compacted - 1,
                        "audit gap: etcd compacted revisions the tailer had not read"
                    );
                    checkpoint = compacted - 1;
                    store.save_checkpoint(&cluster, checkpoint).await?;
                    saved = checkpoint;
                    continue 'watch;
                }
                tracing::warn!(
                    reason = resp.cancel_reason(),
                    compacted,
                    checkpoint,
                    "etcd cancelled the watch"
                );
                return Err(TailError::WatchEnded);
            }
            let mut rows: Vec<Row> = Vec::new();
            let mut last = checkpoint;
            for (revision, changes) in by_revision(&resp) {
                rows.extend(classify(revision, &changes));
                last = last.max(revision);
            }
            let inserted = store.insert(&cluster, &rows).await?;
            METRICS.rows.inc_by(inserted);
            let forced = rows
                .iter()
                .filter(|r| r.kind == Kind::ForceRelease && r.key.starts_with(FORCE_PREFIX))
                .count();
            METRICS.force_releases.inc_by(forced as u64);
            for r in &rows {
                if let Some(kind) = hold_end(r) {
                    METRICS
                        .hold_ends
                        .get_or_create(&crate::metrics::HoldEndLabel {
                            class: r.class.clone(),
                            kind,
                        })
                        .inc();
                }
            }
            // A progress notification (no events, not the creation answer) says every event
            // up to its header's revision has been delivered; any other answer vouches only
            // for the events it carries. (The creation answer's header is etcd's head, not
            // how far this watch has read: trusting it skipped a compacted range unseen.)
            let head = resp.header().map_or(last, |h| h.revision());
            let progress = resp.events().is_empty() && !resp.created();
            checkpoint = checkpoint.max(last).max(if progress { head } else { last });
            METRICS.checkpoint.set(checkpoint);
            METRICS.lag.set(head.saturating_sub(checkpoint));
            let alarm = lag_alarm(head, saved, opts.compaction_window);
            METRICS.compaction_risk.set(i64::from(alarm));
            if alarm {
                tracing::warn!(
                    head,
                    checkpoint = saved,
                    "audit tailer behind by more than half the compaction window"
                );
            }
            if last_save.elapsed() >= opts.checkpoint_every && checkpoint > saved {
                store.save_checkpoint(&cluster, checkpoint).await?;
                saved = checkpoint;
                last_save = Instant::now();
            }
        }
    }
}

/// Every row of etcd's history from `from` to now, read by one watch from `from` with
/// previous values (the tests' independent account of what the table must hold).
pub async fn replay(client: &mut Client, from: i64) -> Result<Vec<Row>, TailError> {
    let head = client
        .get("/sys/epoch", None)
        .await?
        .header()
        .map_or(0, |h| h.revision());
    let options = WatchOptions::new()
        .with_prefix()
        .with_prev_key()
        .with_start_revision(from);
    let mut stream = client.watch(WATCHED_PREFIX, Some(options)).await?;
    let mut rows = Vec::new();
    let mut seen = from - 1;
    while seen < head {
        // The last revisions may be of keys outside the prefix: a quiet second means the
        // watch has delivered everything up to the head.
        let Ok(next) = tokio::time::timeout(Duration::from_secs(1), stream.message()).await else {
            return Ok(rows);
        };
        let Some(resp) = next? else {
            return Err(TailError::WatchEnded);
        };
        if resp.canceled() {
            return Err(TailError::WatchEnded);
        }
        for (revision, changes) in by_revision(&resp) {
            if revision > head {
                return Ok(rows);
            }
            rows.extend(classify(revision, &changes));
            seen = revision;
        }
    }
    Ok(rows)
}

/// The way a hold ended, if `row` is a hold's end (the force-release record under
/// `/sys/force/` is not a hold: its hold's own row is).
fn hold_end(row: &Row) -> Option<&'static str> {
    match row.kind {
        Kind::Release
        | Kind::Handoff
        | Kind::Expiry
        | Kind::ClosedWithSession
        | Kind::RevokedByAdvance => Some(row.kind.as_str()),
        Kind::ForceRelease if !row.key.starts_with(FORCE_PREFIX) => Some(row.kind.as_str()),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
