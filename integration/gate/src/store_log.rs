//! What etcd itself says happened: a watch over the whole keyspace from the first revision,
//! resumed after every break from the next revision, with the previous value of each
//! deleted key. The checker uses it for the truth the clients cannot see: whether a token's
//! revision created a holder key, and whether a hold ended by session expiry or an epoch
//! advance (which may legitimately leave a paused holder believing it still holds).

use super::history::mono_ns;
use etcd_client::{EventType, WatchOptions};
use lock_store::layout::{
    EPOCH_KEY, EpochRecord, FORCE_PREFIX, HOLDER_PREFIX, Holder, PERMIT_PREFIX, SESSION_PREFIX,
    SHARED_PREFIX, decode, lease_hex,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoreEvent {
    pub revision: i64,
    /// When the watcher saw it (CLOCK_MONOTONIC ns): an upper bound on when it happened.
    pub seen: u64,
    pub key: String,
    pub delete: bool,
    /// The key's create revision (of the deleted value, for deletes).
    pub create_revision: i64,
    pub lease: i64,
    /// For a holder record's put: the identity the record names (from its value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// The hold this event is about: the mod revision of the record put (a put's own
    /// revision) or deleted (its previous value's). A release may hand a key on by
    /// overwriting the record, which keeps its create revision, so holds are told apart by
    /// mod revision. Absent in logs from before handoffs: the create revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<i64>,
    /// For a put of the epoch record: the epoch it names. Epochs from the coord cluster's
    /// allocator skip numbers, so the epoch at a revision is read from here, not counted
    /// (absent in logs from before: counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u16>,
}

impl StoreEvent {
    /// See [`StoreEvent::hold`].
    pub fn hold_id(&self) -> i64 {
        self.hold.unwrap_or(self.create_revision)
    }
}

/// Where a log that does not start at the store's beginning starts (`store-start.json`
/// beside `store.jsonl`): its first revision and the epoch the store was in just before.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct StoreStart {
    pub from_revision: i64,
    pub epoch: u32,
}

/// Writes a store log as JSON lines (`store.jsonl`, a shard gate's `store-<cluster>.jsonl`).
pub fn write_jsonl(path: &std::path::Path, events: &[StoreEvent]) -> std::io::Result<()> {
    let lines: Vec<String> = events
        .iter()
        .filter_map(|e| serde_json::to_string(e).ok())
        .collect();
    std::fs::write(path, lines.join("\n"))
}

/// Records every event until stopped, then until it has caught up with the store.
pub struct StoreWatcher {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<StoreEvent>>,
}

impl StoreWatcher {
    /// Watches the whole key space as etcd's root user (`tls`: root's credential).
    pub fn start(urls: Vec<String>, tls: etcd_client::TlsOptions) -> Self {
        Self::start_at(urls, tls, 1)
    }

    /// As [`StoreWatcher::start`], from revision `from` (a soak round: earlier revisions
    /// may be compacted away).
    pub fn start_at(urls: Vec<String>, tls: etcd_client::TlsOptions, from: i64) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(watch_all(urls, tls, stop.clone(), from.max(1)));
        Self { stop, task }
    }

    /// Stops after catching up with the store's current revision (bounded: 60 s).
    pub async fn finish(self) -> anyhow::Result<Vec<StoreEvent>> {
        self.stop.store(true, Ordering::SeqCst);
        Ok(tokio::time::timeout(Duration::from_secs(60), self.task).await??)
    }
}

async fn watch_all(
    urls: Vec<String>,
    tls: etcd_client::TlsOptions,
    stop: Arc<AtomicBool>,
    from: i64,
) -> Vec<StoreEvent> {
    let mut events = Vec::new();
    let mut next = from;
    // The revision to reach once stopped (read when the stop is first seen).
    let mut target: Option<i64> = None;
    loop {
        if let Some(t) = target
            && next > t
        {
            return events;
        }
        let opts = etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(1))
            .with_timeout(Duration::from_secs(3))
            .with_tls(tls.clone());
        let mut client = match etcd_client::Client::connect(urls.clone(), Some(opts)).await {
            Ok(c) => c,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        if stop.load(Ordering::SeqCst) && target.is_none() {
            match client.get("/", None).await {
                Ok(r) => target = r.header().map(|h| h.revision()),
                Err(_) => continue,
            }
            continue;
        }
        let wopts = WatchOptions::new()
            .with_prefix()
            .with_prev_key()
            .with_start_revision(next)
            .with_progress_notify();
        let mut stream = match client.watch("/", Some(wopts)).await {
            Ok(s) => s,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        loop {
            // Wake at least every 500 ms to notice the stop.
            let msg = tokio::time::timeout(Duration::from_millis(500), stream.message()).await;
            match msg {
                Ok(Ok(Some(resp))) => {
                    if resp.canceled() {
                        break;
                    }
                    let seen = mono_ns();
                    for e in resp.events() {
                        let Some(kv) = e.kv() else { continue };
                        let delete = e.event_type() == EventType::Delete;
                        let (create_revision, lease, hold) = match (delete, e.prev_kv()) {
                            (true, Some(p)) => (p.create_revision(), p.lease(), p.mod_revision()),
                            _ => (kv.create_revision(), kv.lease(), kv.mod_revision()),
                        };
                        let key = String::from_utf8_lossy(kv.key()).into_owned();
                        let holder = (!delete && lock_key_of(&key).is_some())
                            .then(|| decode::<Holder>(kv.value()).map(|h| h.spiffe_id))
                            .flatten();
                        let epoch = (!delete && key == EPOCH_KEY)
                            .then(|| decode::<EpochRecord>(kv.value()).map(|r| r.epoch))
                            .flatten();
                        events.push(StoreEvent {
                            revision: kv.mod_revision(),
                            seen,
                            key,
                            delete,
                            create_revision,
                            lease,
                            holder,
                            hold: Some(hold),
                            epoch,
                        });
                        next = next.max(kv.mod_revision() + 1);
                    }
                    if let Some(h) = resp.header() {
                        // A progress notification: nothing below this revision is pending.
                        if resp.events().is_empty() && h.revision() >= next {
                            next = h.revision() + 1;
                        }
                    }
                }
                Ok(Ok(None)) | Ok(Err(_)) => break,
                Err(_) => {}
            }
            if stop.load(Ordering::SeqCst) {
                if target.is_none() {
                    break;
                }
                if let Some(t) = target
                    && next > t
                {
                    return events;
                }
            }
        }
    }
}

/// The lock key a holder record holds, and whether it is a shared hold: `/l/<key>` (the
/// exclusive holder, every class) or `/r/<key>//s/<lease>` (a shared hold). A key has no
/// empty segment, so the first `//` after the prefix ends it.
pub fn hold_of(etcd_key: &str) -> Option<(&str, bool)> {
    if let Some(key) = etcd_key.strip_prefix(HOLDER_PREFIX) {
        return Some((key, false));
    }
    let (key, rest) = etcd_key.strip_prefix(SHARED_PREFIX)?.split_once("//")?;
    rest.starts_with("s/").then_some((key, true))
}

/// The lock key and the permit number of a semaphore's permit record, `/p/<key>//<i>` (a
/// holder record, on its session's lease; a key has no empty segment, so the first `//`
/// after the prefix ends it).
pub fn permit_of(etcd_key: &str) -> Option<(&str, u32)> {
    let (key, permit) = etcd_key.strip_prefix(PERMIT_PREFIX)?.split_once("//")?;
    Some((key, permit.parse().ok()?))
}

/// The lock key of any holder record: exclusive, shared, or a semaphore's permit.
pub fn lock_key_of(etcd_key: &str) -> Option<&str> {
    hold_of(etcd_key)
        .map(|(key, _)| key)
        .or_else(|| permit_of(etcd_key).map(|(key, _)| key))
}

/// The lock key of an exclusive waiter's mark, `/r/<key>//w/<lease>`.
pub fn writer_mark_of(etcd_key: &str) -> Option<&str> {
    let (key, rest) = etcd_key.strip_prefix(SHARED_PREFIX)?.split_once("//")?;
    rest.starts_with("w/").then_some(key)
}

/// The store's history, indexed for the checker.
#[derive(Debug, Default)]
pub struct StoreTruth {
    /// (holder key, the hold's revision — the mod revision of the write that made it) ->
    /// the revision that ended it (a delete, or a handoff's overwrite).
    pub holds: HashMap<(String, i64), Option<i64>>,
    /// Holds that ended by a handoff (the next holder's record written over them).
    pub handed_off: HashSet<(String, i64)>,
    /// (holder key, create revision) -> its lease.
    pub hold_lease: HashMap<(String, i64), i64>,
    /// (holder key, create revision) -> the identity its record names.
    pub hold_identity: HashMap<(String, i64), String>,
    /// (holder key, create revision) -> when the watcher saw it created, and deleted.
    pub hold_seen: HashMap<(String, i64), (u64, Option<u64>)>,
    /// Lease -> the revision its session record was deleted at (expiry or close).
    pub session_end: HashMap<i64, i64>,
    /// Revisions at which the epoch record was written (init or advance).
    pub epoch_writes: HashSet<i64>,
    /// Revision -> the epoch the record written there names, where the log has it.
    pub epoch_values: BTreeMap<i64, u16>,
    /// Epoch-record writes the log does not hold: a log that starts mid-store (a soak
    /// round on a long-lived stack, `StoreStart`) counts the ones before it from here; a
    /// cluster whose first epoch came from the coord's allocator (a shard's) starts above 1.
    pub epochs_before: u32,
    /// The log starts mid-store (`StoreStart`): its first epoch write is an advance, not
    /// the `epoch init` a log from revision 1 begins with.
    pub starts_mid_store: bool,
    /// Revisions at which a force-release record was written: the hold deleted in the
    /// same transaction was taken away by operators, not released by its holder.
    pub force_writes: HashSet<i64>,
    /// Session record deletions with the time the watcher saw them.
    pub session_end_seen: HashMap<i64, u64>,
    /// Group commit seen in the store: revisions at which two or more holder records were
    /// written (grants, handoffs, releases of distinct keys in one transaction), and the
    /// writes in them. A lease revoke also deletes several records at one revision, all of
    /// one lease and never a put, so such revisions are not counted (nor, alike, a batch of
    /// two releases by one session).
    pub batches: usize,
    pub batched_writes: usize,
    /// (lock key, revision) -> the shared hold record made at that revision: lookups by
    /// key and token revision find a shared hold here, every other at `/l/<key>`.
    pub shared_records: HashMap<(String, i64), String>,
    /// (lock key, revision) -> the semaphore permit record made at that revision (a grant
    /// or a handoff of the permit) and its permit number: lookups by key and token revision
    /// find a permit's hold here.
    pub permit_records: HashMap<(String, i64), (String, u32)>,
    /// Every holder record's and writer's mark's event, in order: what the reader–writer
    /// rules replay (`shared_rules::replay`).
    pub rw_events: Vec<StoreEvent>,
}

impl StoreTruth {
    pub fn from_events(events: &[StoreEvent]) -> Self {
        let mut t = Self::default();
        // The live hold of each holder key, to end it when a handoff writes over it.
        let mut live: HashMap<String, i64> = HashMap::new();
        for e in events {
            if let Some(key) = lock_key_of(&e.key) {
                if !e.delete && hold_of(&e.key).is_some_and(|(_, shared)| shared) {
                    t.shared_records
                        .insert((key.to_owned(), e.revision), e.key.clone());
                }
                if let (false, Some((_, permit))) = (e.delete, permit_of(&e.key)) {
                    t.permit_records
                        .insert((key.to_owned(), e.revision), (e.key.clone(), permit));
                }
                let id = (e.key.clone(), e.hold_id());
                if e.delete {
                    if let Some(seen) = t.hold_seen.get_mut(&id) {
                        seen.1 = Some(e.seen);
                    }
                    t.holds.insert(id, Some(e.revision));
                    live.remove(&e.key);
                } else {
                    if let Some(before) = live.insert(e.key.clone(), e.revision) {
                        let ended = (e.key.clone(), before);
                        if let Some(seen) = t.hold_seen.get_mut(&ended) {
                            seen.1 = Some(e.seen);
                        }
                        t.holds.insert(ended.clone(), Some(e.revision));
                        t.handed_off.insert(ended);
                    }
                    let id = (e.key.clone(), e.revision);
                    t.hold_seen.insert(id.clone(), (e.seen, None));
                    t.holds.entry(id.clone()).or_insert(None);
                    if let Some(who) = &e.holder {
                        t.hold_identity.insert(id.clone(), who.clone());
                    }
                    t.hold_lease.insert(id, e.lease);
                }
            } else if let Some(hex) = e.key.strip_prefix(SESSION_PREFIX) {
                if e.delete
                    && let Ok(lease) = i64::from_str_radix(hex, 16)
                {
                    t.session_end.insert(lease, e.revision);
                    t.session_end_seen.insert(lease, e.seen);
                }
            } else if e.key == EPOCH_KEY && !e.delete {
                t.epoch_writes.insert(e.revision);
                if let Some(epoch) = e.epoch {
                    t.epoch_values.insert(e.revision, epoch);
                }
            } else if e.key.starts_with(FORCE_PREFIX) && !e.delete {
                t.force_writes.insert(e.revision);
            }
        }
        // Per revision: holder-record writes, and whether any was a put or leases differ.
        let mut at: HashMap<i64, (usize, bool, HashSet<i64>)> = HashMap::new();
        for e in events.iter().filter(|e| e.key.starts_with(HOLDER_PREFIX)) {
            let w = at.entry(e.revision).or_default();
            w.0 += 1;
            w.1 |= !e.delete;
            w.2.insert(e.lease);
        }
        for (n, put, leases) in at.into_values() {
            if n > 1 && (put || leases.len() > 1) {
                t.batches += 1;
                t.batched_writes += n;
            }
        }
        t.rw_events = events
            .iter()
            .filter(|e| hold_of(&e.key).is_some() || writer_mark_of(&e.key).is_some())
            .cloned()
            .collect();
        t
    }

    /// The record of the hold of `key` made at `revision`: its shared hold record or its
    /// permit record if it was one, else the exclusive holder `/l/<key>`.
    fn hkey(&self, key: &str, revision: i64) -> String {
        let id = (key.to_owned(), revision);
        if let Some((record, _)) = self.permit_records.get(&id) {
            return record.clone();
        }
        self.shared_records
            .get(&id)
            .cloned()
            .unwrap_or_else(|| format!("{HOLDER_PREFIX}{key}"))
    }

    /// The permit the hold of `key` made at `revision` was, if it was a semaphore's.
    pub fn permit_at(&self, key: &str, revision: i64) -> Option<u32> {
        self.permit_records
            .get(&(key.to_owned(), revision))
            .map(|(_, permit)| *permit)
    }

    /// When the watcher saw the hold of `key` made at `revision` (an upper bound on when
    /// it was made).
    pub fn made_seen(&self, key: &str, revision: i64) -> Option<u64> {
        self.hold_seen
            .get(&(self.hkey(key, revision), revision))
            .map(|(made, _)| *made)
    }

    /// Whether the hold of `key` made at `revision` was a shared hold.
    pub fn is_shared(&self, key: &str, revision: i64) -> bool {
        self.shared_records
            .contains_key(&(key.to_owned(), revision))
    }

    /// Whether the log has any hold record of `key` (exclusive, shared or a permit).
    pub fn logged(&self, key: &str) -> bool {
        self.hold_lease
            .keys()
            .any(|(k, _)| lock_key_of(k) == Some(key))
    }

    /// Did the grant of `key` at `revision` create a holder key?
    pub fn backed(&self, key: &str, revision: i64) -> bool {
        self.holds
            .contains_key(&(self.hkey(key, revision), revision))
    }

    /// The identity named by the holder record created at `revision`, if the log has it.
    pub fn identity_of(&self, key: &str, revision: i64) -> Option<&str> {
        self.hold_identity
            .get(&(self.hkey(key, revision), revision))
            .map(String::as_str)
    }

    /// The lease the holder record created at `revision` was written on.
    pub fn lease_of(&self, key: &str, revision: i64) -> Option<i64> {
        self.hold_lease
            .get(&(self.hkey(key, revision), revision))
            .copied()
    }

    /// Whether the store ever had the hold created at `revision` (outer None: never), and
    /// the revision that deleted it (inner None: it lived to the end of the run).
    pub fn deleted_at(&self, key: &str, revision: i64) -> Option<Option<i64>> {
        self.holds
            .get(&(self.hkey(key, revision), revision))
            .copied()
    }

    /// Holds of `key` written on `lease`, exclusive, shared or permits: (create revision,
    /// seen created, seen deleted).
    pub fn holds_on(&self, key: &str, lease: i64) -> Vec<(i64, u64, Option<u64>)> {
        let hkey = format!("{HOLDER_PREFIX}{key}");
        let shared = format!("{SHARED_PREFIX}{key}//s/{}", lease_hex(lease));
        let permit = |k: &str| permit_of(k).is_some_and(|(pk, _)| pk == key);
        let mut out: Vec<_> = self
            .hold_lease
            .iter()
            .filter(|((k, _), l)| (*k == hkey || *k == shared || permit(k)) && **l == lease)
            .filter_map(|((k, rev), _)| {
                let (made, gone) = self.hold_seen.get(&(k.clone(), *rev))?;
                Some((*rev, *made, *gone))
            })
            .collect();
        out.sort_unstable();
        out
    }

    /// The epoch the store was in at `revision`: the epoch the last record written before
    /// it names, or, in a log without the values, how many times the record had been
    /// written before it (init, then each advance: E+1 each). None when the log holds no
    /// epoch write (a history that does not start at the store's beginning cannot say).
    pub fn epoch_at(&self, revision: i64) -> Option<u32> {
        if self.epoch_writes.is_empty() && self.epochs_before == 0 {
            return None;
        }
        let last = self.epoch_writes.iter().filter(|w| **w < revision).max();
        if let Some(epoch) = last.and_then(|w| self.epoch_values.get(w)) {
            return Some(u32::from(*epoch));
        }
        let n = self.epoch_writes.iter().filter(|w| **w < revision).count();
        u32::try_from(n).ok().map(|n| n + self.epochs_before)
    }

    /// The epoch writes in the log that were advances, in order: all of them when the log
    /// starts mid-store, all but the first (`epoch init`) when it starts at revision 1.
    pub fn advances(&self) -> Vec<i64> {
        let mut writes: Vec<i64> = self.epoch_writes.iter().copied().collect();
        writes.sort_unstable();
        let init = usize::from(!self.starts_mid_store);
        writes.into_iter().skip(init).collect()
    }

    /// The revision at which the hold created at `revision` was taken away by the service
    /// (its session ended, an epoch advance deleted it, or operators force-released it),
    /// if it was.
    pub fn revoked_at(&self, key: &str, revision: i64) -> Option<i64> {
        let id = (self.hkey(key, revision), revision);
        let deleted = (*self.holds.get(&id)?)?;
        let lease = self.hold_lease.get(&id).copied().unwrap_or(0);
        let by_session = self.session_end.get(&lease) == Some(&deleted);
        let by_epoch = self.epoch_writes.contains(&deleted);
        (by_session || by_epoch || self.forced_at(key, revision).is_some()).then_some(deleted)
    }

    /// The revision at which operators force-released the hold created at `revision`.
    pub fn forced_at(&self, key: &str, revision: i64) -> Option<i64> {
        let id = (format!("{HOLDER_PREFIX}{key}"), revision);
        let deleted = (*self.holds.get(&id)?)?;
        self.force_writes.contains(&deleted).then_some(deleted)
    }

    /// Holds of `key` force-released: (hold revision, its lease, the force revision, when
    /// the watcher saw the hold made and deleted).
    pub fn forced_holds(&self, key: &str) -> Vec<(i64, i64, i64, u64, Option<u64>)> {
        let hkey = format!("{HOLDER_PREFIX}{key}");
        let mut out: Vec<_> = self
            .hold_lease
            .iter()
            .filter(|((k, _), _)| *k == hkey)
            .filter_map(|((_, rev), lease)| {
                let at = self.forced_at(key, *rev)?;
                let (made, gone) = self.hold_seen.get(&(hkey.clone(), *rev))?;
                Some((*rev, *lease, at, *made, *gone))
            })
            .collect();
        out.sort_unstable();
        out
    }
}
