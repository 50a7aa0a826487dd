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
use crate::lock::grant::{Claimant, Grant, Granter, claimant, holder_record, holder_seen, mint};
use crate::lock::grant::{MAX_ATTEMPTS, Verdict, reseal_once};
use crate::lock::sessions::Session;
use crate::lock::wait::release_watch::{self, Wake};
use crate::lock::wait::wait_end::WaitEnd;
use crate::ops::bugs::Bug;
use crate::store::layout::{EPOCH_KEY, attempt_fence_key, encode, holder_key};
use crate::store::layout::{lease_hex, session_key, shared_hold_key, shared_holds_prefix};
use crate::store::layout::{writer_waiting_key, writers_waiting_prefix};
use crate::store::{Sealed, TxnBuilder};
use etcd_client::{Compare, CompareOp, KeyValue};
use lock_config::LockKey;
use lock_config::registry::ResolvedClass;
use std::time::Duration;

mod release;
mod verdict;
pub use release::{count, is_current, release};
pub use verdict::{Seen, SharedVerdict, exclusive_verdict, shared_verdict};

/// How a hold of a shared class is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    Exclusive,
    Shared,
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
    let mut txn = TxnBuilder::new();
    txn.when(
        "mark-absent",
        Compare::create_revision(mark.as_str(), CompareOp::Equal, 0),
    )
    .when(
        "session",
        Compare::create_revision(
            session_key(session.lease).as_str(),
            CompareOp::Equal,
            session.create_revision,
        ),
    );
    txn.put(&mark, "", Some(session.lease));
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
        "attempt-fence-absent",
        Compare::create_revision(fence.as_str(), CompareOp::Equal, 0),
    )
    .when(
        "holder-absent",
        Compare::create_revision(hkey.as_str(), CompareOp::Equal, 0),
    )
    .when_some("shard-fence", epoch.fence_compare());
    let record = encode(&holder_record(session, class));
    let written = match mode {
        Mode::Shared => {
            if !granter.bugs.has(Bug::SharedIgnoresWriter) {
                t.when("no-writer-waiting", range_empty(&writers));
            }
            t.when(
                "own-absent",
                Compare::create_revision(own.as_str(), CompareOp::Equal, 0),
            );
            t.put(&own, record, Some(session.lease));
            own.clone()
        }
        Mode::Exclusive => {
            t.when("no-shared-hold", range_empty(&readers));
            t.put(&hkey, record, Some(session.lease));
            t.delete(&mark);
            hkey.clone()
        }
    };
    let holder = t.read(&hkey);
    let epoch_read = t.read(EPOCH_KEY);
    let session_read = t.read(&skey);
    // Read back: a shared ask, its own record (a retry), then the first writer's mark; an
    // exclusive ask, the first shared hold.
    let (shared, writer) = match mode {
        Mode::Shared => (t.read(&own), Some(t.read_first(&writers))),
        Mode::Exclusive => (t.read_first(&readers), None),
    };
    let fence_read = epoch.fence_key().map(|k| t.read(k));
    let resp = match sealed.txn_creating(t, &written).await {
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
    let read_at = resp.revision().unwrap_or(0);
    if resp.succeeded() {
        return Ok(SharedVerdict::Granted { revision: read_at });
    }
    let fence_unchanged = epoch.fence_unchanged(fence_read.and_then(|r| resp.kv(r)));
    let seen = Seen {
        epoch_mod_revision: resp
            .kv(epoch_read)
            .filter(|_| fence_unchanged)
            .map(KeyValue::mod_revision),
        session_create_revision: resp.kv(session_read).map(KeyValue::create_revision),
        holder: resp.kv(holder).map(holder_seen),
        read_at,
        shared: resp.kv(shared).map(|kv| (key_str(kv), holder_seen(kv))),
        writer_waiting: writer
            .and_then(|r| resp.kv(r))
            .map(|kv| (key_str(kv), kv.lease())),
    };
    Ok(match mode {
        Mode::Shared => shared_verdict(claimant, &seen),
        Mode::Exclusive => exclusive_verdict(claimant, &seen),
    })
}

/// No key under `prefix` (a range compare: true when every key in the range has create
/// revision 0, which for an empty range etcd compares against a key that does not exist).
fn range_empty(prefix: &str) -> Compare {
    Compare::create_revision(prefix, CompareOp::Equal, 0).with_prefix()
}
