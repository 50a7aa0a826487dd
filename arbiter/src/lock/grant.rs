//! The grant: one etcd transaction (DESIGN 4.2), and the pure verdict on what it returned.
//!
//! Compare `/sys/epoch` unchanged AND `/l/<key>` absent AND the session still bound (AND,
//! for a durable waiter, its queue entry still there) -> put the holder on the session
//! lease; else read the holder, the epoch record and the session back in the same round
//! trip, and [`verdict()`] decides what the refusal means. The token is
//! `epoch << 48 | revision` of the committing transaction (the holder record's mod
//! revision: a release may hand the key on by overwriting the record, `release.rs`); the store has checked the seal
//! on its header before the verdict is made. FIFO waiting (`fifo.rs`) and durable waiting
//! (`durable.rs`) both sit on [`Granter::attempt`], as etcd's v3lock sits on its Mutex.
//! The transaction itself is built without I/O in `request.rs`.
//!
//! An attempt whose answer is lost is settled before anything is answered (issue 34). Its
//! transaction may still be applied long after (the gate's bridge partition: held in a
//! member cut from the leader, applied 30 ms after the heal, after its waiter had been
//! handed the key and had released it: a hold on a session whose every request was
//! answered). So each attempt also compares its own fence `/x/<session>/<nonce>` absent,
//! and a lost answer is followed by one transaction that puts that fence and reads the
//! holder back: after it, the attempt has either committed (the holder is this session's)
//! or never will. A grant that commits pays one compare and no write; only a doubt pays a
//! write. A settlement that cannot be made is [`ArbiterError::GrantInDoubt`]: NO_QUORUM,
//! and the wait answers nothing definite after it (`waiter.rs`). A durable waiter's grant
//! needs no fence: it consumes its queue entry, which its leaving deletes.

use crate::error::ArbiterError;
use crate::lock::sessions::{Session, Sessions};
use crate::ops::bugs::{Bug, Bugs};
use crate::store::layout::{Holder, attempt_fence_key, holder_key, lease_hex};
use crate::store::{Sealed, Store};
use etcd_client::KeyValue;
use lock_config::registry::ResolvedClass;
use lock_config::{FencingToken, LockKey};
use request::{Ask, grant_txn};
use std::time::{SystemTime, UNIX_EPOCH};

mod verdict;
pub use verdict::{
    Claimant, HolderSeen, TxnSeen, Verdict, delay_seen, holder_seen, holder_verdict, mint, verdict,
};

/// Attempts per request when the epoch record moved or the key was released between the
/// compare and the classification read; bounded so a flapping store cannot spin a request.
pub const MAX_ATTEMPTS: usize = 3;

/// A successful grant.
#[derive(Debug, Clone)]
pub struct Grant {
    pub token: FencingToken,
    /// The revision of the write that made this session holder (= the token's revision):
    /// the holder record's mod revision.
    pub revision: i64,
    pub class: String,
    pub ttl_seconds: u32,
    /// A semaphore's permit (`permit.rs`); None for every other hold.
    pub permit: Option<u32>,
}

/// One grant attempt's result for a caller that may wait.
pub enum Attempt {
    Granted(Grant),
    /// Held by another session; the key was seen held at this revision: watch `watch`
    /// after it.
    Held {
        revision: i64,
        watch: Watch,
    },
}

/// What a waiter watches for the next change that may let it in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    /// The holder record `/l/<key>` (its delete).
    Holder,
    /// The key's lock-delay marker `/d/<key>`: not held, but in its delay (`delay.rs`).
    Delay,
    /// Every permit of a semaphore `/p/<key>//` (a delete of any).
    Permits,
}

/// A durable waiter's place `/q/<key>//<lease>`: the grant also requires it to still exist
/// (by its create revision) and deletes it in the same transaction.
#[derive(Debug, Clone)]
pub struct QueuePlace {
    pub key: String,
    pub create_revision: i64,
}

// ---- the transaction (I/O) -------------------------------------------------------------

/// What a grant needs: the sealed store and the session cache, nothing else of the engine.
pub struct Granter<'a> {
    pub store: &'a Store,
    pub sessions: &'a Sessions,
    pub bugs: &'a Bugs,
}

impl Granter<'_> {
    /// One grant attempt, retried (bounded) when the epoch moved or the key was released
    /// between compare and read. With `queued`, the grant also consumes that queue place.
    pub async fn attempt(
        &self,
        session: &Session,
        key: &LockKey,
        class: &ResolvedClass<'_>,
        queued: Option<&QueuePlace>,
    ) -> Result<Attempt, ArbiterError> {
        let mut sealed = self.store.sealed().await?;
        for attempt in 0..MAX_ATTEMPTS {
            // On an entity shard: the shard's own fence must place the key here, under
            // the record this attempt's transaction compares (`Store::admit`).
            sealed = self.store.admit(sealed, key).await?;
            match self.try_grant(&sealed, session, key, class, queued).await {
                Ok(Verdict::Granted { revision }) => {
                    return mint(sealed.epoch(), revision, class).map(Attempt::Granted);
                }
                Ok(Verdict::Held { at }) => {
                    return Ok(Attempt::Held {
                        revision: at,
                        watch: Watch::Holder,
                    });
                }
                Ok(Verdict::Delayed { at }) => {
                    return Ok(Attempt::Held {
                        revision: at,
                        watch: Watch::Delay,
                    });
                }
                Ok(Verdict::EndedUnreleased {
                    session,
                    marker_mod_revision,
                }) => {
                    let started = delay::start(&sealed, key, class, session, marker_mod_revision);
                    match started.await? {
                        Some(at) => {
                            return Ok(Attempt::Held {
                                revision: at,
                                watch: Watch::Delay,
                            });
                        }
                        // The marker moved (another attempt started the delay, or a
                        // release): look again.
                        None => sealed = self.store.sealed().await?,
                    }
                }
                Ok(Verdict::LeakedHold) => return Err(ArbiterError::LeakedHold),
                Ok(Verdict::SessionGone) => {
                    self.sessions.forget(session.lease);
                    return Err(ArbiterError::SessionNotFound);
                }
                Ok(Verdict::EpochMoved) => sealed = self.store.resealed().await?,
                Ok(Verdict::ReleasedMeanwhile) => sealed = self.store.sealed().await?,
                Err(e) => sealed = reseal_once(self.store, e, attempt).await?,
            }
        }
        Err(ArbiterError::Held)
    }

    /// The grant `session` already holds on `key`, if any (one linearizable read). Held by
    /// the same identity under another session: LEAKED_HOLD at once (ADR-13), whether or
    /// not others are queued — a queue must not turn a leak into a wait that ends HELD.
    pub async fn held_by(
        &self,
        session: &Session,
        key: &LockKey,
        class: &ResolvedClass<'_>,
    ) -> Result<Option<Grant>, ArbiterError> {
        let sealed = self.store.sealed().await?;
        let resp = sealed.get(&holder_key(key)).await?;
        let Some(kv) = resp.kvs().first() else {
            return Ok(None);
        };
        let lease = lease_hex(session.lease);
        let claimant = claimant(&sealed, session, &lease);
        match holder_verdict(&claimant, &holder_seen(kv), kv.mod_revision()) {
            Verdict::Granted { revision } => mint(sealed.epoch(), revision, class).map(Some),
            Verdict::LeakedHold => Err(ArbiterError::LeakedHold),
            _ => Ok(None),
        }
    }

    async fn try_grant(
        &self,
        sealed: &Sealed,
        session: &Session,
        key: &LockKey,
        class: &ResolvedClass<'_>,
        queued: Option<&QueuePlace>,
    ) -> Result<Verdict, ArbiterError> {
        let hkey = holder_key(key);
        let lease = lease_hex(session.lease);
        let claimant = claimant(sealed, session, &lease);
        let epoch = sealed.epoch();
        // The attempt's fence (a durable grant consumes its queue entry instead).
        let fence = (queued.is_none() && !self.bugs.has(Bug::GrantWithoutSettle))
            .then(|| attempt_fence_key(session.lease, rand::random()));
        let ask = Ask {
            epoch,
            session,
            key,
            class,
            queued,
            fence: fence.as_deref(),
        };
        let (txn, reads) = grant_txn(self.bugs, &ask);
        let resp = match sealed.txn_creating_batched(txn, &hkey).await {
            Ok(r) => r,
            // The injected bug (issue 34): a grant whose answer was lost read as a definite
            // "held", unsettled, though it may have committed (an arbiter etcd hears and
            // does not answer: the gate's arbiter-deaf).
            Err(ArbiterError::NoQuorum) if self.bugs.has(Bug::InDoubtGrantAsHeld) => {
                return Ok(Verdict::Held { at: 0 });
            }
            // The outcome is unknown: the transaction may have committed, or may yet.
            // Settle it: after that, the holder record is the whole answer.
            Err(ArbiterError::NoQuorum) if let Some(x) = &fence => {
                return self.settle(sealed, session, &claimant, &hkey, x).await;
            }
            // A durable grant (or the injected bug): read back before answering so a
            // committed grant is reported, not orphaned.
            Err(ArbiterError::NoQuorum) => {
                let back = sealed.get(&hkey).await?;
                return match back.kvs().first().map(holder_seen) {
                    Some(h) if h.session.as_deref() == Some(lease.as_str()) => {
                        Ok(Verdict::Granted {
                            revision: h.mod_revision,
                        })
                    }
                    // Not granted to us: it did not commit (or the session expired).
                    _ => Err(ArbiterError::NoQuorum),
                };
            }
            Err(e) => return Err(e),
        };
        let read_at = resp.revision();
        let seen = if resp.succeeded() {
            TxnSeen::Committed {
                revision: read_at.unwrap_or(0),
            }
        } else {
            // A moved fence is a moved epoch to the verdict: re-read both, try again.
            let fence_unchanged = epoch.fence_unchanged(reads.fence.and_then(|r| resp.kv(r)));
            TxnSeen::Refused {
                holder: resp.kv(reads.holder).map(holder_seen),
                epoch_mod_revision: resp
                    .kv(reads.epoch)
                    .filter(|_| fence_unchanged)
                    .map(KeyValue::mod_revision),
                session_create_revision: resp.kv(reads.session).map(KeyValue::create_revision),
                read_at,
                delay: reads.delay.and_then(|r| resp.kv(r)).map(delay_seen),
            }
        };
        Ok(verdict(&claimant, &seen))
    }
}

/// The holder record a grant to `session` writes (by its own transaction, or by the
/// release that hands the key on to it).
pub fn holder_record(session: &Session, class: &ResolvedClass<'_>) -> Holder {
    Holder {
        spiffe_id: session.spiffe_id.clone(),
        instance: session.instance.clone(),
        session: lease_hex(session.lease),
        class: class.name.to_owned(),
        acquired_at_ms: now_ms(),
    }
}

/// Who asks, as the verdicts see it: `session` under the epoch `sealed` has cached (the set
/// and shared grants build theirs here too).
pub(crate) fn claimant<'a>(
    sealed: &Sealed,
    session: &'a Session,
    lease_hex: &'a str,
) -> Claimant<'a> {
    Claimant {
        lease_hex,
        spiffe_id: &session.spiffe_id,
        instance: session.instance.as_deref(),
        session_create_revision: session.create_revision,
        epoch_mod_revision: sealed.epoch().mod_revision,
    }
}

/// A SEALED answer may come from a cached epoch record that an epoch advance has replaced:
/// on the first attempt, re-read the record (which checks the seal again) and let the
/// caller retry; any other error, or a second SEALED, is the answer.
pub async fn reseal_once(
    store: &Store,
    e: ArbiterError,
    attempt: usize,
) -> Result<Sealed, ArbiterError> {
    match e {
        ArbiterError::Sealed(_) if attempt == 0 => store.resealed().await,
        e => Err(e),
    }
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

mod delay;
mod request;
mod settle;

#[cfg(test)]
mod tests;
