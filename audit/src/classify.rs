//! What happened at one etcd revision, in the lock service's words (ADR-21). Pure: the
//! changes of one revision in, audit rows out; the table test below lists the cases.
//!
//! etcd's events alone cannot tell every case apart, so the records carry what is needed
//! in the previous values the watch returns:
//! - a **grant** creates `/l/<key>`; a **handoff** overwrites it (the release Txn grants the
//!   queue head, `release.rs`); a **release** deletes it alone;
//! - a lease revoke deletes the session record `/s/<lease>` and every hold on the lease at
//!   one revision: an **expiry** when the record was not marked, a **close** when
//!   CloseSession marked it `closing` just before revoking (`sessions.rs`);
//! - an **epoch advance** puts `/sys/epoch` and deletes every hold at one revision;
//! - a **force release** writes `/sys/force/<id>` with the delete (issue 22, item 2).
//!
//! The rule for a hold's end is `lock_store::hold_end`, shared with Observe.
//!
//! Durable waiters (`/q/`) are not audited: a wait is not a hold.

use lock_store::hold_end::{EndFacts, HoldEnd, SessionEnd, hold_end};
use lock_store::layout::{
    EPOCH_KEY, EpochRecord, HOLDER_PREFIX, Holder, SESSION_PREFIX, SHARD_FENCE_KEY, SessionRecord,
    decode,
};
pub use lock_store::layout::{FORCE_PREFIX, FORCE_REQUEST_PREFIX};
use std::collections::BTreeSet;

/// One key's change at a revision, as the watch reports it (with the previous value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub key: String,
    /// The new value; None for a delete.
    pub value: Option<Vec<u8>>,
    /// The value before (watch with `prev_kv`); None when the key was created.
    pub prev: Option<Vec<u8>>,
}

impl Change {
    pub fn put(key: &str, value: &[u8], prev: Option<&[u8]>) -> Self {
        Self {
            key: key.to_owned(),
            value: Some(value.to_vec()),
            prev: prev.map(<[u8]>::to_vec),
        }
    }

    pub fn delete(key: &str, prev: Option<&[u8]>) -> Self {
        Self {
            key: key.to_owned(),
            value: None,
            prev: prev.map(<[u8]>::to_vec),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Grant,
    Handoff,
    Release,
    /// A hold ended because its session's lease expired.
    Expiry,
    /// A hold ended by its session's close (CloseSession revokes the lease).
    ClosedWithSession,
    /// A hold ended by an epoch advance (every hold is deleted with it).
    RevokedByAdvance,
    ForceRelease,
    /// A force release filed (`/sys/force-request/<id>`), approved or not: who asked for
    /// which hold, and why.
    ForceRequest,
    SessionOpen,
    SessionClose,
    SessionExpiry,
    /// The store's first epoch (`lockctl epoch init`, or a shard's from the coord's
    /// allocator): a bootstrap, by no one, revoking nothing.
    EpochInit,
    EpochAdvance,
    /// An entity shard's map fence rewritten by a move (`lockctl shards`), its epoch
    /// unchanged: from here the shard serves another map version (ADR-09).
    ShardMap,
    /// Revisions the tailer could not read (compacted past its checkpoint).
    Gap,
}

impl Kind {
    pub const ALL: [Kind; 15] = [
        Kind::Grant,
        Kind::Handoff,
        Kind::Release,
        Kind::Expiry,
        Kind::ClosedWithSession,
        Kind::RevokedByAdvance,
        Kind::ForceRelease,
        Kind::ForceRequest,
        Kind::SessionOpen,
        Kind::SessionClose,
        Kind::SessionExpiry,
        Kind::EpochInit,
        Kind::EpochAdvance,
        Kind::ShardMap,
        Kind::Gap,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Grant => "grant",
            Kind::Handoff => "handoff",
            Kind::Release => "release",
            Kind::Expiry => "expiry",
            Kind::ClosedWithSession => "closed-with-session",
            Kind::RevokedByAdvance => "revoked-by-advance",
            Kind::ForceRelease => "force-release",
            Kind::ForceRequest => "force-request",
            Kind::SessionOpen => "session-open",
            Kind::SessionClose => "session-close",
            Kind::SessionExpiry => "session-expiry",
            Kind::EpochInit => "epoch-init",
            Kind::EpochAdvance => "epoch-advance",
            Kind::ShardMap => "shard-map",
            Kind::Gap => "gap",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// One audit row, keyed by (cluster, revision, key). Never a token: a hold is named by
/// its key and revision, as etcd names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Row {
    pub revision: i64,
    /// The lock key (without `/l/`), `/s/<lease>` for session rows, `/sys/epoch` for an
    /// advance, "" for a gap.
    pub key: String,
    pub kind: Kind,
    /// The holder's (or session's) SPIFFE ID; for a handoff, the new holder's.
    pub spiffe_id: String,
    /// The session lease, hex.
    pub session: String,
    pub class: String,
    /// Kind-specific facts as JSON (a handoff's previous holder, an advance's epochs, a
    /// gap's range).
    pub detail: String,
}

/// The epoch number in an epoch record's value, if decodable.
fn epoch_number(v: &Option<Vec<u8>>) -> Option<u16> {
    v.as_deref()
        .and_then(decode::<EpochRecord>)
        .map(|r| r.epoch)
}

/// The rows for the changes committed at `revision`, in key order.
pub fn classify(revision: i64, changes: &[Change]) -> Vec<Row> {
    // A put of the epoch record is an advance only if the epoch number changed (a shard
    // move writes its fence at its own key, `/sys/shard-fence`, and revokes nothing).
    let advance = changes.iter().any(|c| {
        c.key == EPOCH_KEY && c.value.is_some() && epoch_number(&c.value) != epoch_number(&c.prev)
    });
    let force = changes
        .iter()
        .any(|c| c.key.starts_with(FORCE_PREFIX) && c.value.is_some());
    // Sessions ended at this revision, by how.
    let mut expired = BTreeSet::new();
    let mut closed = BTreeSet::new();
    for c in changes {
        if let (Some(lease), None) = (c.key.strip_prefix(SESSION_PREFIX), &c.value) {
            let record = c.prev.as_deref().and_then(decode::<SessionRecord>);
            match record {
                Some(r) if r.closing => closed.insert(lease.to_owned()),
                _ => expired.insert(lease.to_owned()),
            };
        }
    }
    let mut rows = Vec::new();
    for c in changes {
        let row =
            |kind, key: &str, spiffe_id: String, session: String, class: String, detail| Row {
                revision,
                key: key.to_owned(),
                kind,
                spiffe_id,
                session,
                class,
                detail,
            };
        if let Some(key) = c.key.strip_prefix(HOLDER_PREFIX) {
            let holder =
                |v: &Option<Vec<u8>>| v.as_deref().and_then(decode::<Holder>).unwrap_or_default();
            let (now, before) = (holder(&c.value), holder(&c.prev));
            let r = match (&c.value, &c.prev) {
                (Some(_), None) => row(
                    Kind::Grant,
                    key,
                    now.spiffe_id,
                    now.session,
                    now.class,
                    String::new(),
                ),
                (Some(_), Some(_)) => {
                    let detail = serde_json::json!({
                        "from_spiffe_id": before.spiffe_id,
                        "from_session": before.session,
                    })
                    .to_string();
                    row(
                        Kind::Handoff,
                        key,
                        now.spiffe_id,
                        now.session,
                        now.class,
                        detail,
                    )
                }
                (None, _) => {
                    let session = if expired.contains(&before.session) {
                        Some(SessionEnd::Expired)
                    } else if closed.contains(&before.session) {
                        Some(SessionEnd::Closed)
                    } else {
                        None
                    };
                    let facts = EndFacts {
                        advance,
                        force,
                        session,
                    };
                    let kind = match hold_end(facts) {
                        HoldEnd::RevokedByAdvance => Kind::RevokedByAdvance,
                        HoldEnd::Forced => Kind::ForceRelease,
                        HoldEnd::Expired => Kind::Expiry,
                        HoldEnd::ClosedWithSession => Kind::ClosedWithSession,
                        HoldEnd::Released => Kind::Release,
                    };
                    row(
                        kind,
                        key,
                        before.spiffe_id,
                        before.session,
                        before.class,
                        String::new(),
                    )
                }
            };
            rows.push(r);
        } else if let Some(lease) = c.key.strip_prefix(SESSION_PREFIX) {
            let record = |v: &Option<Vec<u8>>| v.as_deref().and_then(decode::<SessionRecord>);
            let kind = match (&c.value, &c.prev) {
                (Some(_), None) => Some(Kind::SessionOpen),
                // CloseSession's mark: the close is recorded with the revoke that follows.
                (Some(_), Some(_)) => None,
                (None, _) if closed.contains(lease) => Some(Kind::SessionClose),
                (None, _) => Some(Kind::SessionExpiry),
            };
            let Some(kind) = kind else { continue };
            let (spiffe_id, detail) = match record(&c.value).or_else(|| record(&c.prev)) {
                Some(r) => (
                    r.spiffe_id,
                    serde_json::json!({"ttl_seconds": r.ttl_seconds}).to_string(),
                ),
                None => (String::new(), String::new()),
            };
            rows.push(row(
                kind,
                &c.key,
                spiffe_id,
                lease.to_owned(),
                String::new(),
                detail,
            ));
        } else if c.key == SHARD_FENCE_KEY && c.value.is_some() {
            let fence = c
                .value
                .as_deref()
                .and_then(decode::<serde_json::Value>)
                .unwrap_or_default();
            let detail = serde_json::json!({
                "shard": fence.get("name"),
                "serves": fence.get("version"),
                "moving_to": fence.get("pending"),
            });
            rows.push(row(
                Kind::ShardMap,
                SHARD_FENCE_KEY,
                String::new(),
                String::new(),
                String::new(),
                detail.to_string(),
            ));
        } else if c.key == EPOCH_KEY && c.value.is_some() && advance {
            // Who advanced it rides in the record itself (ADR-03): both operators, or
            // break-glass.
            let by = c
                .value
                .as_deref()
                .and_then(decode::<EpochRecord>)
                .and_then(|r| r.advanced_by);
            let mut detail = serde_json::json!({
                "from": epoch_number(&c.prev),
                "to": epoch_number(&c.value),
            });
            if let Some(by) = by {
                detail["advanced_by"] = serde_json::json!(by);
            }
            // No record before it: the store's first epoch, not an advance.
            let kind = if c.prev.is_none() {
                Kind::EpochInit
            } else {
                Kind::EpochAdvance
            };
            rows.push(row(
                kind,
                EPOCH_KEY,
                String::new(),
                String::new(),
                String::new(),
                detail.to_string(),
            ));
        } else if c.key.starts_with(FORCE_REQUEST_PREFIX) && c.value.is_some() && c.prev.is_none() {
            // A filing (its approval deletes it; expiry deletes it too: neither is an event).
            let detail = c
                .value
                .as_deref()
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default();
            rows.push(row(
                Kind::ForceRequest,
                &c.key,
                String::new(),
                String::new(),
                String::new(),
                detail,
            ));
        } else if c.key.starts_with(FORCE_PREFIX) && c.value.is_some() {
            // The force record itself (requester, approver, reason) is its detail.
            let detail = c
                .value
                .as_deref()
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default();
            rows.push(row(
                Kind::ForceRelease,
                &c.key,
                String::new(),
                String::new(),
                String::new(),
                detail,
            ));
        }
    }
    rows.sort();
    rows
}

/// The row recording that revisions `from..=to` could not be read (etcd compacted them
/// before the tailer got there): an explicit hole, never a silent one.
pub fn gap(from: i64, to: i64) -> Row {
    Row {
        revision: from,
        key: String::new(),
        kind: Kind::Gap,
        spiffe_id: String::new(),
        session: String::new(),
        class: String::new(),
        detail: serde_json::json!({"from": from, "to": to}).to_string(),
    }
}

#[cfg(test)]
mod tests;
