//! A force release's life as plain data and pure decisions (ADR-20):
//!
//! ```text
//! file(key, reason, revoke_session) by A   -> /sys/force-request/<id>  {hold as A saw it}
//! approve(id) by B != A                    -> one Txn: the hold is still that one
//!                                             (mod revision), delete it, delete the request,
//!                                             write /sys/force/<id> {A, B, reason, ...}
//! ```
//!
//! [`file_verdict`] and [`approve_verdict`] decide; `store.rs` does the etcd I/O. Nothing
//! here holds a token: a hold is named by its key and the revision that granted it.

use crate::oidc::Operator;
use serde::{Deserialize, Serialize};

/// The longest reason kept (it is stored twice and shown on the page).
pub const MAX_REASON: usize = 1024;

/// A hold as etcd has it: the holder record and the revision that wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldView {
    /// The `/l/<key>` record's mod revision: which grant this is.
    pub revision: i64,
    pub spiffe_id: String,
    /// The holder's session lease, hex.
    pub session: String,
    pub class: String,
    pub acquired_at_ms: u64,
}

/// A filed request, waiting for a second operator (`/sys/force-request/<id>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForceRequest {
    pub id: String,
    pub key: String,
    pub reason: String,
    /// Revoke the holder's whole session (every hold it has), not only this hold.
    pub revoke_session: bool,
    pub requester: Operator,
    pub filed_at_ms: u64,
    pub expires_at_ms: u64,
    pub hold: HoldView,
    /// The class's enforcement when filed: "fenced", "advisory", or "unknown" (a class the
    /// registry no longer has).
    pub enforcement: String,
}

/// What was done (`/sys/force/<id>`, on a 24 h lease; the audit tailer keeps it for good).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForceRecord {
    pub id: String,
    pub key: String,
    pub reason: String,
    pub revoke_session: bool,
    pub requester: Operator,
    pub approver: Operator,
    pub class: String,
    pub enforcement: String,
    /// The revision of the hold that was released.
    pub hold_revision: i64,
    pub holder_spiffe_id: String,
    pub holder_session: String,
    pub filed_at_ms: u64,
    pub executed_at_ms: u64,
}

impl ForceRecord {
    pub fn of(req: &ForceRequest, approver: &Operator, now_ms: u64) -> Self {
        ForceRecord {
            id: req.id.clone(),
            key: req.key.clone(),
            reason: req.reason.clone(),
            revoke_session: req.revoke_session,
            requester: req.requester.clone(),
            approver: approver.clone(),
            class: req.hold.class.clone(),
            enforcement: req.enforcement.clone(),
            hold_revision: req.hold.revision,
            holder_spiffe_id: req.hold.spiffe_id.clone(),
            holder_session: req.hold.session.clone(),
            filed_at_ms: req.filed_at_ms,
            executed_at_ms: now_ms,
        }
    }
}

/// The warning an approver reads before releasing a hold of this enforcement.
pub fn warning(enforcement: &str) -> Option<&'static str> {
    match enforcement {
        "fenced" => None,
        "advisory" => Some(
            "ADVISORY class: the resource does not check fencing tokens. If the holder is alive \
             it may go on writing after this release, and the next holder too: two writers are \
             now possible until the old holder stops.",
        ),
        _ => Some(
            "The class is not in the registry this server reads: its enforcement is unknown. \
             Treat it as advisory: two writers may be possible.",
        ),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("invalid key: {0}")]
    InvalidKey(String),
    #[error("a reason is required")]
    ReasonRequired,
    #[error("the reason is longer than {MAX_REASON} bytes")]
    ReasonTooLong,
    #[error("the key is not held: there is nothing to release")]
    NotHeld,
    #[error("the requester cannot approve their own request: a second operator must")]
    SamePerson,
    #[error("the request has expired; file it again")]
    Expired,
    #[error("no such pending request (approved already, withdrawn or expired)")]
    NotFound,
    #[error(
        "the hold changed since the request was filed (requested revision {requested}, now {now}): nothing was released and the request is withdrawn; file a new one if it is still needed"
    )]
    HoldChanged { requested: i64, now: i64 },
    #[error(
        "the hold the request named has ended (released or expired): nothing to release; the request is withdrawn"
    )]
    HoldGone,
    #[error("the store has no epoch record: `lockctl epoch init` (etcd root) first")]
    NoEpoch,
    #[error(
        "the store is at epoch {now}, not {filed} as filed: nothing was advanced and the request is withdrawn; file a new one if it is still needed"
    )]
    EpochMoved { filed: u16, now: u16 },
    #[error(
        "the store now reports cluster ID {now}, not {filed} as filed (restored again?): nothing was advanced and the request is withdrawn; file a new one"
    )]
    ClusterChanged { filed: String, now: String },
    #[error("the epoch space is exhausted: no epoch above this one can be minted")]
    EpochSpaceExhausted,
    #[error(
        "this cluster is entity shard {shard}: its new epoch must come from the coord cluster's allocator, and lock-admin was not given the coord cluster (`--coord`); nothing was advanced"
    )]
    CoordRequired { shard: String },
    #[error(
        "the coord cluster's epoch allocator last handed out epoch {last}, below this cluster's epoch {from}: an epoch was taken outside the allocator, so the next one may be another cluster's already; nothing was advanced"
    )]
    AllocatorBehind { last: u16, from: u16 },
}

/// May `requester` file a release of `key` (held as `hold`)?
pub fn file_verdict(key: &str, reason: &str, hold: Option<&HoldView>) -> Result<(), Refusal> {
    lock_config::LockKey::parse(key).map_err(|e| Refusal::InvalidKey(e.to_string()))?;
    if reason.trim().is_empty() {
        return Err(Refusal::ReasonRequired);
    }
    if reason.len() > MAX_REASON {
        return Err(Refusal::ReasonTooLong);
    }
    if hold.is_none() {
        return Err(Refusal::NotHeld);
    }
    Ok(())
}

/// May `approver` approve `req` now, with the key held as `hold_now`?
pub fn approve_verdict(
    req: &ForceRequest,
    approver: &Operator,
    hold_now: Option<&HoldView>,
    now_ms: u64,
) -> Result<(), Refusal> {
    if approver.same_person(&req.requester) {
        return Err(Refusal::SamePerson);
    }
    if now_ms >= req.expires_at_ms {
        return Err(Refusal::Expired);
    }
    match hold_now {
        None => Err(Refusal::HoldGone),
        Some(h) if h.revision != req.hold.revision => Err(Refusal::HoldChanged {
            requested: req.hold.revision,
            now: h.revision,
        }),
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(sub: &str) -> Operator {
        Operator {
            issuer: "https://idp".into(),
            subject: sub.into(),
            name: sub.into(),
        }
    }

    fn hold(revision: i64) -> HoldView {
        HoldView {
            revision,
            spiffe_id: "spiffe://td/ns/pay/sa/ledger".into(),
            session: "694d".into(),
            class: "ledger".into(),
            acquired_at_ms: 1,
        }
    }

    fn request() -> ForceRequest {
        ForceRequest {
            id: "f1".into(),
            key: "pay/ledger/1".into(),
            reason: "leaked by a stuck job".into(),
            revoke_session: false,
            requester: op("alice"),
            filed_at_ms: 1_000,
            expires_at_ms: 10_000,
            hold: hold(40),
            enforcement: "fenced".into(),
        }
    }

    type FileCase<'a> = (&'a str, &'a str, Option<&'a HoldView>, Result<(), Refusal>);
    type ApproveCase = (
        &'static str,
        Operator,
        Option<HoldView>,
        u64,
        Result<(), Refusal>,
    );

    #[test]
    fn filing_table() {
        let h = hold(40);
        let cases: Vec<FileCase> = vec![
            ("pay/ledger/1", "leak", Some(&h), Ok(())),
            ("pay/ledger/1", "  ", Some(&h), Err(Refusal::ReasonRequired)),
            ("pay/ledger/1", "leak", None, Err(Refusal::NotHeld)),
        ];
        for (key, reason, hold, want) in cases {
            assert_eq!(file_verdict(key, reason, hold), want, "{key} {reason:?}");
        }
        assert!(matches!(
            file_verdict("../etc", "leak", Some(&h)),
            Err(Refusal::InvalidKey(_))
        ));
        assert_eq!(
            file_verdict("pay/ledger/1", &"x".repeat(MAX_REASON + 1), Some(&h)),
            Err(Refusal::ReasonTooLong)
        );
    }

    #[test]
    fn approval_table() {
        let req = request();
        let same_sub_other_name = Operator {
            name: "Alice (laptop)".into(),
            ..op("alice")
        };
        let cases: Vec<ApproveCase> = vec![
            (
                "a second operator, same hold",
                op("bob"),
                Some(hold(40)),
                5_000,
                Ok(()),
            ),
            (
                "the requester",
                op("alice"),
                Some(hold(40)),
                5_000,
                Err(Refusal::SamePerson),
            ),
            (
                "the requester under another display name",
                same_sub_other_name,
                Some(hold(40)),
                5_000,
                Err(Refusal::SamePerson),
            ),
            (
                "same subject at another issuer is another person",
                Operator {
                    issuer: "https://other-idp".into(),
                    ..op("alice")
                },
                Some(hold(40)),
                5_000,
                Ok(()),
            ),
            (
                "expired",
                op("bob"),
                Some(hold(40)),
                10_000,
                Err(Refusal::Expired),
            ),
            (
                "re-granted since (handoff or new grant)",
                op("bob"),
                Some(hold(52)),
                5_000,
                Err(Refusal::HoldChanged {
                    requested: 40,
                    now: 52,
                }),
            ),
            (
                "released since",
                op("bob"),
                None,
                5_000,
                Err(Refusal::HoldGone),
            ),
        ];
        for (name, approver, now, at, want) in cases {
            assert_eq!(
                approve_verdict(&req, &approver, now.as_ref(), at),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn advisory_and_unknown_classes_warn() {
        assert_eq!(warning("fenced"), None);
        assert!(warning("advisory").is_some_and(|w| w.contains("two writers")));
        assert!(warning("unknown").is_some_and(|w| w.contains("two writers")));
    }

    #[test]
    fn the_record_names_both_people_and_the_hold() {
        let r = ForceRecord::of(&request(), &op("bob"), 7);
        assert_eq!(r.requester.subject, "alice");
        assert_eq!(r.approver.subject, "bob");
        assert_eq!(r.hold_revision, 40);
        assert_eq!(r.executed_at_ms, 7);
    }
}
