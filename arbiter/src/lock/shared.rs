//! Shared holds (reader–writer, issue 35): keys of a `shared: true` class are held
//! `SHARED` by many sessions at once, or `EXCLUSIVE` by one, which excludes every shared
//! hold. Layout (`layout.rs`): the exclusive holder stays at `/l/<key>` as for every class;
//! each shared hold is `/r/<key>//s/<lease>`, and each exclusive waiter marks itself at
//! `/r/<key>//w/<lease>`, all on the session's lease.
//!
//! - A shared grant compares `/l/<key>` absent, **no exclusive waiter marked**, and its own
//!   shared record absent, beside the epoch record, the session and the attempt's fence.
//! - An exclusive grant compares `/l/<key>` absent and **no shared hold** (a range compare
//!   over `/r/<key>//s/`: etcd holds a compare over a range true only if it holds for every
//!   key in it, and for an empty range it compares a key that does not exist), and deletes
//!   its own waiter mark. Refused, it marks itself waiting before it waits.
//!
//! **Writers are not starved**: from the moment an exclusive waiter is marked, no new
//! shared hold is granted, so the shared holds drain and the writer gets in. Readers that
//! arrive meanwhile wait for the writer's mark to go (granted, then released, or gone with
//! its session or its wait). Among themselves, exclusive waiters of a shared class are not
//! queued in order: each tries again on every release it watches.
//!
//! **What a token fences.** A shared hold's token is `epoch << 48 | the revision of its own
//! grant`. An exclusive grant commits only after every shared hold before it has ended, so
//! the writer's token is above every earlier reader's; a reader granted after that writer
//! has a token above the writer's. A resource that records the last writer's token and
//! serves a read only under a token at least that one refuses a reader that was paused past
//! its session while a writer came and went.
//!
//! Waiting is a watch of the one record in the way (the exclusive holder, a shared hold, a
//! writer's mark) for its delete, from the revision it was seen at; every grant is a
//! transaction (ADR-15).

use crate::error::ArbiterError;
use crate::lock::grant::{
    Claimant, Grant, Granter, HolderSeen, claimant, holder_record, holder_seen, mint,
};
use crate::lock::grant::{MAX_ATTEMPTS, Verdict, reseal_once};
use crate::lock::sessions::Session;
use crate::lock::wait::release_watch::{self, Wake};
use crate::lock::wait::wait_end::WaitEnd;
use crate::ops::bugs::Bug;
use crate::store::Sealed;
use crate::store::layout::{EPOCH_KEY, Holder, attempt_fence_key, decode, encode, holder_key};
use crate::store::layout::{lease_hex, session_key, shared_hold_key, shared_holds_prefix};
use crate::store::layout::{writer_waiting_key, writers_waiting_prefix};
use etcd_client::TxnOpResponse;
use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, PutOptions, Txn, TxnOp};
use lock_config::registry::ResolvedClass;
use lock_config::{FencingToken, LockKey};
use std::time::Duration;

/// How a hold of a shared class is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    Exclusive,
    Shared,
}

// ---- the verdict, on plain data -------------------------------------------------------

/// What a refused grant transaction of a shared class read back.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Seen {
    pub epoch_mod_revision: Option<i64>,
    pub session_create_revision: Option<i64>,
    /// The exclusive holder, `/l/<key>`.
    pub holder: Option<HolderSeen>,
    /// A shared hold: the caller's own (a shared grant), else the first of the key's (an
    /// exclusive grant): its etcd key, and its record.
    pub shared: Option<(String, HolderSeen)>,
    /// The first exclusive waiter's mark (a shared grant): its etcd key and lease.
    pub writer_waiting: Option<(String, i64)>,
    pub read_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SharedVerdict {
    /// Granted at `revision` (a retried acquire whose answer was lost gets it back).
    Granted {
        revision: i64,
    },
    /// Wait for the record `watch` (None: the exclusive holder, `/l/<key>`) to be deleted,
    /// from revision `at`.
    Wait {
        watch: Option<String>,
        at: i64,
    },
    LeakedHold,
    /// This session's own exclusive-waiter mark stands while it asks SHARED: left by an
    /// exclusive wait of its that ended while the store could not take the mark's delete
    /// (found by `make soak`: the session was then told LEAKED_HOLD for a key it never
    /// held, and every new reader waited on the mark until the session ended). Delete it
    /// and try again.
    DropOwnMark {
        mark: String,
    },
    SessionGone,
    EpochMoved,
    /// What was in the way was gone by the read: try again.
    Again,
}

/// A refused shared grant: its own shared record means it was granted; then the exclusive
/// holder (this session's own: told LEAKED_HOLD), then a writer's mark, is what it waits
/// for.
pub fn shared_verdict(claimant: &Claimant<'_>, seen: &Seen) -> SharedVerdict {
    if let Some(v) = common(claimant, seen) {
        return v;
    }
    if let Some((_, own)) = &seen.shared
        && own.session.as_deref() == Some(claimant.lease_hex)
    {
        return SharedVerdict::Granted {
            revision: own.mod_revision,
        };
    }
    match exclusive_holder(claimant, seen) {
        // This session holds the key exclusive: a shared answer with that hold's token
        // would be released SHARED and refused, leaving the exclusive hold behind. It is
        // told LEAKED_HOLD, as a shared holder asking exclusive is: release it first.
        Some(SharedVerdict::Granted { .. }) => return SharedVerdict::LeakedHold,
        Some(v) => return v,
        None => {}
    }
    match &seen.writer_waiting {
        Some((mark, lease)) if lease_hex(*lease) == claimant.lease_hex => {
            SharedVerdict::DropOwnMark { mark: mark.clone() }
        }
        Some((mark, _)) => SharedVerdict::Wait {
            watch: Some(mark.clone()),
            at: seen.read_at,
        },
        None => SharedVerdict::Again,
    }
}

/// A refused exclusive grant of a shared class: the exclusive holder (this session's: the
/// grant exists), then any shared hold, is what it waits for.
pub fn exclusive_verdict(claimant: &Claimant<'_>, seen: &Seen) -> SharedVerdict {
    if let Some(v) = common(claimant, seen) {
        return v;
    }
    if let Some(v) = exclusive_holder(claimant, seen) {
        return v;
    }
    match &seen.shared {
        Some((_, h))
            if h.session.as_deref() == Some(claimant.lease_hex) || same_process(claimant, h) =>
        {
            SharedVerdict::LeakedHold
        }
        Some((record, _)) => SharedVerdict::Wait {
            watch: Some(record.clone()),
            at: seen.read_at,
        },
        None => SharedVerdict::Again,
    }
}

fn common(claimant: &Claimant<'_>, seen: &Seen) -> Option<SharedVerdict> {
    if seen.epoch_mod_revision != Some(claimant.epoch_mod_revision) {
        return Some(SharedVerdict::EpochMoved);
    }
    if seen.session_create_revision != Some(claimant.session_create_revision) {
        return Some(SharedVerdict::SessionGone);
    }
    None
}

fn same_process(claimant: &Claimant<'_>, h: &HolderSeen) -> bool {
    h.spiffe_id.as_deref() == Some(claimant.spiffe_id) && h.instance.as_deref() == claimant.instance
}

fn exclusive_holder(claimant: &Claimant<'_>, seen: &Seen) -> Option<SharedVerdict> {
    let h = seen.holder.as_ref()?;
    Some(
        match crate::lock::grant::holder_verdict(claimant, h, seen.read_at) {
            Verdict::Granted { revision } => SharedVerdict::Granted { revision },
            Verdict::LeakedHold => SharedVerdict::LeakedHold,
            _ => SharedVerdict::Wait {
                watch: None,
                at: seen.read_at,
            },
        },
    )
}

// ---- the transactions (I/O) ------------------------------------------------------------

/// Grants `key` (of a shared class) to the session in `mode`, waiting up to `wait`.
pub async fn acquire(
    granter: &Granter<'_>,
    session: &Session,
    key: &LockKey,
    class: &ResolvedClass<'_>,
    mode: Mode,
    wait: Duration,
    drain: &crate::ops::drain::Drain,
) -> Result<Grant, ArbiterError> {
    let end = WaitEnd::after_with(wait, drain, granter.bugs);
    let result = Box::pin(wait_loop(granter, session, key, class, mode, wait, &end)).await;
    if mode == Mode::Exclusive && result.is_err() {
        // Leaving without the key: the mark would hold readers off until the session ends.
        // The refusal is answered now; the delete is retried apart while the store is
        // unreachable (a refusal is often because it is).
        tokio::spawn(drop_mark(
            granter.store.clone(),
            writer_waiting_key(key, session.lease),
        ));
    }
    result
}

/// Tries of [`drop_mark`], and the pause before the first retry (doubling after it): about
/// 15 s in all, past a leader election; a mark outliving them goes with its session, or
/// with its own session's next shared ask (`DropOwnMark`).
const MARK_DELETE_TRIES: u32 = 6;
const MARK_DELETE_PAUSE: Duration = Duration::from_millis(250);

/// Deletes an exclusive waiter's mark, retried (bounded) while the store is unreachable.
async fn drop_mark(store: crate::store::Store, mark: String) {
    let mut pause = MARK_DELETE_PAUSE;
    for _ in 0..MARK_DELETE_TRIES {
        if let Ok(sealed) = store.sealed().await
            && sealed.delete(&mark).await.is_ok()
        {
            return;
        }
        tokio::time::sleep(pause).await;
        pause *= 2;
    }
    tracing::warn!("an exclusive waiter's mark could not be deleted; it ends with its session");
}

async fn wait_loop(
    granter: &Granter<'_>,
    session: &Session,
    key: &LockKey,
    class: &ResolvedClass<'_>,
    mode: Mode,
    wait: Duration,
    end: &WaitEnd,
) -> Result<Grant, ArbiterError> {
    let hkey = holder_key(key);
    let mut marked = false;
    loop {
        let (watch, at) = match Box::pin(attempt(granter, session, key, class, mode)).await? {
            Ok(grant) => return Ok(grant),
            Err((watch, at)) => (watch, at),
        };
        if wait.is_zero() {
            return Err(ArbiterError::Held);
        }
        if let Some(ended) = end.passed() {
            return Err(ended.refusal());
        }
        if mode == Mode::Exclusive && !marked {
            Box::pin(mark_waiting(granter, session, key)).await;
            marked = true;
        }
        let watch = watch.unwrap_or_else(|| hkey.clone());
        match Box::pin(release_watch::wait(granter.store, &watch, at, end)).await {
            Wake::Released { .. } => {}
            Wake::Ended(ended) => return Err(ended.refusal()),
            Wake::Broken => {
                let pause = tokio::time::sleep(release_watch::poll_interval());
                if let Err(ended) = end.bound(pause).await {
                    return Err(ended.refusal());
                }
            }
        }
    }
}

/// Marks `session` as an exclusive waiter of `key`, on its lease (best effort: a session
/// that is gone cannot be marked, and its next attempt says so).
async fn mark_waiting(granter: &Granter<'_>, session: &Session, key: &LockKey) {
    let mark = writer_waiting_key(key, session.lease);
    let txn = Txn::new()
        .when(vec![
            Compare::create_revision(mark.as_str(), CompareOp::Equal, 0),
            Compare::create_revision(
                session_key(session.lease).as_str(),
                CompareOp::Equal,
                session.create_revision,
            ),
        ])
        .and_then(vec![TxnOp::put(
            mark.as_str(),
            "",
            Some(PutOptions::new().with_lease(session.lease)),
        )]);
    if let Ok(sealed) = granter.store.sealed().await
        && let Err(e) = sealed.txn(txn).await
    {
        tracing::debug!(error = %e, "could not mark an exclusive waiter");
    }
}

/// One grant transaction, retried (bounded) when the epoch moved or the way cleared
/// between compare and read. Err((watch, at)): wait for `watch`'s delete (None: the
/// exclusive holder's) from `at`.
async fn attempt(
    granter: &Granter<'_>,
    session: &Session,
    key: &LockKey,
    class: &ResolvedClass<'_>,
    mode: Mode,
) -> Result<Result<Grant, (Option<String>, i64)>, ArbiterError> {
    let store = granter.store;
    let mut sealed = store.sealed().await?;
    for attempt in 0..MAX_ATTEMPTS {
        sealed = store.admit(sealed, key).await?;
        let lease = lease_hex(session.lease);
        let claimant = claimant(&sealed, session, &lease);
        match try_grant(granter, &sealed, session, &claimant, key, class, mode).await {
            Ok(SharedVerdict::Granted { revision }) => {
                return mint(sealed.epoch(), revision, class).map(Ok);
            }
            Ok(SharedVerdict::Wait { watch, at }) => return Ok(Err((watch, at))),
            Ok(SharedVerdict::LeakedHold) => return Err(ArbiterError::LeakedHold),
            Ok(SharedVerdict::DropOwnMark { mark }) => {
                // Only this session's own mark: a concurrent exclusive wait of the same
                // session loses its place ahead of new readers, which asking for both
                // modes at once has already given up.
                sealed.delete(&mark).await?;
                sealed = store.sealed().await?;
            }
            Ok(SharedVerdict::SessionGone) => {
                granter.sessions.forget(session.lease);
                return Err(ArbiterError::SessionNotFound);
            }
            Ok(SharedVerdict::EpochMoved) => sealed = store.resealed().await?,
            Ok(SharedVerdict::Again) => sealed = store.sealed().await?,
            Err(e) => sealed = reseal_once(store, e, attempt).await?,
        }
    }
    Err(ArbiterError::Held)
}

fn first_kv(ops: &[TxnOpResponse], i: usize) -> Option<&KeyValue> {
    match ops.get(i) {
        Some(TxnOpResponse::Get(g)) => g.kvs().first(),
        _ => None,
    }
}

fn key_str(kv: &KeyValue) -> String {
    String::from_utf8_lossy(kv.key()).into_owned()
}

async fn try_grant(
    granter: &Granter<'_>,
    sealed: &Sealed,
    session: &Session,
    claimant: &Claimant<'_>,
    key: &LockKey,
    class: &ResolvedClass<'_>,
    mode: Mode,
) -> Result<SharedVerdict, ArbiterError> {
    let hkey = holder_key(key);
    let skey = session_key(session.lease);
    let fence = attempt_fence_key(session.lease, rand::random());
    let epoch = sealed.epoch();
    let readers = shared_holds_prefix(key);
    let writers = writers_waiting_prefix(key);
    let own = shared_hold_key(key, session.lease);
    let mark = writer_waiting_key(key, session.lease);
    let mut compares = vec![
        Compare::mod_revision(EPOCH_KEY, CompareOp::Equal, claimant.epoch_mod_revision),
        Compare::create_revision(skey.as_str(), CompareOp::Equal, session.create_revision),
        Compare::create_revision(fence.as_str(), CompareOp::Equal, 0),
        Compare::create_revision(hkey.as_str(), CompareOp::Equal, 0),
    ];
    compares.extend(epoch.fence_compare());
    let record = encode(&holder_record(session, class));
    let on_lease = || Some(PutOptions::new().with_lease(session.lease));
    let first =
        |prefix: &str| TxnOp::get(prefix, Some(GetOptions::new().with_prefix().with_limit(1)));
    let (written, success, probe) = match mode {
        Mode::Shared => {
            if !granter.bugs.has(Bug::SharedIgnoresWriter) {
                compares.push(range_empty(&writers));
            }
            compares.push(Compare::create_revision(own.as_str(), CompareOp::Equal, 0));
            let put = TxnOp::put(own.as_str(), record, on_lease());
            // Read back: its own record (a retry), then the first writer's mark.
            (
                own.clone(),
                vec![put],
                vec![TxnOp::get(own.as_str(), None), first(&writers)],
            )
        }
        Mode::Exclusive => {
            compares.push(range_empty(&readers));
            let put = TxnOp::put(hkey.as_str(), record, on_lease());
            let unmark = TxnOp::delete(mark.as_str(), None);
            (hkey.clone(), vec![put, unmark], vec![first(&readers)])
        }
    };
    let mut failure = vec![
        TxnOp::get(hkey.as_str(), None),
        TxnOp::get(EPOCH_KEY, None),
        TxnOp::get(skey.as_str(), None),
    ];
    let probes = probe.len();
    failure.extend(probe);
    failure.extend(epoch.fence_read());
    let txn = Txn::new().when(compares).and_then(success).or_else(failure);
    let resp = match sealed.txn_creating(txn, &written).await {
        Ok(r) => r,
        // The outcome is unknown: settle it (its fence put), then the record is the answer.
        Err(ArbiterError::NoQuorum) => {
            return match granter
                .settle(sealed, session, claimant, &written, &fence)
                .await?
            {
                Verdict::Granted { revision } => Ok(SharedVerdict::Granted { revision }),
                Verdict::SessionGone => Ok(SharedVerdict::SessionGone),
                _ => Err(ArbiterError::NoQuorum),
            };
        }
        Err(e) => return Err(e),
    };
    let read_at = resp.header().map_or(0, |h| h.revision());
    if resp.succeeded() {
        return Ok(SharedVerdict::Granted { revision: read_at });
    }
    let ops = resp.op_responses();
    let fence_unchanged = epoch.fence_unchanged(first_kv(&ops, 3 + probes));
    let mut seen = Seen {
        epoch_mod_revision: first_kv(&ops, 1)
            .filter(|_| fence_unchanged)
            .map(KeyValue::mod_revision),
        session_create_revision: first_kv(&ops, 2).map(KeyValue::create_revision),
        holder: first_kv(&ops, 0).map(holder_seen),
        read_at,
        ..Seen::default()
    };
    Ok(match mode {
        Mode::Shared => {
            seen.shared = first_kv(&ops, 3).map(|kv| (key_str(kv), holder_seen(kv)));
            seen.writer_waiting = first_kv(&ops, 4).map(|kv| (key_str(kv), kv.lease()));
            shared_verdict(claimant, &seen)
        }
        Mode::Exclusive => {
            seen.shared = first_kv(&ops, 3).map(|kv| (key_str(kv), holder_seen(kv)));
            exclusive_verdict(claimant, &seen)
        }
    })
}

/// No key under `prefix` (a range compare: true when every key in the range has create
/// revision 0, which for an empty range etcd compares against a key that does not exist).
fn range_empty(prefix: &str) -> Compare {
    Compare::create_revision(prefix, CompareOp::Equal, 0).with_prefix()
}

/// Ends the shared hold `token` names: with a session, that session's record; without
/// (an operator's `lockctl release`), a record of the caller's identity whose grant it is.
pub async fn release(
    granter: &Granter<'_>,
    identity: &str,
    key: &LockKey,
    token: FencingToken,
    lease: Option<i64>,
) -> Result<i64, ArbiterError> {
    let store = granter.store;
    let revision = i64::try_from(token.revision()).map_err(|_| ArbiterError::MalformedToken)?;
    if let Some(lease) = lease {
        granter.sessions.owned(store, lease, identity).await?;
    }
    let mut sealed = store.sealed().await?;
    for attempt in 0..MAX_ATTEMPTS {
        let epoch = sealed.epoch();
        if token.epoch() != epoch.record.epoch {
            if attempt == 0 && token.epoch() > epoch.record.epoch {
                sealed = store.resealed().await?;
                continue;
            }
            return Err(ArbiterError::StaleToken);
        }
        let record = match lease {
            Some(lease) => shared_hold_key(key, lease),
            None => {
                let resp = sealed
                    .range(
                        &shared_holds_prefix(key),
                        Some(GetOptions::new().with_prefix()),
                    )
                    .await?;
                let mine = resp.kvs().iter().find(|kv| {
                    kv.mod_revision() == revision
                        && decode::<Holder>(kv.value()).is_some_and(|h| h.spiffe_id == identity)
                });
                match mine {
                    Some(kv) => key_str(kv),
                    None => return Err(ArbiterError::StaleToken),
                }
            }
        };
        let mut compares = vec![
            Compare::mod_revision(EPOCH_KEY, CompareOp::Equal, epoch.mod_revision),
            Compare::mod_revision(record.as_str(), CompareOp::Equal, revision),
        ];
        compares.extend(epoch.fence_compare());
        let txn = Txn::new()
            .when(compares)
            .and_then(vec![TxnOp::delete(record.as_str(), None)])
            .or_else(vec![TxnOp::get(EPOCH_KEY, None)]);
        match sealed.txn(txn).await {
            Ok(r) if r.succeeded() => return Ok(r.header().map_or(0, |h| h.revision())),
            Ok(r) => {
                let epoch_seen = first_kv(&r.op_responses(), 0).map(KeyValue::mod_revision);
                if epoch_seen == Some(epoch.mod_revision) {
                    return Err(ArbiterError::StaleToken);
                }
                sealed = store.resealed().await?;
            }
            Err(e) => sealed = reseal_once(store, e, attempt).await?,
        }
    }
    Err(ArbiterError::StaleToken)
}

/// Shared holds of `key` now.
pub async fn count(sealed: &Sealed, key: &LockKey) -> Result<usize, ArbiterError> {
    let resp = sealed
        .range(
            &shared_holds_prefix(key),
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await?;
    Ok(usize::try_from(resp.count()).unwrap_or(0))
}

/// Is a shared hold of `key` the grant at `revision` now (ValidateToken)?
pub async fn is_current(
    sealed: &Sealed,
    key: &LockKey,
    revision: i64,
) -> Result<bool, ArbiterError> {
    let resp = sealed
        .range(
            &shared_holds_prefix(key),
            Some(GetOptions::new().with_prefix().with_keys_only()),
        )
        .await?;
    Ok(resp.kvs().iter().any(|kv| kv.mod_revision() == revision))
}

#[cfg(test)]
mod tests;
