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
//! consensus write ends one grant and makes the next.

use crate::error::ArbiterError;
use crate::lock::grant::QueuePlace;
use crate::lock::grant::{MAX_ATTEMPTS, now_ms, reseal_once};
use crate::lock::sessions::Sessions;
use crate::lock::wait::durable::FirstWaiter;
use crate::lock::wait::queue::{Handed, Offer, Queues};
use crate::ops::bugs::{Bug, Bugs};
use crate::store::layout::{
    DelayMarker, EPOCH_KEY, Holder, decode, delay_key, encode, holder_key, lease_hex, permit_key,
    permits_prefix, session_key,
};
use crate::store::{Sealed, Store};
use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse,
};
use lock_config::{FencingToken, LockKey};

mod verdict;
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

/// What a handoff overwrites: the key's holder record, or the releaser's permit.
#[derive(Clone, Copy)]
struct HandoffAt<'a> {
    key: &'a LockKey,
    hkey: &'a str,
    permit: Option<u32>,
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
        let mut compares = vec![Compare::mod_revision(
            EPOCH_KEY,
            CompareOp::Equal,
            epoch.mod_revision,
        )];
        compares.extend(epoch.fence_compare());
        let token_compare = !self.bugs.has(Bug::ReleaseWithoutTokenCompare);
        if token_compare {
            compares.push(Compare::mod_revision(hkey, CompareOp::Equal, revision));
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
                    let at = HandoffAt { key, hkey, permit };
                    return self.try_handoff(sealed, at, revision, lease, head).await;
                }
                compares.push(Compare::lease(hkey, CompareOp::Equal, lease));
            }
            None => {
                let resp = sealed.get(hkey).await?;
                let kv = resp.kvs().first().ok_or(ArbiterError::StaleToken)?;
                let ours = decode::<Holder>(kv.value()).is_some_and(|h| h.spiffe_id == identity);
                if !ours || (token_compare && kv.mod_revision() != revision) {
                    return Err(ArbiterError::StaleToken);
                }
                compares.push(Compare::mod_revision(
                    hkey,
                    CompareOp::Equal,
                    kv.mod_revision(),
                ));
            }
        }
        // The lock-delay marker goes with the hold it marks: a release is no reason to delay
        // the next grant. Deleting an absent key writes nothing (a class with no delay).
        let dkey = delay_key(key);
        let txn = Txn::new()
            .when(compares)
            .and_then(vec![
                TxnOp::delete(hkey, None),
                TxnOp::delete(dkey.as_str(), None),
            ])
            .or_else(
                std::iter::once(TxnOp::get(EPOCH_KEY, None))
                    .chain(epoch.fence_read())
                    .collect::<Vec<_>>(),
            );
        let resp = sealed
            .txn_batched(
                txn,
                vec![hkey.to_owned(), dkey.clone()],
                3 * hkey.len() + 2 * dkey.len() + 64,
            )
            .await?;
        let ops = resp.op_responses();
        let got = |i: usize| match ops.get(i) {
            Some(TxnOpResponse::Get(g)) => g.kvs().first(),
            _ => None,
        };
        // A moved fence counts as a moved epoch: re-read both.
        let epoch_seen = got(0)
            .filter(|_| epoch.fence_unchanged(got(1)))
            .map(KeyValue::mod_revision);
        let committed = resp
            .succeeded()
            .then(|| resp.header().map_or(0, |h| h.revision()));
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
        revision: i64,
        lease: i64,
        mut head: Head,
    ) -> Result<Released, ArbiterError> {
        let HandoffAt { key, hkey, permit } = at;
        let epoch = sealed.epoch();
        let head_session = session_key(head.lease);
        let mut compares = vec![Compare::mod_revision(
            EPOCH_KEY,
            CompareOp::Equal,
            epoch.mod_revision,
        )];
        compares.extend(epoch.fence_compare());
        if !self.bugs.has(Bug::HandoffWithoutHolderCompare) {
            compares.push(Compare::mod_revision(hkey, CompareOp::Equal, revision));
            compares.push(Compare::lease(hkey, CompareOp::Equal, lease));
        }
        compares.push(Compare::create_revision(
            head_session.as_str(),
            CompareOp::Equal,
            head.session_create_revision,
        ));
        let holder = Holder {
            acquired_at_ms: now_ms(),
            ..head.holder.clone()
        };
        let mut success = vec![TxnOp::put(
            hkey,
            encode(&holder),
            Some(PutOptions::new().with_lease(head.lease)),
        )];
        let mut writes = vec![hkey.to_owned()];
        let mut bytes = 3 * hkey.len() + 2 * head_session.len() + 256;
        let prefix = permits_prefix(key);
        if permit.is_some() {
            // A grant of a permit: no other grant of the key in the same batch (`permit.rs`),
            // and none to a head that holds a permit of the key already (its own attempt
            // may have got one while its offer stood): a session holds at most one.
            writes.push(prefix.clone());
            compares.push(
                Compare::lease(prefix.as_str(), CompareOp::NotEqual, head.lease).with_prefix(),
            );
        }
        if self.delay {
            // The head's hold gets its marker, as its own grant would have put it.
            let dkey = delay_key(key);
            let marker = encode(&DelayMarker {
                session: lease_hex(head.lease),
                delay_from_ms: None,
            });
            bytes += marker.len() + 2 * dkey.len();
            success.push(TxnOp::put(dkey.as_str(), marker, None));
            writes.push(dkey);
        }
        if let Some(entry) = &head.entry {
            compares.push(Compare::create_revision(
                entry.key.as_str(),
                CompareOp::Equal,
                entry.create_revision,
            ));
            success.push(TxnOp::delete(entry.key.as_str(), None));
            writes.push(entry.key.clone());
            bytes += 2 * entry.key.len();
        }
        let mut failure = vec![
            TxnOp::get(EPOCH_KEY, None),
            TxnOp::get(head_session.as_str(), None),
        ];
        if let Some(entry) = &head.entry {
            failure.push(TxnOp::get(entry.key.as_str(), None));
        }
        // Last, so the reads above keep their places.
        let fence_at = failure.len();
        failure.extend(epoch.fence_read());
        let permits_at = failure.len();
        if permit.is_some() {
            failure.push(TxnOp::get(
                prefix.as_str(),
                Some(GetOptions::new().with_prefix()),
            ));
        }
        let txn = Txn::new().when(compares).and_then(success).or_else(failure);
        let resp = sealed
            .txn_creating_batched(txn, hkey, writes, bytes)
            .await?;
        if resp.succeeded() {
            let at = resp.header().map_or(0, |h| h.revision());
            head.tell(Handed::Granted {
                revision: at,
                epoch: epoch.clone(),
                permit,
            });
            return Ok(Released::HandedOn(at));
        }
        let ops = resp.op_responses();
        let got = |i: usize| match ops.get(i) {
            Some(TxnOpResponse::Get(g)) => g.kvs().first(),
            _ => None,
        };
        let epoch_unchanged = got(0).map(KeyValue::mod_revision) == Some(epoch.mod_revision)
            && epoch.fence_unchanged(got(fence_at));
        // A durable head that left the queue (deadline, cancelled) is gone as a head too.
        let head_bound =
            got(1).map(KeyValue::create_revision) == Some(head.session_create_revision)
                && head.entry.as_ref().is_none_or(|e| {
                    got(2).map(KeyValue::create_revision) == Some(e.create_revision)
                });
        let head_holds_permit = match ops.get(permits_at) {
            Some(TxnOpResponse::Get(g)) => g.kvs().iter().any(|kv| kv.lease() == head.lease),
            _ => false,
        };
        let (told, released) = handoff_verdict(epoch_unchanged, head_bound, head_holds_permit);
        head.tell(match told {
            HeadTold::SessionGone => Handed::SessionGone,
            HeadTold::NotNow => Handed::NotNow,
        });
        Ok(released)
    }
}
