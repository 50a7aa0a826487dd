//! AcquireAll and ReleaseAll: a set of keys granted, and released, in one transaction.
//!
//! The grant compares every key absent, the epoch record (and a shard's fence), the
//! session's binding and the attempt's own fence `/x/…` (`grant.rs` says why), and puts
//! every holder record on the session's lease: all or nothing, at one revision, so every
//! key's token is `epoch << 48 | that revision`. Refused, it reads each key, the epoch
//! record and the session back in the same round trip, and [`verdict()`] says why.
//!
//! **Waiting cannot deadlock.** A set waiting holds nothing: it takes no key until it can
//! take them all in one transaction. Deadlock needs a party that holds one key while
//! waiting for another (Coffman's hold-and-wait); no set ever does, so {a,b} and {b,a}
//! asked at once cannot wait on each other, whatever the order. While some key is held,
//! the set watches that key's release (`release_watch.rs`, from the revision it saw it
//! held at, so no release in between is missed) and then tries the whole set again.
//!
//! **What it costs in fairness.** A set joins no key's FIFO queue: queues live in the
//! memory of the arbiter that owns each key, and a set's keys have different owners. A
//! release hands a key on to that key's queued head (`release.rs`) before any set can see
//! it free, so a set waiting on a key with a standing queue waits until the queue drains
//! or its own deadline passes (answered HELD, DEADLINE_EXCEEDED). That is the price of
//! taking nothing while waiting; a caller that must not starve takes its keys one by one
//! in key order (the classic deadlock-free order) and pays hold-while-waiting instead.
//!
//! The release compares each key still that grant (its mod revision is the token's, on
//! the caller's lease) and deletes them all. Keys of the set that already ended alone (a
//! Release of one key, a force release) are skipped, so the rest are not stranded until
//! the session ends; a set none of whose keys is still that grant is STALE_TOKEN.

use crate::error::ArbiterError;
use crate::lock::grant::{Claimant, HolderSeen, claimant, holder_record, holder_seen, reseal_once};
use crate::lock::grant::{Granter, MAX_ATTEMPTS};
use crate::lock::sessions::Session;
use crate::lock::wait::release_watch::{self, Wake};
use crate::lock::wait::wait_end::WaitEnd;
use crate::ops::bugs::{Bug, Bugs};
use crate::store::epoch::Epoch;
use crate::store::layout::{EPOCH_KEY, attempt_fence_key, encode, holder_key};
use crate::store::layout::{lease_hex, session_key};
use crate::store::txn::KeyRead;
use crate::store::{Sealed, TxnBuilder};
use etcd_client::{Compare, CompareOp, KeyValue};
use lock_config::registry::ResolvedClass;
use lock_config::{FencingToken, KeySet};
use std::time::Duration;

mod verdict;
pub use verdict::{SetSeen, SetVerdict, releasable, verdict};

#[cfg(test)]
mod tests;

// ---- the transactions (I/O) ------------------------------------------------------------

/// A granted set: its token (one for every key) and the revision it was made at.
#[derive(Debug, Clone, Copy)]
pub struct SetGrant {
    pub token: FencingToken,
    #[expect(dead_code, reason = "read by nothing in the crate (issue 51 item 4)")]
    pub revision: i64,
}

enum Tried {
    Granted(SetGrant),
    Held { index: usize, at: i64 },
}

/// Grants `set` to `session`, waiting up to `wait` (see the module's notes on waiting).
/// `classes` are the keys' classes in the set's order (each was checked to have the
/// session's TTL before this is called); each key's holder record names its own.
pub async fn acquire(
    granter: &Granter<'_>,
    session: &Session,
    set: &KeySet,
    classes: &[ResolvedClass<'_>],
    wait: Duration,
    drain: &crate::ops::drain::Drain,
) -> Result<SetGrant, ArbiterError> {
    let end = WaitEnd::after_with(wait, drain, granter.bugs);
    loop {
        let (index, at) = match Box::pin(attempt(granter, session, set, classes)).await? {
            Tried::Granted(g) => return Ok(g),
            Tried::Held { index, at } => (index, at),
        };
        if wait.is_zero() {
            return Err(ArbiterError::Held);
        }
        if let Some(ended) = end.passed() {
            return Err(ended.refusal());
        }
        let hkey = holder_key(&set.keys()[index]);
        match Box::pin(release_watch::wait(granter.store, &hkey, at, &end)).await {
            Wake::Released { .. } => {}
            Wake::Ended(ended) => return Err(ended.refusal()),
            // The watch could not be kept: look again after a pause (bounded by the end).
            Wake::Broken => {
                if let Err(ended) = end
                    .bound(tokio::time::sleep(release_watch::poll_interval()))
                    .await
                {
                    return Err(ended.refusal());
                }
            }
        }
    }
}

/// One grant transaction of the whole set, retried (bounded) when the epoch moved or the
/// keys were released between compare and read.
async fn attempt(
    granter: &Granter<'_>,
    session: &Session,
    set: &KeySet,
    classes: &[ResolvedClass<'_>],
) -> Result<Tried, ArbiterError> {
    let class = classes.first().ok_or(ArbiterError::NoClass)?;
    let store = granter.store;
    let mut sealed = store.sealed().await?;
    for attempt in 0..MAX_ATTEMPTS {
        for key in set.keys() {
            sealed = store.admit(sealed, key).await?;
        }
        let lease = lease_hex(session.lease);
        let claimant = claimant(&sealed, session, &lease);
        match try_grant(granter, &sealed, session, &claimant, set, classes).await {
            Ok(SetVerdict::Granted { revision }) => {
                let grant = crate::lock::grant::mint(sealed.epoch(), revision, class)?;
                return Ok(Tried::Granted(SetGrant {
                    token: grant.token,
                    revision,
                }));
            }
            Ok(SetVerdict::Held { index, at }) => return Ok(Tried::Held { index, at }),
            Ok(SetVerdict::LeakedHold) => return Err(ArbiterError::LeakedHold),
            Ok(SetVerdict::OwnHold) => {
                return Err(ArbiterError::KeySetRefused {
                    why: "own-hold",
                    detail: "this session already holds a key of the set (alone or in another set): a wait would wait on itself".into(),
                });
            }
            Ok(SetVerdict::SessionGone) => {
                granter.sessions.forget(session.lease);
                return Err(ArbiterError::SessionNotFound);
            }
            Ok(SetVerdict::EpochMoved) => sealed = store.resealed().await?,
            Ok(SetVerdict::ReleasedMeanwhile) => sealed = store.sealed().await?,
            Err(e) => sealed = reseal_once(store, e, attempt).await?,
        }
    }
    Err(ArbiterError::Held)
}

async fn try_grant(
    granter: &Granter<'_>,
    sealed: &Sealed,
    session: &Session,
    claimant: &Claimant<'_>,
    set: &KeySet,
    classes: &[ResolvedClass<'_>],
) -> Result<SetVerdict, ArbiterError> {
    let hkeys: Vec<String> = set.keys().iter().map(holder_key).collect();
    let fence = attempt_fence_key(session.lease, rand::random());
    let epoch = sealed.epoch();
    let (t, reads) = grant_txn(granter.bugs, epoch, session, &hkeys, classes, &fence);
    let resp = match sealed.txn_creating_all(t, &hkeys).await {
        Ok(r) => r,
        // The outcome is unknown: settle it as a single grant is settled (put the fence
        // the transaction compares absent), then the records are the whole answer.
        Err(ArbiterError::NoQuorum) => {
            return settle(granter, sealed, session, claimant, &hkeys, &fence).await;
        }
        Err(e) => return Err(e),
    };
    let read_at = resp.revision();
    if resp.succeeded() {
        return Ok(verdict(
            claimant,
            &SetSeen::Committed {
                revision: read_at.unwrap_or(0),
            },
        ));
    }
    let fence_unchanged = epoch.fence_unchanged(reads.fence.and_then(|r| resp.kv(r)));
    let seen = SetSeen::Refused {
        holders: reads
            .holders
            .iter()
            .map(|h| resp.kv(*h).map(holder_seen))
            .collect(),
        epoch_mod_revision: resp
            .kv(reads.epoch)
            .filter(|_| fence_unchanged)
            .map(KeyValue::mod_revision),
        session_create_revision: resp.kv(reads.session).map(KeyValue::create_revision),
        read_at,
    };
    Ok(verdict(claimant, &seen))
}

/// What a refused set grant reads back, by what it reads.
struct SetReads {
    /// Each key's holder, in the set's order.
    holders: Vec<KeyRead>,
    epoch: KeyRead,
    session: KeyRead,
    /// A shard's map fence.
    fence: Option<KeyRead>,
}

/// The set's grant transaction (no I/O, so a test can list what it compares): the epoch
/// record (and a shard's fence) unchanged, the session bound, the attempt's `fence`
/// absent and every key absent -> put every holder record on the session's lease; else
/// read every key, the epoch record and the session back.
fn grant_txn(
    bugs: &Bugs,
    epoch: &Epoch,
    session: &Session,
    hkeys: &[String],
    classes: &[ResolvedClass<'_>],
    fence: &str,
) -> (TxnBuilder, SetReads) {
    let skey = session_key(session.lease);
    let mut t = TxnBuilder::new();
    t.when(
        "epoch",
        Compare::mod_revision(EPOCH_KEY, CompareOp::Equal, epoch.mod_revision),
    )
    .when(
        "session",
        Compare::create_revision(skey.as_str(), CompareOp::Equal, session.create_revision),
    )
    .when(
        "attempt-fence-absent",
        Compare::create_revision(fence, CompareOp::Equal, 0),
    )
    .when_some("shard-fence", epoch.fence_compare());
    // The injected bug: the last key's compare left out.
    let skip = bugs
        .has(Bug::SetWithoutOneCompare)
        .then(|| hkeys.len().saturating_sub(1));
    for (i, h) in hkeys.iter().enumerate() {
        if Some(i) != skip {
            t.when(
                "holder-absent",
                Compare::create_revision(h.as_str(), CompareOp::Equal, 0),
            );
        }
    }
    for (h, class) in hkeys.iter().zip(classes) {
        t.put(
            h,
            encode(&holder_record(session, class)),
            Some(session.lease),
        );
    }
    let reads = SetReads {
        holders: hkeys.iter().map(|h| t.read(h)).collect(),
        epoch: t.read(EPOCH_KEY),
        session: t.read(&skey),
        fence: epoch.fence_key().map(|k| t.read(k)),
    };
    (t, reads)
}

/// A set grant whose answer was lost: the attempt's fence is put (through the one-key
/// settlement, on the set's first key), after which the attempt can never commit; then
/// every key is read, and only a set that is wholly this session's, from one transaction,
/// counts as granted. Anything else: the attempt did not commit (NO_QUORUM, definite).
async fn settle(
    granter: &Granter<'_>,
    sealed: &Sealed,
    session: &Session,
    claimant: &Claimant<'_>,
    hkeys: &[String],
    fence: &str,
) -> Result<SetVerdict, ArbiterError> {
    match granter
        .settle(sealed, session, claimant, &hkeys[0], fence)
        .await?
    {
        crate::lock::grant::Verdict::Granted { .. } => {}
        crate::lock::grant::Verdict::SessionGone => return Ok(SetVerdict::SessionGone),
        _ => return Err(ArbiterError::NoQuorum),
    }
    let mut t = TxnBuilder::new();
    let reads: Vec<KeyRead> = hkeys.iter().map(|h| t.then_read(h)).collect();
    let resp = sealed.txn(t).await?;
    let holders: Vec<Option<HolderSeen>> =
        reads.iter().map(|r| resp.kv(*r).map(holder_seen)).collect();
    let seen = SetSeen::Refused {
        epoch_mod_revision: Some(claimant.epoch_mod_revision),
        session_create_revision: Some(claimant.session_create_revision),
        holders,
        read_at: resp.revision(),
    };
    match verdict(claimant, &seen) {
        SetVerdict::Granted { revision } => Ok(SetVerdict::Granted { revision }),
        _ => Err(ArbiterError::NoQuorum),
    }
}

/// What a set's release ended: the revision of its delete and the keys it deleted.
#[derive(Debug, Clone)]
pub struct SetReleased {
    pub revision: i64,
    pub keys: Vec<String>,
}

/// Ends the set grant `token` names on every key of `set` still that grant.
pub async fn release(
    granter: &Granter<'_>,
    identity: &str,
    set: &KeySet,
    token: FencingToken,
    lease: Option<i64>,
) -> Result<SetReleased, ArbiterError> {
    let store = granter.store;
    let revision = i64::try_from(token.revision()).map_err(|_| ArbiterError::MalformedToken)?;
    if let Some(lease) = lease {
        granter.sessions.owned(store, lease, identity).await?;
    }
    let hkeys: Vec<String> = set.keys().iter().map(holder_key).collect();
    let mut sealed = store.sealed().await?;
    let mut fresh = false;
    for attempt in 0..MAX_ATTEMPTS {
        let epoch = sealed.epoch();
        if token.epoch() > epoch.record.epoch && !fresh {
            sealed = store.resealed().await?;
            fresh = true;
            continue;
        }
        if token.epoch() != epoch.record.epoch {
            return Err(ArbiterError::StaleToken);
        }
        // Read every key and the epoch record in one round trip, then end exactly the keys
        // still this grant, compared unchanged since that read.
        let mut t = TxnBuilder::new();
        let reads: Vec<KeyRead> = hkeys.iter().map(|h| t.then_read(h)).collect();
        let epoch_read = t.then_read(EPOCH_KEY);
        let resp = match sealed.txn(t).await {
            Ok(r) => r,
            Err(e) => {
                sealed = reseal_once(store, e, attempt).await?;
                continue;
            }
        };
        if resp.kv(epoch_read).map(KeyValue::mod_revision) != Some(epoch.mod_revision) {
            sealed = store.resealed().await?;
            fresh = true;
            continue;
        }
        let holders: Vec<Option<(HolderSeen, Option<i64>)>> = reads
            .iter()
            .map(|r| resp.kv(*r).map(|kv| (holder_seen(kv), Some(kv.lease()))))
            .collect();
        let ending = releasable(&holders, revision, lease, identity);
        if ending.is_empty() {
            return Err(ArbiterError::StaleToken);
        }
        let mut t = TxnBuilder::new();
        t.when(
            "epoch",
            Compare::mod_revision(EPOCH_KEY, CompareOp::Equal, epoch.mod_revision),
        )
        .when_some("shard-fence", epoch.fence_compare());
        for &i in &ending {
            t.when(
                "token",
                Compare::mod_revision(hkeys[i].as_str(), CompareOp::Equal, revision),
            );
            t.delete(&hkeys[i]);
        }
        match sealed.txn(t).await {
            Ok(r) if r.succeeded() => {
                return Ok(SetReleased {
                    revision: r.revision().unwrap_or(0),
                    keys: ending
                        .iter()
                        .map(|&i| set.keys()[i].as_str().to_owned())
                        .collect(),
                });
            }
            // Something changed since the read (an expiry, a force release, an epoch
            // advance): read again.
            Ok(_) => sealed = store.sealed().await?,
            Err(e) => sealed = reseal_once(store, e, attempt).await?,
        }
    }
    Err(ArbiterError::StaleToken)
}
