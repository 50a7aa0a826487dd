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
use crate::store::Sealed;
use crate::store::layout::{EPOCH_KEY, attempt_fence_key, encode, holder_key};
use crate::store::layout::{lease_hex, session_key};
use etcd_client::{Compare, CompareOp, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse};
use lock_config::registry::ResolvedClass;
use lock_config::{FencingToken, KeySet};
use std::time::Duration;

mod verdict;
pub use verdict::{SetSeen, SetVerdict, releasable, verdict};

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
    let skey = session_key(session.lease);
    let fence = attempt_fence_key(session.lease, rand::random());
    let epoch = sealed.epoch();
    let mut compares = vec![
        Compare::mod_revision(EPOCH_KEY, CompareOp::Equal, claimant.epoch_mod_revision),
        Compare::create_revision(skey.as_str(), CompareOp::Equal, session.create_revision),
        Compare::create_revision(fence.as_str(), CompareOp::Equal, 0),
    ];
    compares.extend(epoch.fence_compare());
    let skip = granter
        .bugs
        .has(crate::ops::bugs::Bug::SetWithoutOneCompare)
        .then(|| hkeys.len() - 1);
    for (i, h) in hkeys.iter().enumerate() {
        if Some(i) != skip {
            compares.push(Compare::create_revision(h.as_str(), CompareOp::Equal, 0));
        }
    }
    let success: Vec<TxnOp> = hkeys
        .iter()
        .zip(classes)
        .map(|(h, class)| {
            TxnOp::put(
                h.as_str(),
                encode(&holder_record(session, class)),
                Some(PutOptions::new().with_lease(session.lease)),
            )
        })
        .collect();
    let mut failure: Vec<TxnOp> = hkeys.iter().map(|h| TxnOp::get(h.as_str(), None)).collect();
    failure.push(TxnOp::get(EPOCH_KEY, None));
    failure.push(TxnOp::get(skey.as_str(), None));
    failure.extend(epoch.fence_read());
    let txn = Txn::new().when(compares).and_then(success).or_else(failure);
    let resp = match sealed.txn_creating_all(txn, &hkeys).await {
        Ok(r) => r,
        // The outcome is unknown: settle it as a single grant is settled (put the fence
        // the transaction compares absent), then the records are the whole answer.
        Err(ArbiterError::NoQuorum) => {
            return settle(granter, sealed, session, claimant, &hkeys, &fence).await;
        }
        Err(e) => return Err(e),
    };
    let read_at = resp.header().map(|h| h.revision());
    if resp.succeeded() {
        return Ok(verdict(
            claimant,
            &SetSeen::Committed {
                revision: read_at.unwrap_or(0),
            },
        ));
    }
    let ops = resp.op_responses();
    let got = |i: usize| -> Option<&KeyValue> {
        match ops.get(i) {
            Some(TxnOpResponse::Get(g)) => g.kvs().first(),
            _ => None,
        }
    };
    let n = hkeys.len();
    let fence_unchanged = epoch.fence_unchanged(got(n + 2));
    let seen = SetSeen::Refused {
        holders: (0..n).map(|i| got(i).map(holder_seen)).collect(),
        epoch_mod_revision: got(n)
            .filter(|_| fence_unchanged)
            .map(KeyValue::mod_revision),
        session_create_revision: got(n + 1).map(KeyValue::create_revision),
        read_at,
    };
    Ok(verdict(claimant, &seen))
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
    let txn = Txn::new().and_then(
        hkeys
            .iter()
            .map(|h| TxnOp::get(h.as_str(), None))
            .collect::<Vec<_>>(),
    );
    let resp = sealed.txn(txn).await?;
    let holders: Vec<Option<HolderSeen>> = resp
        .op_responses()
        .iter()
        .map(|op| match op {
            TxnOpResponse::Get(g) => g.kvs().first().map(holder_seen),
            _ => None,
        })
        .collect();
    let seen = SetSeen::Refused {
        epoch_mod_revision: Some(claimant.epoch_mod_revision),
        session_create_revision: Some(claimant.session_create_revision),
        holders,
        read_at: resp.header().map(|h| h.revision()),
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
        let mut reads: Vec<TxnOp> = hkeys.iter().map(|h| TxnOp::get(h.as_str(), None)).collect();
        reads.push(TxnOp::get(EPOCH_KEY, None));
        let resp = match sealed.txn(Txn::new().and_then(reads)).await {
            Ok(r) => r,
            Err(e) => {
                sealed = reseal_once(store, e, attempt).await?;
                continue;
            }
        };
        let ops = resp.op_responses();
        let got = |i: usize| -> Option<&KeyValue> {
            match ops.get(i) {
                Some(TxnOpResponse::Get(g)) => g.kvs().first(),
                _ => None,
            }
        };
        if got(hkeys.len()).map(KeyValue::mod_revision) != Some(epoch.mod_revision) {
            sealed = store.resealed().await?;
            fresh = true;
            continue;
        }
        let holders: Vec<Option<(HolderSeen, Option<i64>)>> = (0..hkeys.len())
            .map(|i| got(i).map(|kv| (holder_seen(kv), Some(kv.lease()))))
            .collect();
        let ending = releasable(&holders, revision, lease, identity);
        if ending.is_empty() {
            return Err(ArbiterError::StaleToken);
        }
        let mut compares = vec![Compare::mod_revision(
            EPOCH_KEY,
            CompareOp::Equal,
            epoch.mod_revision,
        )];
        compares.extend(epoch.fence_compare());
        let mut deletes = Vec::with_capacity(ending.len());
        for &i in &ending {
            compares.push(Compare::mod_revision(
                hkeys[i].as_str(),
                CompareOp::Equal,
                revision,
            ));
            deletes.push(TxnOp::delete(hkeys[i].as_str(), None));
        }
        match sealed
            .txn(Txn::new().when(compares).and_then(deletes))
            .await
        {
            Ok(r) if r.succeeded() => {
                return Ok(SetReleased {
                    revision: r.header().map_or(0, |h| h.revision()),
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
