//! The read model (issue 36), pure: what the store's reads found for one page of a
//! namespace's held keys in, one row per key out. Never a token: a holder record carries
//! none, and the revision a token would be made of is not kept here.
//!
//! What makes a hold suspicious, and why:
//! - **held long**: held longer than its class's bound (the caller's rule: by default ten
//!   times the class's session TTL). A critical section that outlives many renewals is
//!   most often a process that kept its session and forgot its lock.
//! - **expiring**: its session has less TTL left than the threshold (a renewal gap: the
//!   holder's process is stalled or cut off, and the hold will lapse unless it renews).
//! - **session gone**: the holder record names a session whose lease has no TTL left (the
//!   store is deleting it; a read between the two).
//! - **waiver expired**: an advisory class past its risk waiver (ADR-01).

use lock_store::layout::{Holder, SessionRecord};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// What the reads of one page found.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    /// When the reads were made (wall clock, ms since the epoch): `held_for` is measured
    /// from the holder record's own wall-clock `acquired_at_ms`, so it is as good as the
    /// two clocks.
    pub now_ms: u64,
    /// Holder records of exclusive holds (`/l/`), in key order.
    pub holds: Vec<(String, Holder)>,
    /// Holder records of shared holds (`/r/<key>//s/<lease>`, one per reading session),
    /// in the store's order. A key held only by readers has no `/l/` record: without
    /// these, a writer stuck behind readers would see an empty namespace.
    pub shared_holds: Vec<(String, Holder)>,
    /// Sessions by lease (hex).
    pub sessions: BTreeMap<String, SessionSeen>,
    /// Per key: durable waiters queued (`/q/<key>/`).
    pub durable_waiters: BTreeMap<String, u64>,
    /// Per key: shared holds (`/r/<key>//s/`) and whether an exclusive waiter is marked.
    pub shared: BTreeMap<String, (u64, bool)>,
}

#[derive(Debug, Clone, Default)]
pub struct SessionSeen {
    pub record: Option<SessionRecord>,
    /// Seconds the lease has left; None: the lease is gone.
    pub ttl_left_s: Option<i64>,
}

/// The caller's rules for suspicious holds.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    /// Per class: a hold older than this is flagged `held-long`.
    pub held_over_ms: BTreeMap<String, u64>,
    /// A session with less than this left is flagged `expiring`.
    pub expiring_below_s: i64,
    /// Advisory classes whose waiver has expired.
    pub waiver_expired: BTreeSet<String>,
}

/// Why a hold looks wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "flag", rename_all = "kebab-case")]
pub enum Flag {
    HeldLong { bound_ms: u64 },
    Expiring { ttl_left_s: i64 },
    SessionGone,
    WaiverExpired,
}

impl Flag {
    /// One word, for a table cell.
    /// What it means and what to ask, for a details pane or a key's page.
    pub fn explain(&self) -> String {
        match self {
            Flag::HeldLong { bound_ms } => {
                format!("held long: over {} s for its class", bound_ms / 1000)
            }
            Flag::Expiring { ttl_left_s } => {
                format!("expiring: {ttl_left_s} s left (is the holder renewing?)")
            }
            Flag::SessionGone => "session gone: its lease has no TTL left".to_owned(),
            Flag::WaiverExpired => "waiver expired: an advisory class".to_owned(),
        }
    }

    pub fn word(&self) -> &'static str {
        match self {
            Flag::HeldLong { .. } => "held-long",
            Flag::Expiring { .. } => "expiring",
            Flag::SessionGone => "session-gone",
            Flag::WaiverExpired => "waiver-expired",
        }
    }
}

/// How a row's session holds its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Exclusive,
    /// One reader of a `shared: true` class's key; the key has a row per reader.
    Shared,
}

impl Mode {
    pub fn word(self) -> &'static str {
        match self {
            Mode::Exclusive => "excl",
            Mode::Shared => "shared",
        }
    }
}

/// One hold: a held key's exclusive holder, or one of its readers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    pub key: String,
    pub mode: Mode,
    pub identity: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    pub class: String,
    pub acquired_at_ms: u64,
    pub held_for_ms: u64,
    /// The holding session's lease (hex): what an operator names to find its other holds.
    pub session: String,
    pub session_ttl_s: Option<u32>,
    pub ttl_left_s: Option<i64>,
    pub durable_waiters: u64,
    pub shared_holders: u64,
    pub writer_waiting: bool,
    pub flags: Vec<Flag>,
}

/// One row per holder record, in the order read: the exclusive holds, then the shared.
pub fn rows(seen: &Seen, rules: &Rules) -> Vec<Row> {
    let exclusive = seen.holds.iter().map(|(k, h)| (k, h, Mode::Exclusive));
    let shared = seen.shared_holds.iter().map(|(k, h)| (k, h, Mode::Shared));
    exclusive
        .chain(shared)
        .map(|(key, h, mode)| {
            let session = seen.sessions.get(&h.session);
            let ttl_left_s = session.and_then(|s| s.ttl_left_s);
            let held_for_ms = seen.now_ms.saturating_sub(h.acquired_at_ms);
            let (shared_holders, writer_waiting) =
                seen.shared.get(key).copied().unwrap_or_default();
            Row {
                key: key.clone(),
                mode,
                identity: h.spiffe_id.clone(),
                instance: h.instance.clone(),
                class: h.class.clone(),
                acquired_at_ms: h.acquired_at_ms,
                held_for_ms,
                session: h.session.clone(),
                session_ttl_s: session
                    .and_then(|s| s.record.as_ref())
                    .map(|r| r.ttl_seconds),
                ttl_left_s,
                durable_waiters: seen.durable_waiters.get(key).copied().unwrap_or(0),
                shared_holders,
                writer_waiting,
                flags: flags(&h.class, held_for_ms, session, rules),
            }
        })
        .collect()
}

fn flags(class: &str, held_for_ms: u64, session: Option<&SessionSeen>, rules: &Rules) -> Vec<Flag> {
    let mut out = Vec::new();
    if let Some(&bound_ms) = rules.held_over_ms.get(class)
        && held_for_ms > bound_ms
    {
        out.push(Flag::HeldLong { bound_ms });
    }
    match session.map(|s| s.ttl_left_s) {
        Some(Some(left)) if left <= 0 => out.push(Flag::SessionGone),
        Some(Some(left)) if left < rules.expiring_below_s => {
            out.push(Flag::Expiring { ttl_left_s: left });
        }
        Some(Some(_)) => {}
        // No lease, or no read of it.
        Some(None) | None => out.push(Flag::SessionGone),
    }
    if rules.waiver_expired.contains(class) {
        out.push(Flag::WaiverExpired);
    }
    out
}

/// What one session holds and waits for, from the keys on its lease.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SessionView {
    /// Seconds its lease has left (None: gone).
    pub ttl_left_s: Option<i64>,
    /// Keys it holds, and how.
    pub holds: Vec<(String, Mode)>,
    /// Keys it waits for: a durable queue entry, or a writer's mark on a shared key.
    pub waiting: Vec<String>,
    /// More keys than were shown.
    pub more: bool,
}

/// The keys on a session's lease, sorted into what it holds and what it waits for (its
/// own `/s/` record and attempt fences are neither). At most `limit` of each.
pub fn session_view(keys: &[String], ttl_left_s: Option<i64>, limit: usize) -> SessionView {
    use lock_store::layout::{HOLDER_PREFIX, QUEUE_PREFIX, SHARED_PREFIX};
    let mut v = SessionView {
        ttl_left_s,
        ..SessionView::default()
    };
    for k in keys {
        if let Some(key) = k.strip_prefix(HOLDER_PREFIX) {
            v.holds.push((key.to_owned(), Mode::Exclusive));
        } else if let Some(rest) = k.strip_prefix(SHARED_PREFIX) {
            if let Some((key, _)) = rest.split_once("//s/") {
                v.holds.push((key.to_owned(), Mode::Shared));
            } else if let Some((key, _)) = rest.split_once("//w/") {
                v.waiting.push(key.to_owned());
            }
        } else if let Some((key, _)) = k
            .strip_prefix(QUEUE_PREFIX)
            .and_then(|r| r.split_once("//"))
        {
            v.waiting.push(key.to_owned());
        }
    }
    v.holds.sort();
    v.waiting.sort();
    v.more = v.holds.len() > limit || v.waiting.len() > limit;
    v.holds.truncate(limit);
    v.waiting.truncate(limit);
    v
}

#[cfg(test)]
mod tests;
