//! Release: delete the holder only if it is still the same grant (its mod revision is the
//! token's revision) under the current epoch, in one transaction.
//!
//! With a session, the grant must be attached to it (a lease compare); without one (an
//! operator's `lockctl release`), the holder's identity must be the caller's: read first,
//! then the transaction compares the holder unchanged since that read.
//!
//! Handoff (issue 18): when the key's FIFO queue head waits at this arbiter, or (durable
//! class) the key's `/q/` queue has a first waiter anywhere, the same transaction instead
//! overwrites the holder record with the head's (and deletes a durable head's entry): one
//! consensus write ends one grant and makes the next (the transaction: `handoff.rs`).

use crate::error::ArbiterError;
use crate::lock::grant::QueuePlace;
use crate::lock::grant::{MAX_ATTEMPTS, now_ms, reseal_once};
use crate::lock::sessions::Sessions;
use crate::lock::wait::durable::FirstWaiter;
use crate::lock::wait::queue::{Handed, Offer, Queues};
use crate::ops::bugs::{Bug, Bugs};
use crate::store::layout::{
    EPOCH_KEY, Holder, decode, delay_key, holder_key, lease_hex, permit_key,
};
use crate::store::{Sealed, Store, TxnBuilder};
use etcd_client::{Compare, CompareOp, KeyValue};
use lock_config::{FencingToken, LockKey};

mod handoff;
mod verdict;
use handoff::handoff_txn;
use verdict::{HeadTold, Released, handoff_verdict, release_verdict, token_epoch_verdict};

/// A committed release: the revision of its write, and whether that write handed the key
/// on to this arbiter's queue head (then the key is held again, by the head).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub revision: i64,
    pub handed_on: bool,
}

/// Whom a release may hand the key on to, by the key's class.
pub enum Heads<'a> {
    /// Nobody: plain releases only.
    None,
    /// FIFO class: this arbiter's queue head, if it waits here (its offer).
    Fifo(&'a Queues),
    /// Durable class: the first entry of the key's `/q/` queue, wherever it waits; the
    /// class names the head's holder record.
    Durable { class: &'a str },
}

/// The waiter a handoff grants the key to.
struct Head {
    lease: i64,
    /// The create revision of its `/s/` binding (compared: a session that ended gets nothing).
    session_create_revision: i64,
    holder: Holder,
    /// Durable: its `/q/` entry, compared still there and deleted in the same transaction.
    entry: Option<QueuePlace>,
    /// FIFO: the waiting head's answer (a durable head reads the record itself).
    reply: Option<tokio::sync::oneshot::Sender<Handed>>,
}

impl Head {
    fn from_offer(offer: Offer) -> Self {
        Self {
            lease: offer.lease,
            session_create_revision: offer.session_create_revision,
            holder: offer.holder,
            entry: None,
            reply: Some(offer.reply),
        }
    }

    fn durable(first: FirstWaiter, class: &str) -> Self {
        Self {
            lease: first.lease,
            session_create_revision: first.session_create_revision,
            holder: Holder {
                spiffe_id: first.spiffe_id,
                instance: first.instance,
                session: lease_hex(first.lease),
                class: class.to_owned(),
                acquired_at_ms: 0,
            },
            entry: Some(first.entry),
            reply: None,
        }
    }

    fn tell(&mut self, handed: Handed) {
        if let Some(reply) = self.reply.take() {
            let _ = reply.send(handed);
        }
    }
}

/// What a handoff overwrites: the key's holder record, or the releaser's permit, while it
/// is still the releaser's grant.
#[derive(Clone, Copy)]
struct HandoffAt<'a> {
    key: &'a LockKey,
    hkey: &'a str,
    permit: Option<u32>,
    /// The releaser's grant: the record's mod revision (the token's) and its lease.
    revision: i64,
    lease: i64,
}

/// Where a release attempt stands among its retries.
#[derive(Debug, Clone, Copy)]
struct Round {
    /// The epoch was just re-read (see [`token_epoch_verdict`]).
    fresh: bool,
    /// The last attempt: a plain release, no handoff.
    last: bool,
}

impl Round {
    fn new(fresh: bool, attempt: usize) -> Self {
        Self {
            fresh,
            last: attempt + 1 >= MAX_ATTEMPTS,
        }
    }
}

pub struct Releaser<'a> {
    pub store: &'a Store,
    pub sessions: &'a Sessions,
    pub bugs: &'a Bugs,
    /// A head found here gets the key in the release's own transaction (one write for both).
    pub heads: Heads<'a>,
    /// The key's class has a lock-delay: a handoff moves the key's marker `/d/<key>` to
    /// the head (`grant/delay.rs`). Every release deletes the marker either way.
    pub delay: bool,
    /// The key is a semaphore's: the hold is the permit the token names (`permit.rs`), and
    /// a handoff gives the head that permit.
    pub permits: bool,
}

impl Releaser<'_> {
    /// Ends the grant `token` names; returns the revision of the write that ended it (the
    /// delete, or the handoff's overwrite).
    pub async fn release(
        &self,
        identity: &str,
        key: &LockKey,
        token: FencingToken,
        lease: Option<i64>,
    ) -> Result<Outcome, ArbiterError> {
        let mut sealed = self.store.sealed().await?;
        let mut fresh = false;
        for attempt in 0..MAX_ATTEMPTS {
            match self
                .try_release(
                    &sealed,
                    identity,
                    key,
                    token,
                    lease,
                    Round::new(fresh, attempt),
                )
                .await
            {
                Ok(Released::Done(revision)) => {
                    return Ok(Outcome {
                        revision,
                        handed_on: false,
                    });
                }
                Ok(Released::HandedOn(revision)) => {
                    return Ok(Outcome {
                        revision,
                        handed_on: true,
                    });
                }
                Ok(Released::Stale) => return Err(ArbiterError::StaleToken),
                Ok(Released::Retry) => {}
                Ok(Released::EpochMoved) => {
                    sealed = self.store.resealed().await?;
                    fresh = true;
                }
                Err(ArbiterError::NoQuorum) if self.bugs.has(Bug::ReleaseInDoubtAsReleased) => {
                    return Ok(Outcome {
                        revision: 0,
                        handed_on: false,
                    });
                }
                Err(e) => sealed = reseal_once(self.store, e, attempt).await?,
            }
        }
        Err(ArbiterError::StaleToken)
    }

    async fn try_release(
        &self,
        sealed: &Sealed,
        identity: &str,
        key: &LockKey,
        token: FencingToken,
        lease: Option<i64>,
        round: Round,
    ) -> Result<Released, ArbiterError> {
        let revision = i64::try_from(token.revision()).map_err(|_| ArbiterError::MalformedToken)?;
        let epoch = sealed.epoch();
        if let Err(not_now) = token_epoch_verdict(token.epoch(), epoch.record.epoch, round.fresh) {
            return Ok(not_now);
        }
        // The record the token names: the key's holder, or the semaphore's permit written
        // at the token's revision (none: that grant has ended).
        let (hkey, permit) = if self.permits {
            match crate::lock::permit::record_of(sealed, key, token).await? {
                Some((permit, _)) => (permit_key(key, permit), Some(permit)),
                None => return Ok(Released::Stale),
            }
        } else {
            (holder_key(key), None)
        };
        let hkey = hkey.as_str();
        let mut t = TxnBuilder::new();
        t.when(
            "epoch",
            Compare::mod_revision(EPOCH_KEY, CompareOp::Equal, epoch.mod_revision),
        )
        .when_some("shard-fence", epoch.fence_compare());
        let token_compare = !self.bugs.has(Bug::ReleaseWithoutTokenCompare);
        if token_compare {
            t.when(
                "token",
                Compare::mod_revision(hkey, CompareOp::Equal, revision),
            );
        }
        match lease {
            Some(lease) => {
                self.sessions.owned(self.store, lease, identity).await?;
                // The last attempt is a plain release: heads that keep leaving (deadlines,
                // ended sessions) must not use up the attempts of a live holder's release.
                let head = match &self.heads {
                    _ if round.last => None,
                    // A key in a moving range (or homed elsewhere) is not handed on: the
                    // grant a handoff is must pass the shard's fence like any other.
                    _ if !self.store.admits(sealed, key) => None,
                    Heads::None => None,
                    Heads::Fifo(queues) => queues.take_offer(key.as_str()).map(Head::from_offer),
                    Heads::Durable { class } => {
                        crate::lock::wait::durable::first_waiter(sealed, key)
                            .await?
                            .map(|first| Head::durable(first, class))
                    }
                };
                if let Some(head) = head {
                    let at = HandoffAt {
                        key,
                        hkey,
                        permit,
                        revision,
                        lease,
                    };
                    return self.try_handoff(sealed, at, head).await;
                }
                t.when("lease", Compare::lease(hkey, CompareOp::Equal, lease));
            }
            None => {
                let resp = sealed.get(hkey).await?;
                let kv = resp.kvs().first().ok_or(ArbiterError::StaleToken)?;
                let ours = decode::<Holder>(kv.value()).is_some_and(|h| h.spiffe_id == identity);
                if !ours || (token_compare && kv.mod_revision() != revision) {
                    return Err(ArbiterError::StaleToken);
                }
                t.when(
                    "holder-unchanged",
                    Compare::mod_revision(hkey, CompareOp::Equal, kv.mod_revision()),
                );
            }
        }
        // The lock-delay marker goes with the hold it marks: a release is no reason to delay
        // the next grant. Deleting an absent key writes nothing (a class with no delay).
        let dkey = delay_key(key);
        t.delete(hkey).delete(&dkey);
        let epoch_read = t.read(EPOCH_KEY);
        let fence_read = epoch.fence_key().map(|k| t.read(k));
        let resp = sealed.txn_batched(t).await?;
        // A moved fence counts as a moved epoch: re-read both.
        let epoch_seen = resp
            .kv(epoch_read)
            .filter(|_| epoch.fence_unchanged(fence_read.and_then(|r| resp.kv(r))))
            .map(KeyValue::mod_revision);
        let committed = resp.succeeded().then(|| resp.revision().unwrap_or(0));
        release_verdict(committed, epoch_seen, epoch.mod_revision)
    }

    /// The release as a handoff (issue 18): while the releaser's grant is still the holder
    /// (the record's mod revision is the token's, on the releaser's lease), the epoch
    /// unchanged and the head's session still bound, overwrite the holder record with the
    /// head's, on the head's lease (a durable head's entry deleted with it). The releaser
    /// and a FIFO head are answered from the same commit, whose revision is the head's
    /// token; a durable head finds the record its own. Every taken offer is answered; an
    /// error drops it, and the head re-checks the key with its own grant transaction.
    async fn try_handoff(
        &self,
        sealed: &Sealed,
        at: HandoffAt<'_>,
        mut head: Head,
    ) -> Result<Released, ArbiterError> {
        let epoch = sealed.epoch();
        let (t, reads) = handoff_txn(self.bugs, epoch, at, self.delay, &head);
        let resp = sealed.txn_creating_batched(t, at.hkey).await?;
        if resp.succeeded() {
            let revision = resp.revision().unwrap_or(0);
            head.tell(Handed::Granted {
                revision,
                epoch: epoch.clone(),
                permit: at.permit,
            });
            return Ok(Released::HandedOn(revision));
        }
        let epoch_unchanged = resp.kv(reads.epoch).map(KeyValue::mod_revision)
            == Some(epoch.mod_revision)
            && epoch.fence_unchanged(reads.fence.and_then(|r| resp.kv(r)));
        // A durable head that left the queue (deadline, cancelled) is gone as a head too.
        let head_bound = resp.kv(reads.head_session).map(KeyValue::create_revision)
            == Some(head.session_create_revision)
            && head.entry.as_ref().is_none_or(|e| {
                reads
                    .entry
                    .and_then(|r| resp.kv(r))
                    .map(KeyValue::create_revision)
                    == Some(e.create_revision)
            });
        let head_holds_permit = reads
            .permits
            .is_some_and(|r| resp.kvs(r).iter().any(|kv| kv.lease() == head.lease));
        let (told, released) = handoff_verdict(epoch_unchanged, head_bound, head_holds_permit);
        head.tell(match told {
            HeadTold::SessionGone => Handed::SessionGone,
            HeadTold::NotNow => Handed::NotNow,
        });
        Ok(released)
    }
}

#[cfg(test)]
mod tests;
