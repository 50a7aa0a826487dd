//! The two-person epoch advance (ADR-03) as plain data and pure decisions:
//!
//! ```text
//! file(from E, reason) by A   -> /sys/advance-request/<id> {E, the cluster ID the store reports}
//! approve(id) by B != A       -> the next epoch N: E+1 on a lone cluster; once there are
//!                                shards, from the coord cluster's allocator (its own
//!                                compare-and-put there, first)
//!                             -> one Txn: the epoch record is still the one read (E), the
//!                                request is still pending; put epoch {N, cluster ID,
//!                                advanced_by {A, B, reason}}, delete /l/ /q/ /r/ /p/, delete
//!                                the request
//! ```
//!
//! Which N is `lock_store::epoch::next`'s decision, the same as break-glass's: no two
//! clusters ever serve one epoch (ADR-03, 09).
//!
//! An advance ends every hold on the cluster, so no one person may run it: one operator
//! files, another approves, both signed in at the IdP with MFA (the force release's rules,
//! `oidc.rs`). etcd's roles are the second guard: the operator's role cannot write
//! `/sys/epoch`; lock-admin's can, and it runs only what a second person approved.
//! [`file_verdict`] and [`approve_verdict`] decide; `advance_store.rs` does the I/O.

use crate::oidc::Operator;
use crate::request::{MAX_REASON, Refusal};
use lock_store::epoch::next;
use lock_store::layout::AdvancedBy;
use serde::{Deserialize, Serialize};

/// A filed advance, waiting for a second operator (`/sys/advance-request/<id>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdvanceRequest {
    pub id: String,
    /// The epoch the store was at when filed: the approval advances from exactly it.
    pub from: u16,
    /// The etcd cluster ID the store reported when filed (after a restore, the new one).
    pub cluster_id: String,
    pub reason: String,
    pub requester: Operator,
    pub filed_at_ms: u64,
    pub expires_at_ms: u64,
}

/// The store as the approval finds it: its epoch and the cluster ID it reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreNow {
    pub epoch: u16,
    pub cluster_id: String,
}

/// How an operator is named in the epoch record and the audit row: by issuer and subject
/// (what tells people apart), with the display name for readers.
pub fn who(op: &Operator) -> String {
    format!("{} {} ({})", op.issuer, op.subject, op.name)
}

impl AdvanceRequest {
    /// The record's `advanced_by` once `approver` approves.
    pub fn advanced_by(&self, approver: &Operator) -> AdvancedBy {
        AdvancedBy {
            request: self.id.clone(),
            reason: self.reason.clone(),
            requester: who(&self.requester),
            approver: who(approver),
            break_glass: false,
        }
    }
}

/// May an advance from `from` be filed, with the store at `now` (None: no epoch record)?
pub fn file_verdict(from: u16, reason: &str, now: Option<&StoreNow>) -> Result<(), Refusal> {
    if reason.trim().is_empty() {
        return Err(Refusal::ReasonRequired);
    }
    if reason.len() > MAX_REASON {
        return Err(Refusal::ReasonTooLong);
    }
    match now {
        None => Err(Refusal::NoEpoch),
        Some(n) if n.epoch != from => Err(Refusal::EpochMoved {
            filed: from,
            now: n.epoch,
        }),
        Some(_) if from >= lock_config::token::MAX_EPOCH => Err(Refusal::EpochSpaceExhausted),
        Some(_) => Ok(()),
    }
}

/// May `approver` approve `req` now, with the store at `now`? A store that moved (another
/// epoch, or another cluster ID: restored again since the filing) withdraws the request:
/// what the first operator saw is no longer what would be advanced.
pub fn approve_verdict(
    req: &AdvanceRequest,
    approver: &Operator,
    now: Option<&StoreNow>,
    now_ms: u64,
) -> Result<(), Refusal> {
    if approver.same_person(&req.requester) {
        return Err(Refusal::SamePerson);
    }
    if now_ms >= req.expires_at_ms {
        return Err(Refusal::Expired);
    }
    match now {
        None => Err(Refusal::NoEpoch),
        Some(n) if n.epoch != req.from => Err(Refusal::EpochMoved {
            filed: req.from,
            now: n.epoch,
        }),
        Some(n) if n.cluster_id != req.cluster_id => Err(Refusal::ClusterChanged {
            filed: req.cluster_id.clone(),
            now: n.cluster_id.clone(),
        }),
        Some(_) => Ok(()),
    }
}

impl From<next::Refused> for Refusal {
    fn from(r: next::Refused) -> Self {
        match r {
            next::Refused::CoordRequired { shard } => Refusal::CoordRequired { shard },
            next::Refused::AllocatorBehind { last, from } => {
                Refusal::AllocatorBehind { last, from }
            }
            next::Refused::Exhausted => Refusal::EpochSpaceExhausted,
        }
    }
}

/// Whether a refusal means the request can never be approved (so it is withdrawn).
/// Not the epoch's source: lock-admin given `--coord`, or the allocator set right, lets it
/// run (and an advance by other means withdraws it as `EpochMoved`).
pub fn is_dead(refusal: &Refusal) -> bool {
    matches!(
        refusal,
        Refusal::EpochMoved { .. } | Refusal::ClusterChanged { .. } | Refusal::NoEpoch
    )
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

    fn store(epoch: u16, cluster: &str) -> StoreNow {
        StoreNow {
            epoch,
            cluster_id: cluster.into(),
        }
    }

    type FileCase = (u16, &'static str, Option<StoreNow>, Result<(), Refusal>);
    type ApproveCase = (
        &'static str,
        Operator,
        Option<StoreNow>,
        u64,
        Result<(), Refusal>,
    );

    fn request() -> AdvanceRequest {
        AdvanceRequest {
            id: "a1".into(),
            from: 3,
            cluster_id: "c2".into(),
            reason: "restored from last night's snapshot".into(),
            requester: op("alice"),
            filed_at_ms: 1_000,
            expires_at_ms: 10_000,
        }
    }

    #[test]
    fn filing_table() {
        let max = lock_config::token::MAX_EPOCH;
        let cases: Vec<FileCase> = vec![
            (3, "restore", Some(store(3, "c2")), Ok(())),
            (3, " ", Some(store(3, "c2")), Err(Refusal::ReasonRequired)),
            (3, "restore", None, Err(Refusal::NoEpoch)),
            (
                2,
                "restore",
                Some(store(3, "c2")),
                Err(Refusal::EpochMoved { filed: 2, now: 3 }),
            ),
            (
                max,
                "restore",
                Some(store(max, "c2")),
                Err(Refusal::EpochSpaceExhausted),
            ),
        ];
        for (from, reason, now, want) in cases {
            assert_eq!(
                file_verdict(from, reason, now.as_ref()),
                want,
                "{from} {reason:?}"
            );
        }
        assert_eq!(
            file_verdict(3, &"x".repeat(MAX_REASON + 1), Some(&store(3, "c2"))),
            Err(Refusal::ReasonTooLong)
        );
    }

    #[test]
    fn approval_table() {
        let req = request();
        let cases: Vec<ApproveCase> = vec![
            (
                "a second operator",
                op("bob"),
                Some(store(3, "c2")),
                5_000,
                Ok(()),
            ),
            (
                "the requester",
                op("alice"),
                Some(store(3, "c2")),
                5_000,
                Err(Refusal::SamePerson),
            ),
            (
                "the requester under another display name",
                Operator {
                    name: "Alice (laptop)".into(),
                    ..op("alice")
                },
                Some(store(3, "c2")),
                5_000,
                Err(Refusal::SamePerson),
            ),
            (
                "expired",
                op("bob"),
                Some(store(3, "c2")),
                10_000,
                Err(Refusal::Expired),
            ),
            (
                "advanced since (by another request or break-glass)",
                op("bob"),
                Some(store(4, "c2")),
                5_000,
                Err(Refusal::EpochMoved { filed: 3, now: 4 }),
            ),
            (
                "restored again since: another cluster ID",
                op("bob"),
                Some(store(3, "c3")),
                5_000,
                Err(Refusal::ClusterChanged {
                    filed: "c2".into(),
                    now: "c3".into(),
                }),
            ),
            (
                "the epoch record is gone",
                op("bob"),
                None,
                5_000,
                Err(Refusal::NoEpoch),
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
    fn only_a_store_that_moved_withdraws_the_request() {
        // The same person or an expiry leave it (a second operator may still come, or it
        // lapses); a store that moved never matches it again.
        for (r, dead) in [
            (Refusal::SamePerson, false),
            (Refusal::Expired, false),
            (Refusal::EpochMoved { filed: 3, now: 4 }, true),
            (
                Refusal::ClusterChanged {
                    filed: "c2".into(),
                    now: "c3".into(),
                },
                true,
            ),
            (Refusal::NoEpoch, true),
            (Refusal::CoordRequired { shard: "e1".into() }, false),
            (Refusal::AllocatorBehind { last: 3, from: 4 }, false),
        ] {
            assert_eq!(is_dead(&r), dead, "{r}");
        }
    }

    #[test]
    fn the_record_names_both_people_by_issuer_and_subject() {
        let by = request().advanced_by(&op("bob"));
        assert_eq!(by.requester, "https://idp alice (alice)");
        assert_eq!(by.approver, "https://idp bob (bob)");
        assert_eq!(by.request, "a1");
        assert!(!by.break_glass);
    }
}
