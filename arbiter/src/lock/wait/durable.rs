//! Durable fairness (ADR-14, `fairness: durable`): waiters are keys
//! `/q/<key>//<lease-hex>` on the waiter's session lease, granted in create-revision order,
//! so the order survives an arbiter restart or a ring change. Two consensus writes per
//! waiter (enqueue; the grant transaction deletes the entry).
//!
//! The etcd concurrency recipe: each waiter watches only its predecessor (the entry with the
//! next lower create revision) and re-checks when it goes; the first waiter runs the grant
//! transaction, which also requires its own entry to still exist. Entries with a lower
//! create revision cannot appear later, so a waiter that is first stays first.
//!
//! Handoff (issue 18): a release of a durable key reads the first entry and, in its own
//! transaction, overwrites the holder record with that waiter's and deletes its entry, at
//! whatever arbiter the waiter waits (`release.rs`). The first waiter therefore watches
//! the holder record for overwrites as well as deletes, and finds the record its own.

use crate::error::{ArbiterError, Internal};
use crate::lock::grant::{Attempt, Grant, Granter, QueuePlace};
use crate::lock::sessions::Session;
use crate::lock::wait::release_watch::{self, Wake};
use crate::lock::wait::wait_end::WaitEnd;
use crate::lock::wait::waiter::{self, Event, Then, Transition};
use crate::ops::bugs::Bug;
use crate::store::layout::{QUEUE_PREFIX, holder_key, lease_hex, session_key};
use crate::store::{Sealed, Store, TxnBuilder};
use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, SortOrder, SortTarget};
use lock_config::LockKey;
use lock_config::registry::ResolvedClass;
use std::time::Duration;

mod head;
pub use head::{FirstWaiter, first_waiter};

/// Every durable waiter of `key`: `/q/<key>//`. After the key comes an empty segment, which
/// no key can have, so the prefix holds exactly this key's entries. (`/q/<key>/` also held
/// the waiters of every longer key under it: `pay/a`'s queue took `pay/a/b`'s waiters, and
/// its release handed `pay/a` to one of them.)
fn queue_prefix(key: &LockKey) -> String {
    format!("{QUEUE_PREFIX}{}//", key.as_str())
}

/// Durable waiters of `key`.
pub async fn waiters(sealed: &Sealed, key: &LockKey) -> Result<usize, ArbiterError> {
    let resp = sealed
        .range(
            &queue_prefix(key),
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await?;
    Ok(usize::try_from(resp.count()).unwrap_or(0))
}

/// Grants `key` to the session, waiting up to `wait` in the key's durable queue.
pub async fn acquire(
    granter: &Granter<'_>,
    session: &Session,
    key: &LockKey,
    class: &ResolvedClass<'_>,
    wait: Duration,
    drain: &crate::ops::drain::Drain,
) -> Result<Grant, ArbiterError> {
    let store = granter.store;
    let prefix = queue_prefix(key);
    // A retried Acquire whose first answer was lost gets its grant back rather than a
    // refusal or a place behind waiters for its own key (found by the release gate).
    if let Some(g) = Box::pin(granter.held_by(session, key, class)).await? {
        return Ok(g);
    }
    if wait.is_zero() {
        // A caller that will not wait must not overtake those who do: refused while anyone
        // is queued, even in the moment the key is free between two holders, and said so
        // (the release gate's model must not read it as "held").
        let queued = Box::pin(async { waiters(&store.sealed().await?, key).await }).await?;
        if queued > 0 {
            return Err(ArbiterError::Queued { waiters: queued });
        }
        return match Box::pin(granter.attempt(session, key, class, None)).await? {
            Attempt::Granted(g) => Ok(g),
            Attempt::Held { .. } => Err(ArbiterError::Held),
        };
    }
    // The wait ends (deadline or drain) only at a waiting point, never mid-transaction
    // (`wait_end.rs`).
    let end = WaitEnd::after_with(wait, drain, granter.bugs);
    // Every etcd call is boxed: this future lives as long as the wait, and inline it would
    // be as large as the largest of them (found by `make heap-profile`).
    let (mut entry, length) = Box::pin(enqueue(store, session, &prefix)).await?;
    if let Some(length) = length {
        crate::ops::metrics::METRICS.with_class(class.name, |m| {
            m.queue_length_on_join.observe(length as f64)
        });
    }
    let _leave = LeaveOnDrop {
        store: store.clone(),
        key: entry.key.clone(),
        _counted: crate::ops::metrics::GaugeGuard::new(&crate::ops::metrics::METRICS.queue_depth),
    };
    let line = InLine {
        granter,
        session,
        key,
        class,
        end: &end,
        prefix: &prefix,
    };
    match Box::pin(line.wait(&mut entry)).await {
        Ok(grant) => Ok(grant),
        // However the wait ended, a release may have handed the key on first: the same
        // ending as a FIFO wait's (`waiter.rs`), with the entry's delete as its withdrawal.
        Err(refusal) => Box::pin(leave(granter, session, key, class, &entry, refusal)).await,
    }
}

/// A durable waiter in its key's queue.
struct InLine<'a> {
    granter: &'a Granter<'a>,
    session: &'a Session,
    key: &'a LockKey,
    class: &'a ResolvedClass<'a>,
    end: &'a WaitEnd,
    prefix: &'a str,
}

impl InLine<'_> {
    /// Waits in line until granted; any other way out is the refusal to leave with.
    async fn wait(&self, entry: &mut QueuePlace) -> Result<Grant, ArbiterError> {
        let (granter, session, key, class) = (self.granter, self.session, self.key, self.class);
        let store = granter.store;
        let hkey = holder_key(key);
        loop {
            if let Some(ended) = self.end.passed() {
                return Err(ended.refusal());
            }
            let (predecessor, seen_at) =
                Box::pin(predecessor(store, self.prefix, entry.create_revision)).await?;
            let wake = match predecessor {
                Some(p) => release_watch::wait(store, &p, seen_at + 1, self.end).await,
                // First in line. A predecessor that just left was usually granted: read the
                // holder (a range, not a transaction) and watch it rather than attempt a
                // grant that cannot succeed, so each release still costs one grant attempt.
                None => match Box::pin(held_at(store, &hkey)).await? {
                    // A release handed the key on to this waiter: the grant is the record's.
                    Some((_, lease)) if lease == session.lease => {
                        match Box::pin(granter.held_by(session, key, class)).await? {
                            Some(g) => return Ok(g),
                            // Gone between the two reads (expired, or an advance): look again.
                            None => continue,
                        }
                    }
                    Some((revision, _)) => {
                        release_watch::wait_or_overwrite(store, &hkey, revision + 1, self.end).await
                    }
                    None => match Box::pin(granter.attempt(session, key, class, Some(entry))).await
                    {
                        Ok(Attempt::Granted(g)) => return Ok(g),
                        // A durable class has no lock-delay (registry validation).
                        Ok(Attempt::Held { revision, .. }) => {
                            release_watch::wait_or_overwrite(store, &hkey, revision + 1, self.end)
                                .await
                        }
                        // The key is free but the transaction keeps failing: our entry is
                        // gone. An epoch advance deletes every durable waiter (found by the
                        // release gate: the waiter answered HELD for a free key). Take a
                        // place again; the advance emptied the queue, so order restarts here.
                        Err(ArbiterError::Held)
                            if !Box::pin(entry_exists(store, entry)).await? =>
                        {
                            *entry = Box::pin(enqueue(store, session, self.prefix)).await?.0;
                            continue;
                        }
                        Err(e) => return Err(e),
                    },
                },
            };
            match wake {
                Wake::Released { .. } => {}
                Wake::Ended(ended) => return Err(ended.refusal()),
                Wake::Broken => {
                    let pause = tokio::time::sleep(release_watch::poll_interval());
                    if let Err(ended) = self.end.bound(pause).await {
                        return Err(ended.refusal());
                    }
                }
            }
        }
    }
}

/// The wait is over with `refusal`, driven by `waiter::step`: delete the entry (no handoff
/// can pick this waiter once the delete has committed), then read the holder record, since
/// a release may have handed the key on before: a grant the caller is told, not a hold left
/// behind it. A delete that fails is that error (NO_QUORUM, retryable): a retried Acquire
/// gets a handed-on grant back.
async fn leave(
    granter: &Granter<'_>,
    session: &Session,
    key: &LockKey,
    class: &ResolvedClass<'_>,
    entry: &QueuePlace,
    refusal: ArbiterError,
) -> Result<Grant, ArbiterError> {
    let Transition {
        mut state,
        mut then,
        ..
    } = waiter::end_with(refusal);
    loop {
        let event = match then {
            Then::Answer(result) => return result,
            Then::Withdraw => match delete(granter.store, &entry.key).await {
                Ok(()) => Event::Fenced,
                Err(e) => Event::Refused(e),
            },
            // The injected bug (issue 34): the refusal answered without looking whether a
            // release handed the key to this waiter first; its grant then outlives a
            // definite "no", which the handoff-race test and the gate catch.
            Then::ReadBack if granter.bugs.has(Bug::DurableLeaveWithoutReadBack) => {
                Event::ReadBack(None)
            }
            Then::ReadBack => match granter.held_by(session, key, class).await {
                Ok(grant) => Event::ReadBack(grant),
                Err(e) => Event::Refused(e),
            },
            other => {
                return Err(ArbiterError::Internal(Internal::NoDriver(format!(
                    "{other:?}"
                ))));
            }
        };
        Transition { state, then, .. } = waiter::step(state, event);
    }
}

async fn delete(store: &Store, key: &str) -> Result<(), ArbiterError> {
    store.sealed().await?.delete(key).await?;
    Ok(())
}

/// Puts this session's entry (if absent) on the session lease; returns it with its place.
///
/// The put is conditional on the session record too: a lease that expired since the
/// session was looked up makes etcd fail the whole request ("requested lease not found",
/// which reads as INTERNAL), while a failed compare is an answer: the session is gone
/// (SESSION_EXPIRED, as a grant's own session compare says). Seen under the gate's
/// arbiter-mute fault, whose renewals never arrive.
/// Joins the queue at `prefix`: the place, and the queue's length just after (itself
/// included; None for a place it already had), read in the same transaction.
async fn enqueue(
    store: &Store,
    session: &Session,
    prefix: &str,
) -> Result<(QueuePlace, Option<usize>), ArbiterError> {
    let key = format!("{prefix}{}", lease_hex(session.lease));
    let skey = session_key(session.lease);
    let mut txn = TxnBuilder::new();
    txn.when(
        "place-absent",
        Compare::create_revision(key.as_str(), CompareOp::Equal, 0),
    )
    .when(
        "session",
        Compare::create_revision(skey.as_str(), CompareOp::Equal, session.create_revision),
    );
    txn.put(&key, Vec::<u8>::new(), Some(session.lease));
    let queued = txn.then_count(prefix);
    let place = txn.read(&key);
    let resp = store.sealed().await?.txn(txn).await?;
    let length = resp.count(queued).and_then(|n| usize::try_from(n).ok());
    let create_revision = if resp.succeeded() {
        resp.revision().unwrap_or(0)
    } else {
        resp.kv(place).map_or(0, KeyValue::create_revision)
    };
    if create_revision == 0 {
        return Err(ArbiterError::SessionNotFound);
    }
    Ok((
        QueuePlace {
            key,
            create_revision,
        },
        length,
    ))
}

/// The waiter just ahead of `mine`, and the revision the read saw.
async fn predecessor(
    store: &Store,
    prefix: &str,
    mine: i64,
) -> Result<(Option<String>, i64), ArbiterError> {
    let opts = GetOptions::new()
        .with_prefix()
        .with_max_create_revision(mine - 1)
        .with_sort(SortTarget::Create, SortOrder::Descend)
        .with_limit(1)
        .with_keys_only();
    let resp = store.sealed().await?.range(prefix, Some(opts)).await?;
    let seen_at = resp.header().map_or(0, |h| h.revision());
    let pred = resp
        .kvs()
        .first()
        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned());
    Ok((pred, seen_at))
}

/// Whether this waiter's entry is still the one it created.
async fn entry_exists(store: &Store, entry: &QueuePlace) -> Result<bool, ArbiterError> {
    let resp = store.sealed().await?.get(&entry.key).await?;
    Ok(resp
        .kvs()
        .first()
        .is_some_and(|kv| kv.create_revision() == entry.create_revision))
}

/// The revision at which `hkey` was read held and the holder's lease, or None when free.
async fn held_at(store: &Store, hkey: &str) -> Result<Option<(i64, i64)>, ArbiterError> {
    let resp = store.sealed().await?.get(hkey).await?;
    Ok(resp
        .kvs()
        .first()
        .map(|kv| (resp.header().map_or(0, |h| h.revision()), kv.lease())))
}

/// A waiter that stops waiting (deadline, error, cancelled request) takes its entry out,
/// so it does not block the queue until its session ends.
struct LeaveOnDrop {
    store: Store,
    key: String,
    /// `lock_arbiter_queue_depth` counts this waiter while it waits.
    _counted: crate::ops::metrics::GaugeGuard,
}

impl Drop for LeaveOnDrop {
    fn drop(&mut self) {
        let (store, key) = (self.store.clone(), std::mem::take(&mut self.key));
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                if let Ok(sealed) = store.sealed().await {
                    let _ = sealed.delete(&key).await;
                }
            });
        }
    }
}
