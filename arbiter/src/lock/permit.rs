//! Semaphores (issue 53): a `permits: N` class lets up to N sessions hold a key at once,
//! each on its own numbered permit `/p/<key>//<i>` (a holder record on its session lease).
//!
//! The grant is one transaction, like one key's (`grant.rs`): compare the epoch record
//! (and a shard's fence), the session still bound, the attempt's own fence `/x/…` absent,
//! permit `i` absent, and no permit of the key on this session's lease (a session holds at
//! most one) -> put permit `i`. Refused, it reads every permit back in the same round trip
//! and [`verdict()`] says what to do: this session's permit (a retried Acquire), a leak,
//! the lowest free permit to try next, or full (wait). The token is `epoch << 48 |` the
//! permit record's mod revision, so successive grants of one permit strictly increase; a
//! batch takes at most one permit grant per key (`writes` names the key's permits prefix),
//! so no two grants of a key share a revision and tokens are unique across its permits.
//!
//! Waiting is the FIFO queue of exclusive keys (`wait/fifo.rs`), watching the permits'
//! prefix; a release hands its permit to the head in its own transaction (`release.rs`).
//! A lost answer is settled as one key's (`grant/settle.rs`), on the permit it tried.

use crate::error::ArbiterError;
use crate::lock::grant::{
    Attempt, Grant, Granter, MAX_ATTEMPTS, Watch, claimant, holder_record, holder_seen, mint,
    reseal_once,
};
use crate::lock::sessions::Session;
use crate::ops::bugs::Bug;
use crate::store::layout::{
    EPOCH_KEY, attempt_fence_key, encode, lease_hex, permit_key, permit_of, permits_prefix,
    session_key,
};
use crate::store::{Sealed, TxnBuilder};
use etcd_client::{Compare, CompareOp, GetOptions, KeyValue};
use lock_config::registry::ResolvedClass;
use lock_config::{FencingToken, LockKey};

mod verdict;
pub use verdict::{PermitSeen, PermitTxnSeen, PermitVerdict, choose, verdict};

/// The permits of `prefix` among key-values (range reads of `/p/<key>//`).
pub fn permits_seen(prefix: &str, kvs: &[KeyValue]) -> Vec<PermitSeen> {
    kvs.iter()
        .filter_map(|kv| {
            Some(PermitSeen {
                permit: permit_of(prefix, kv.key())?,
                holder: holder_seen(kv),
            })
        })
        .collect()
}

/// One permit attempt, retried (bounded) while a permit seen free was taken meanwhile or
/// the epoch moved. Held: every permit was held (watch the permits' prefix).
pub async fn attempt(
    granter: &Granter<'_>,
    session: &Session,
    key: &LockKey,
    class: &ResolvedClass<'_>,
    n: u32,
) -> Result<Attempt, ArbiterError> {
    let store = granter.store;
    // The injected bug: one permit too many.
    let n = if granter.bugs.has(Bug::SemaphoreOverGrant) {
        n + 1
    } else {
        n
    };
    let mut sealed = store.sealed().await?;
    let mut try_permit = 0;
    for attempt in 0..MAX_ATTEMPTS + 1 {
        sealed = store.admit(sealed, key).await?;
        let lease = lease_hex(session.lease);
        let claimant = claimant(&sealed, session, &lease);
        let answer = try_grant(granter, &sealed, session, key, class, try_permit).await;
        let seen = match answer {
            Ok(seen) => seen,
            Err(e) => {
                sealed = reseal_once(store, e, attempt).await?;
                continue;
            }
        };
        match verdict(&claimant, &seen, n) {
            PermitVerdict::Granted { permit, revision } => {
                return granted(&sealed, revision, class, permit).map(Attempt::Granted);
            }
            PermitVerdict::Try { permit } => try_permit = permit,
            PermitVerdict::Full { at } => {
                return Ok(Attempt::Held {
                    revision: at,
                    watch: Watch::Permits,
                });
            }
            PermitVerdict::LeakedHold => return Err(ArbiterError::LeakedHold),
            PermitVerdict::SessionGone => {
                granter.sessions.forget(session.lease);
                return Err(ArbiterError::SessionNotFound);
            }
            PermitVerdict::EpochMoved => sealed = store.resealed().await?,
        }
    }
    // Each try lost its free permit to another grant: as good as full right now.
    Ok(Attempt::Held {
        revision: 0,
        watch: Watch::Permits,
    })
}

/// The permit `session` already holds of `key`, if any (one linearizable read).
pub async fn held_by(
    granter: &Granter<'_>,
    session: &Session,
    key: &LockKey,
    class: &ResolvedClass<'_>,
    n: u32,
) -> Result<Option<Grant>, ArbiterError> {
    let sealed = granter.store.sealed().await?;
    let prefix = permits_prefix(key);
    let resp = sealed
        .range(&prefix, Some(GetOptions::new().with_prefix()))
        .await?;
    let lease = lease_hex(session.lease);
    let claimant = claimant(&sealed, session, &lease);
    let read_at = resp.header().map_or(0, |h| h.revision());
    match choose(&claimant, &permits_seen(&prefix, resp.kvs()), n, read_at) {
        PermitVerdict::Granted { permit, revision } => {
            granted(&sealed, revision, class, permit).map(Some)
        }
        PermitVerdict::LeakedHold => Err(ArbiterError::LeakedHold),
        _ => Ok(None),
    }
}

fn granted(
    sealed: &Sealed,
    revision: i64,
    class: &ResolvedClass<'_>,
    permit: u32,
) -> Result<Grant, ArbiterError> {
    let mut grant = mint(sealed.epoch(), revision, class)?;
    grant.permit = Some(permit);
    Ok(grant)
}

async fn try_grant(
    granter: &Granter<'_>,
    sealed: &Sealed,
    session: &Session,
    key: &LockKey,
    class: &ResolvedClass<'_>,
    permit: u32,
) -> Result<PermitTxnSeen, ArbiterError> {
    let prefix = permits_prefix(key);
    let pkey = permit_key(key, permit);
    let skey = session_key(session.lease);
    let lease = lease_hex(session.lease);
    let claimant = claimant(sealed, session, &lease);
    let epoch = sealed.epoch();
    let fence = attempt_fence_key(session.lease, rand::random());
    let mut t = TxnBuilder::new();
    t.when(
        "epoch",
        Compare::mod_revision(EPOCH_KEY, CompareOp::Equal, claimant.epoch_mod_revision),
    )
    .when(
        "session",
        Compare::create_revision(skey.as_str(), CompareOp::Equal, session.create_revision),
    )
    .when(
        "permit-absent",
        Compare::create_revision(pkey.as_str(), CompareOp::Equal, 0),
    )
    // One permit per session: no permit of the key on this lease (a range compare: etcd
    // checks every key in it, and an empty range as one key with no lease).
    .when(
        "no-own-permit",
        Compare::lease(prefix.as_str(), CompareOp::NotEqual, session.lease).with_prefix(),
    )
    .when_some("shard-fence", epoch.fence_compare())
    .when(
        "attempt-fence-absent",
        Compare::create_revision(fence.as_str(), CompareOp::Equal, 0),
    );
    let record = encode(&holder_record(session, class));
    t.put(&pkey, record, Some(session.lease));
    // The prefix stands for every permit of the key in the batch's one-write-per-key rule:
    // two grants of one key never commit at one revision, so their tokens differ.
    t.claim(prefix.clone());
    let permits = t.read_prefix(&prefix);
    let epoch_read = t.read(EPOCH_KEY);
    let session_read = t.read(&skey);
    let fence_read = epoch.fence_key().map(|k| t.read(k));
    let resp = match sealed.txn_creating_batched(t, &pkey).await {
        Ok(r) => r,
        // The outcome is unknown: settle it on the permit it tried (`grant/settle.rs`).
        Err(ArbiterError::NoQuorum) => {
            return match granter
                .settle(sealed, session, &claimant, &pkey, &fence)
                .await?
            {
                crate::lock::grant::Verdict::Granted { revision } => {
                    Ok(PermitTxnSeen::Committed { permit, revision })
                }
                crate::lock::grant::Verdict::SessionGone => Ok(PermitTxnSeen::Refused {
                    epoch_mod_revision: Some(claimant.epoch_mod_revision),
                    session_create_revision: None,
                    permits: Vec::new(),
                    read_at: None,
                }),
                _ => Err(ArbiterError::NoQuorum),
            };
        }
        Err(e) => return Err(e),
    };
    let read_at = resp.revision();
    if resp.succeeded() {
        return Ok(PermitTxnSeen::Committed {
            permit,
            revision: read_at.unwrap_or(0),
        });
    }
    let fence_unchanged = epoch.fence_unchanged(fence_read.and_then(|r| resp.kv(r)));
    Ok(PermitTxnSeen::Refused {
        epoch_mod_revision: resp
            .kv(epoch_read)
            .filter(|_| fence_unchanged)
            .map(KeyValue::mod_revision),
        session_create_revision: resp.kv(session_read).map(KeyValue::create_revision),
        permits: permits_seen(&prefix, resp.kvs(permits)),
        read_at,
    })
}

/// The permit record a token names: the permit of `key` whose record was written at the
/// token's revision (None: no permit of the key is that grant now).
pub async fn record_of(
    sealed: &Sealed,
    key: &LockKey,
    token: FencingToken,
) -> Result<Option<(u32, KeyValue)>, ArbiterError> {
    let prefix = permits_prefix(key);
    let revision = i64::try_from(token.revision()).map_err(|_| ArbiterError::MalformedToken)?;
    let resp = sealed
        .range(&prefix, Some(GetOptions::new().with_prefix()))
        .await?;
    Ok(resp
        .kvs()
        .iter()
        .find(|kv| kv.mod_revision() == revision)
        .and_then(|kv| Some((permit_of(&prefix, kv.key())?, kv.clone()))))
}

/// Permits of `key` held now (Inspect).
pub async fn count(sealed: &Sealed, key: &LockKey) -> Result<usize, ArbiterError> {
    let prefix = permits_prefix(key);
    let resp = sealed
        .range(
            &prefix,
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await?;
    Ok(usize::try_from(resp.count()).unwrap_or(usize::MAX))
}
