//! FIFO waiting (ADR-14, 15; `fairness: fifo`, the default): waiters of a key queue in this
//! arbiter's memory in arrival order (`queue.rs`); only the head talks to etcd. The head
//! runs a grant attempt; when the key is held it watches the holder key from the revision
//! it was seen held at, so no release in between is missed. A notification never grants:
//! every grant is a transaction (`grant.rs`).

use crate::bugs::Bug;
use crate::error::ArbiterError;
use crate::grant::{Attempt, Grant, Granter, holder_record, mint};
use crate::layout::holder_key;
use crate::queue::{Handed, Offer, Queues, Ticket};
use crate::release_watch::{self, Wake};
use crate::sessions::Session;
use crate::wait_end::WaitEnd;
use lock_config::LockKey;
use lock_config::registry::ResolvedClass;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// How long a head whose offer a release took waits for that release's answer: the
/// release's transaction is bounded by the store timeout; past this the head re-checks the
/// key itself (its own grant transaction reads back a handoff that committed).
const OFFER_ANSWER: Duration = Duration::from_secs(10);

/// A handed-on key becomes the head's grant and a session that ended its refusal; None
/// (not handed on, or the releaser gone without an answer: its outcome unknown) sends the
/// head back to its own grant transaction, which reads back a handoff that committed.
fn settle(
    handed: Result<Handed, oneshot::error::RecvError>,
    ticket: &Ticket,
    class: &ResolvedClass<'_>,
) -> Option<Result<Grant, ArbiterError>> {
    match handed {
        Ok(Handed::Granted { revision, epoch }) => {
            ticket.saw_held(revision);
            Some(mint(&epoch, revision, class))
        }
        Ok(Handed::SessionGone) => Some(Err(ArbiterError::SessionNotFound)),
        Ok(Handed::NotNow) | Err(_) => None,
    }
}

/// Grants `key` to the session, waiting up to `wait` in the key's queue when it is held;
/// a drain ends the wait at its next waiting point (`wait_end.rs`).
pub async fn acquire(
    granter: &Granter<'_>,
    queues: &Arc<Queues>,
    session: &Session,
    key: &LockKey,
    class: &ResolvedClass<'_>,
    wait: Duration,
    drain: &crate::drain::Drain,
) -> Result<Grant, ArbiterError> {
    // The calls below that talk to etcd are boxed: a queued waiter's future then holds only
    // its ticket, not room for the largest etcd call it might make (measured by `make
    // bench`'s memory row: the size of this future is paid per waiter).
    if wait.is_zero() {
        return match Box::pin(granter.attempt(session, key, class, None)).await? {
            Attempt::Granted(g) => Ok(g),
            Attempt::Held { .. } => Err(ArbiterError::Held),
        };
    }
    // A retried Acquire whose first answer was lost must get its grant back, not queue
    // behind waiters for a key it holds (found by the release gate); a leaked hold is named
    // as one rather than queued (with no queue, the head's first attempt classifies it).
    if queues.len(key.as_str()) > 0
        && let Some(g) = Box::pin(granter.held_by(session, key, class)).await?
    {
        return Ok(g);
    }
    let end = WaitEnd::after(wait, drain);
    let ticket = queues.join(key.as_str());
    // The offer stands from the moment the waiter joins: a release that comes before this
    // waiter has woken as head still hands the key on to it.
    let mut answer = stand(&ticket, session, class);
    let waiter = Waiter {
        granter,
        ticket: &ticket,
        session,
        key,
        class,
        end: &end,
    };
    if let Err(ended) = end.bound(ticket.until_head()).await {
        return Box::pin(waiter.last_word(&mut answer, ended.refusal())).await;
    }
    Box::pin(waiter.wait_as_head(&mut answer)).await
}

/// Stands `ticket`'s offer; returns where its answer will come.
fn stand(ticket: &Ticket, session: &Session, class: &ResolvedClass<'_>) -> Answer {
    let (reply, answer) = oneshot::channel();
    ticket.offer(Offer {
        lease: session.lease,
        session_create_revision: session.create_revision,
        holder: holder_record(session, class),
        reply,
    });
    answer
}

type Answer = oneshot::Receiver<Handed>;

/// What woke a waiting head: the watch (or this arbiter's release signal), or the answer
/// to its offer.
enum Woke {
    Watch(Wake),
    Handed(Result<Handed, oneshot::error::RecvError>),
}

/// One queued waiter of a key at this arbiter, and where its wait ends.
struct Waiter<'a> {
    granter: &'a Granter<'a>,
    ticket: &'a Ticket,
    session: &'a Session,
    key: &'a LockKey,
    class: &'a ResolvedClass<'a>,
    end: &'a WaitEnd,
}

impl Waiter<'_> {
    /// A wait ends with `refusal` (its end, or its own attempt's error), unless a release
    /// has taken the offer: then its answer decides (the key may be this waiter's
    /// already), waited for within a bound. A release that could not say (its
    /// transaction's outcome unknown) leaves the holder record to say: read back, so a
    /// handed-on key is a grant, not a hold behind a refusal; not (yet) handed on is
    /// NO_QUORUM, an unknown outcome, never a definite refusal.
    async fn last_word(
        &self,
        answer: &mut Answer,
        refusal: ArbiterError,
    ) -> Result<Grant, ArbiterError> {
        if self.ticket.withdraw() {
            return Err(refusal);
        }
        match tokio::time::timeout(OFFER_ANSWER, answer).await {
            Ok(Ok(handed)) => match settle(Ok(handed), self.ticket, self.class) {
                Some(done) => done,
                None => Err(refusal),
            },
            // The release took the offer and could not say what its handoff did (its
            // transaction's outcome unknown: etcd may still commit it after the bound).
            // Read back; if the key is not this session's yet, the outcome is unknown too,
            // and a definite refusal could be contradicted by a late commit (found by the
            // gate: HELD_DEADLINE answered, the handoff committed 2.5 s later).
            Ok(Err(_)) | Err(_) => {
                let held = self.granter.held_by(self.session, self.key, self.class);
                match Box::pin(held).await? {
                    Some(g) => Ok(g),
                    None => Err(ArbiterError::NoQuorum),
                }
            }
        }
    }

    /// The head of a key's queue: take a key handed on by a release; else attempt, and
    /// when held, watch for the release from the revision the key was seen held at. The
    /// wait ends only here, between transactions (`wait_end.rs`).
    async fn wait_as_head(&self, answer: &mut Answer) -> Result<Grant, ArbiterError> {
        let (granter, ticket, session, class) =
            (self.granter, self.ticket, self.session, self.class);
        let hkey = holder_key(self.key);
        let mut broken_watches = 0u32;
        loop {
            match answer.try_recv() {
                Ok(handed) => match settle(Ok(handed), ticket, class) {
                    Some(done) => return done,
                    None => *answer = stand(ticket, session, class),
                },
                // Taken and dropped (the release's outcome unknown): the attempt below reads
                // back a handoff that committed.
                Err(oneshot::error::TryRecvError::Closed) => {
                    *answer = stand(ticket, session, class);
                    ticket.saw_released();
                }
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            if ticket.held_at().is_none() {
                // A handoff may race this attempt: both then name this session's one grant.
                // Boxed (as the etcd calls below): a head's future lives as long as its
                // wait, and inline it would be as large as its largest etcd call (17 KiB a
                // head, found by `make heap-profile`).
                match Box::pin(granter.attempt(session, self.key, class, None)).await {
                    Ok(Attempt::Granted(g)) => {
                        // The next head starts by watching, not by a doomed transaction.
                        ticket.saw_held(g.revision);
                        return Ok(g);
                    }
                    Ok(Attempt::Held { revision }) => ticket.saw_held(revision),
                    // A refusal (LEAKED_HOLD, MOVING, ...) while a release may have taken
                    // this head's offer and be handing the key on to it: that answer
                    // decides, or the handed-on key would be held with nobody told.
                    Err(e) => return Box::pin(self.last_word(answer, e)).await,
                }
            }
            let from = ticket.held_at().unwrap_or(0) + 1;
            let watched = release_watch::wait(granter.store, &hkey, from, self.end);
            // A release through this arbiter hands the key on in its own transaction (one
            // write for both) and answers the offer; a release elsewhere, or an expiry,
            // still arrives by the watch, and the head then runs its own grant.
            let wake = match ticket.release_signal() {
                Some(signal) => tokio::select! {
                    w = watched => Woke::Watch(w),
                    () = signal.notified() => Woke::Watch(Wake::Released { revision: 0 }),
                    handed = &mut *answer => Woke::Handed(handed),
                },
                None => tokio::select! {
                    w = watched => Woke::Watch(w),
                    handed = &mut *answer => Woke::Handed(handed),
                },
            };
            let wake = match wake {
                Woke::Watch(w) => w,
                Woke::Handed(handed) => match settle(handed, ticket, class) {
                    Some(done) => return done,
                    None => {
                        // Not handed on, or the outcome unknown: a fresh offer, and the
                        // attempt reads back a handoff that committed.
                        *answer = stand(ticket, session, class);
                        ticket.saw_released();
                        continue;
                    }
                },
            };
            match wake {
                Wake::Released { revision } => {
                    if granter.bugs.has(Bug::GrantOnWatchEvent) && revision > 0 {
                        let sealed = Box::pin(granter.store.sealed()).await?;
                        ticket.saw_held(revision);
                        return mint(sealed.epoch(), revision, class);
                    }
                    broken_watches = 0;
                    ticket.saw_released();
                }
                Wake::Ended(ended) => {
                    return Box::pin(self.last_word(answer, ended.refusal())).await;
                }
                Wake::Broken => {
                    // Watch lost or compacted: retry the transaction and re-watch at once;
                    // if the watch keeps failing, poll every second with jitter (ADR-15).
                    broken_watches += 1;
                    if broken_watches > 1 {
                        let pause = tokio::time::sleep(release_watch::poll_interval());
                        if let Err(ended) = self.end.bound(pause).await {
                            return Box::pin(self.last_word(answer, ended.refusal())).await;
                        }
                    }
                    ticket.saw_released();
                }
            }
        }
    }
}
