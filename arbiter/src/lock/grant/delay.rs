//! Lock-delay (issue 53): the start of a key's delay after a hold ended without a release.
//!
//! A class with `lockDelaySeconds` keeps a marker `/d/<key>` beside each hold, on no lease
//! (`layout::DELAY_PREFIX`). A release deletes both in one transaction. When a grant
//! attempt finds the holder gone and the marker still there, the hold ended some other way
//! (its session expired or was closed holding it, a force release, an epoch advance). This
//! transaction then moves the marker onto a fresh lease of the delay, only if it is
//! unchanged and the key still free; etcd deletes it when that lease ends, and every grant
//! compares it absent. So no arbiter grants the key inside the delay, whichever it is and
//! whether or not it restarted: the rule lives in etcd, not in an arbiter's memory.
//!
//! What it is not: exclusion. The delay counts from when an attempt *saw* the end (a
//! waiter sees it at once through its watch; with nobody waiting, the next acquire sees it
//! and waits the whole delay), so it is never shorter than the delay after the end, only
//! longer. A lease's TTL restarts in full when etcd's leader changes, which can only
//! lengthen it too. A holder frozen for longer than its TTL plus the delay still writes
//! late: that is what fenced classes are for.

use super::now_ms;
use crate::error::ArbiterError;
use crate::lock::sessions::grant_random_lease;
use crate::store::layout::{DelayMarker, delay_key, encode, holder_key};
use crate::store::{Sealed, TxnBuilder};
use etcd_client::{Compare, CompareOp};
use lock_config::LockKey;
use lock_config::registry::ResolvedClass;

/// Starts `key`'s delay: the marker, unchanged since `marker_mod_revision`, goes on a
/// lease of the class's delay. Some(revision): the delay runs from that revision's
/// commit. None: the marker or the holder moved meanwhile (another attempt started the
/// delay, or the key was granted): look again.
pub async fn start(
    sealed: &Sealed,
    key: &LockKey,
    class: &ResolvedClass<'_>,
    session: Option<String>,
    marker_mod_revision: i64,
) -> Result<Option<i64>, ArbiterError> {
    // Registry validation keeps the delay in 1..=TTL; a class without one never has a
    // marker to start from (its grants write none).
    let Some(seconds) = class.lock_delay_seconds() else {
        return Ok(None);
    };
    let lease = grant_random_lease(sealed, seconds, None).await?;
    let dkey = delay_key(key);
    let hkey = holder_key(key);
    let marker = DelayMarker {
        session: session.unwrap_or_default(),
        delay_from_ms: Some(now_ms()),
    };
    let mut txn = TxnBuilder::new();
    txn.when(
        "marker-unchanged",
        Compare::mod_revision(dkey.as_str(), CompareOp::Equal, marker_mod_revision),
    )
    .when(
        "holder-absent",
        Compare::create_revision(hkey.as_str(), CompareOp::Equal, 0),
    );
    txn.put(&dkey, encode(&marker), Some(lease));
    let committed = match sealed.txn(txn).await {
        Ok(r) if r.succeeded() => r.revision(),
        Ok(_) => None,
        Err(e) => {
            // Unknown outcome: if it committed, the marker is on the lease and the delay
            // runs; if not, the lease is unused. Either way the caller's next attempt
            // reads the marker again. The lease is left to expire (revoking it could end
            // a delay that did start).
            return Err(e);
        }
    };
    if committed.is_none() {
        // Nothing is on it: give it back rather than leave etcd a lease to expire.
        let _ = sealed.revoke(lease).await;
    }
    Ok(committed)
}
