//! Settling a grant attempt whose answer was lost (issue 34): its transaction may still be
//! applied long after (held in a member cut from the leader), so before the wait answers
//! anything, one transaction puts the attempt's own fence `/x/<session>/<nonce>`, which the
//! attempt compares absent, and reads the holder back. After it the attempt has either
//! committed or never will; [`settled`] says which, on plain data.

use super::{Claimant, Granter, HolderSeen, Verdict, holder_seen};
use crate::error::ArbiterError;
use crate::lock::sessions::Session;
use crate::store::layout::session_key;
use crate::store::{Sealed, TxnBuilder};
use etcd_client::{Compare, CompareOp, KeyValue};
use lock_store::{Malformed, StoreError};

/// Settlements tried for one attempt whose answer was lost, each bounded by the store
/// timeout. A new try may reach another member (etcd-client balances over the endpoints),
/// which is how a settlement gets past the member that holds the attempt.
pub const SETTLE_TRIES: usize = 3;

/// What a settlement transaction returned (it puts the attempt's fence if absent and the
/// session still bound, and reads the holder either way).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettleSeen {
    /// Its compares held: the fence is now in the store (put by this settlement).
    pub fenced_now: bool,
    /// Else: the fence was already there (an earlier try of this settlement committed).
    pub fence_present: bool,
    /// Else: the session record's create revision, if it is still there.
    pub session_create_revision: Option<i64>,
    pub holder: Option<HolderSeen>,
}

/// What a settled attempt means. Once the fence is in the store the attempt can never
/// commit, so the holder read in the same transaction is the whole truth: this session's
/// (the attempt committed, or a release handed the key on to it: held either way) or not
/// (the attempt did not commit and never will; the store was unreachable: NO_QUORUM, a
/// definite refusal now). A session that is gone can hold nothing, and its lease is gone,
/// so no put on it can commit.
pub fn settled(claimant: &Claimant<'_>, seen: &SettleSeen) -> Result<Verdict, ArbiterError> {
    let fenced = seen.fenced_now || seen.fence_present;
    if !fenced && seen.session_create_revision != Some(claimant.session_create_revision) {
        return Ok(Verdict::SessionGone);
    }
    if !fenced {
        return Err(ArbiterError::Store(StoreError::Malformed(
            Malformed::SettleUnfenced,
        )));
    }
    match &seen.holder {
        Some(h) if h.session.as_deref() == Some(claimant.lease_hex) => Ok(Verdict::Granted {
            revision: h.mod_revision,
        }),
        _ => Err(ArbiterError::NoQuorum),
    }
}

impl Granter<'_> {
    /// Settles an attempt whose answer was lost: puts its fence `x` (on the session's
    /// lease, so it goes with the session) unless it is there, reading the holder in the
    /// same transaction; tried [`SETTLE_TRIES`] times, then the attempt stays in doubt.
    pub(crate) async fn settle(
        &self,
        sealed: &Sealed,
        session: &Session,
        claimant: &Claimant<'_>,
        hkey: &str,
        x: &str,
    ) -> Result<Verdict, ArbiterError> {
        let skey = session_key(session.lease);
        for _ in 0..SETTLE_TRIES {
            let mut t = TxnBuilder::new();
            t.when(
                "attempt-fence-absent",
                Compare::create_revision(x, CompareOp::Equal, 0),
            )
            .when(
                "session",
                Compare::create_revision(skey.as_str(), CompareOp::Equal, session.create_revision),
            );
            t.put(x, "", Some(session.lease));
            let holder_then = t.then_read(hkey);
            let holder = t.read(hkey);
            let fence = t.read(x);
            let bound = t.read(&skey);
            let resp = match sealed.txn_batched(t).await {
                Ok(r) => r,
                Err(ArbiterError::NoQuorum) => continue,
                Err(e) => return Err(e),
            };
            let seen = if resp.succeeded() {
                SettleSeen {
                    fenced_now: true,
                    fence_present: false,
                    session_create_revision: Some(session.create_revision),
                    holder: resp.kv(holder_then).map(holder_seen),
                }
            } else {
                SettleSeen {
                    fenced_now: false,
                    fence_present: resp.kv(fence).is_some(),
                    session_create_revision: resp.kv(bound).map(KeyValue::create_revision),
                    holder: resp.kv(holder).map(holder_seen),
                }
            };
            let verdict = settled(claimant, &seen);
            crate::ops::metrics::METRICS.settled(match &verdict {
                Ok(Verdict::Granted { .. }) => "committed",
                Ok(Verdict::SessionGone) => "session_gone",
                _ => "not_committed",
            });
            return verdict;
        }
        crate::ops::metrics::METRICS.settled("in_doubt");
        // No key, identity or session in the log, as in the spans (ADR-22); the counter
        // says how often, the caller's answer says to whom.
        tracing::warn!(
            "a grant attempt's answer was lost and could not be settled: answered NO_QUORUM, it may still take effect"
        );
        Err(ArbiterError::GrantInDoubt)
    }
}
