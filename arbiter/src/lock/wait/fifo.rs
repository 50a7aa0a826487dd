//! FIFO waiting (ADR-14, 15; `fairness: fifo`, the default): waiters of a key queue in this
//! arbiter's memory in arrival order (`queue.rs`); only the head talks to etcd. The head
//! runs a grant attempt; when the key is held it watches the holder key from the revision
//! it was seen held at, so no release in between is missed. A notification never grants:
//! every grant is a transaction (`grant.rs`).
//!
//! What a waiter does next is decided by one pure function (`waiter::step`); this module is
//! its driver: it performs each `Then` and reports what happened as the next event.
//!
//! A semaphore's waiters (`permits: N`) queue the same way: the head's attempt is a permit
//! grant (`lock/permit.rs`) and its watch covers every permit of the key.

use crate::error::{ArbiterError, Internal};
use crate::lock::grant::{Attempt, Grant, Granter, Watch, holder_record, mint};
use crate::lock::sessions::Session;
use crate::lock::wait::queue::{Handed, Offer, Queues, Ticket};
use crate::lock::wait::release_watch::{self, Wake};
use crate::lock::wait::wait_end::WaitEnd;
use crate::lock::wait::waiter::{self, Effect, Event, Then, Transition};
use crate::ops::bugs::Bug;
use crate::store::layout::{delay_key, holder_key, permits_prefix};
use lock_config::LockKey;
use lock_config::registry::ResolvedClass;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// Grants `key` to the session, waiting up to `wait` in the key's queue when it is held;
/// a drain ends the wait at its next waiting point (`wait_end.rs`).
pub async fn acquire(
    granter: &Granter<'_>,
    queues: &Arc<Queues>,
    session: &Session,
    key: &LockKey,
    class: &ResolvedClass<'_>,
    wait: Duration,
    drain: &crate::ops::drain::Drain,
) -> Result<Grant, ArbiterError> {
    let target = Target::of(class);
    // The calls below that talk to etcd are boxed: a queued waiter's future then holds only
    // its ticket, not room for the largest etcd call it might make (measured by `make
    // bench`'s memory row: the size of this future is paid per waiter).
    if wait.is_zero() {
        return match Box::pin(target.attempt(granter, session, key, class)).await? {
            Attempt::Granted(g) => Ok(g),
            Attempt::Held { .. } => Err(ArbiterError::Held),
        };
    }
    // A retried Acquire whose first answer was lost must get its grant back, not queue
    // behind waiters for a key it holds (found by the release gate); a leaked hold is named
    // as one rather than queued (with no queue, the head's first attempt classifies it).
    if queues.len(key.as_str()) > 0
        && let Some(g) = Box::pin(target.held_by(granter, session, key, class)).await?
    {
        return Ok(g);
    }
    let end = WaitEnd::after_with(wait, drain, granter.bugs);
    let ticket = queues.join(key.as_str());
    let length = ticket.length_on_join as f64;
    crate::ops::metrics::METRICS.with_class(class.name, |m| m.queue_length_on_join.observe(length));
    let waiter = Waiter {
        granter,
        ticket: &ticket,
        session,
        key,
        class,
        end: &end,
        target,
    };
    Box::pin(waiter.run()).await
}

/// What a waiter waits for: one key's hold, or one of a semaphore's N permits.
#[derive(Debug, Clone, Copy)]
enum Target {
    Key,
    Permit { n: u32 },
}

impl Target {
    fn of(class: &ResolvedClass<'_>) -> Self {
        match class.permits() {
            Some(n) => Target::Permit { n },
            None => Target::Key,
        }
    }

    async fn attempt(
        self,
        granter: &Granter<'_>,
        session: &Session,
        key: &LockKey,
        class: &ResolvedClass<'_>,
    ) -> Result<Attempt, ArbiterError> {
        match self {
            Target::Key => granter.attempt(session, key, class, None).await,
            Target::Permit { n } => {
                crate::lock::permit::attempt(granter, session, key, class, n).await
            }
        }
    }

    async fn held_by(
        self,
        granter: &Granter<'_>,
        session: &Session,
        key: &LockKey,
        class: &ResolvedClass<'_>,
    ) -> Result<Option<Grant>, ArbiterError> {
        match self {
            Target::Key => granter.held_by(session, key, class).await,
            Target::Permit { n } => {
                crate::lock::permit::held_by(granter, session, key, class, n).await
            }
        }
    }
}

/// How long a head whose offer a release took waits for that release's answer: the
/// release's transaction is bounded by the store timeout; past this the outcome counts as
/// unknown and the holder record is read back.
const OFFER_ANSWER: Duration = Duration::from_secs(10);

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

/// A grant transaction in flight (boxed: a waiter's future lives as long as its wait, and
/// inline it would be as large as the largest etcd call, found by `make heap-profile`).
type InFlight<'a> = Pin<Box<dyn Future<Output = Result<Attempt, ArbiterError>> + Send + 'a>>;

/// One queued waiter of a key at this arbiter, and where its wait ends.
struct Waiter<'a> {
    granter: &'a Granter<'a>,
    ticket: &'a Ticket,
    session: &'a Session,
    key: &'a LockKey,
    class: &'a ResolvedClass<'a>,
    end: &'a WaitEnd,
    target: Target,
}

impl<'a> Waiter<'a> {
    /// Drives the waiter's transitions until one answers.
    async fn run(self) -> Result<Grant, ArbiterError> {
        let hkey = holder_key(self.key);
        // What the head watches: the holder record, or, while the key is in its lock-delay
        // (`grant/delay.rs`), the delay's marker, whose lease ending deletes it.
        let dkey = delay_key(self.key);
        let pprefix = permits_prefix(self.key);
        let mut watch = Watch::Holder;
        let mut answer: Option<Answer> = None;
        let mut in_flight: Option<InFlight<'a>> = None;
        let Transition {
            mut state,
            mut effects,
            mut then,
        } = waiter::start();
        loop {
            for effect in effects.list() {
                match effect {
                    Effect::Stand => answer = Some(stand(self.ticket, self.session, self.class)),
                    Effect::SawHeld(revision) => self.ticket.saw_held(revision),
                    Effect::SawReleased => self.ticket.saw_released(),
                }
            }
            let event = match then {
                Then::Answer(result) => return result,
                Then::UntilHead => match self.end.bound(self.ticket.until_head()).await {
                    Ok(()) => Event::BecameHead {
                        held_at: self.ticket.held_at(),
                    },
                    Err(ended) => Event::Ended(ended),
                },
                Then::CheckAnswer => match answer.as_mut().map(oneshot::Receiver::try_recv) {
                    Some(Ok(handed)) => self.handed(handed),
                    Some(Err(oneshot::error::TryRecvError::Empty)) => Event::NoAnswer,
                    Some(Err(oneshot::error::TryRecvError::Closed)) | None => Event::AnswerLost,
                },
                Then::Attempt => {
                    let attempt =
                        self.target
                            .attempt(self.granter, self.session, self.key, self.class);
                    let txn = in_flight.insert(Box::pin(attempt));
                    // Only reported: the transaction is never cut short (the step decides).
                    tokio::select! {
                        biased;
                        result = txn => {
                            in_flight = None;
                            attempted(result, &mut watch)
                        }
                        ended = self.end.reached() => Event::Ended(ended),
                    }
                }
                Then::AwaitAttempt => match in_flight.take() {
                    Some(txn) => attempted(txn.await, &mut watch),
                    None => Event::Refused(ArbiterError::Internal(Internal::NoAttemptInFlight)),
                },
                Then::Watch { from } => {
                    let store = self.granter.store;
                    let watched = async {
                        match watch {
                            Watch::Holder => {
                                release_watch::wait(store, &hkey, from, self.end).await
                            }
                            Watch::Delay => release_watch::wait(store, &dkey, from, self.end).await,
                            Watch::Permits => {
                                release_watch::wait_prefix(store, &pprefix, from, self.end).await
                            }
                        }
                    };
                    let signal = self.ticket.release_signal();
                    let released = async {
                        match &signal {
                            Some(s) => s.notified().await,
                            None => std::future::pending().await,
                        }
                    };
                    let handed = async {
                        match answer.as_mut() {
                            Some(a) => a.await,
                            None => std::future::pending().await,
                        }
                    };
                    // A release through this arbiter hands the key on in its own
                    // transaction (one write for both) and answers the offer; a release
                    // elsewhere, or an expiry, arrives by the watch.
                    tokio::select! {
                        wake = watched => match wake {
                            Wake::Released { revision }
                                if revision > 0 && self.granter.bugs.has(Bug::GrantOnWatchEvent) =>
                            {
                                return self.grant_on_watch_event(revision).await;
                            }
                            Wake::Released { .. } => Event::ReleaseSeen,
                            Wake::Ended(ended) => Event::Ended(ended),
                            Wake::Broken => Event::WatchBroken,
                        },
                        () = released => Event::ReleaseSeen,
                        handed = handed => match handed {
                            Ok(h) => self.handed(h),
                            Err(_) => Event::AnswerLost,
                        },
                    }
                }
                Then::Pause => {
                    let pause = tokio::time::sleep(release_watch::poll_interval());
                    match self.end.bound(pause).await {
                        Ok(()) => Event::Paused,
                        Err(ended) => Event::Ended(ended),
                    }
                }
                Then::Withdraw => match self.ticket.withdraw() {
                    true => Event::Withdrawn,
                    false => Event::OfferTaken,
                },
                Then::AwaitAnswer => match answer.as_mut() {
                    Some(a) => match tokio::time::timeout(OFFER_ANSWER, a).await {
                        Ok(Ok(h)) => self.handed(h),
                        Ok(Err(_)) | Err(_) => Event::AnswerLost,
                    },
                    None => Event::AnswerLost,
                },
                Then::ReadBack => {
                    let held =
                        self.target
                            .held_by(self.granter, self.session, self.key, self.class);
                    match Box::pin(held).await {
                        Ok(grant) => Event::ReadBack(grant),
                        Err(e) => Event::Refused(e),
                    }
                }
            };
            Transition {
                state,
                effects,
                then,
            } = waiter::step(state, event);
        }
    }

    /// A release's answer to this waiter's offer, as an event.
    fn handed(&self, handed: Handed) -> Event {
        match handed {
            Handed::Granted {
                revision,
                epoch,
                permit,
            } => match mint(&epoch, revision, self.class) {
                Ok(g) => Event::HandedOn(Grant { permit, ..g }),
                Err(e) => Event::Refused(e),
            },
            Handed::SessionGone => Event::HandedSessionGone,
            Handed::NotNow => Event::NotHandedOn,
        }
    }

    /// Debug builds only (`Bug::GrantOnWatchEvent`): a watch event taken for a grant, the
    /// bug ADR-15 forbids; the gate must catch it.
    async fn grant_on_watch_event(&self, revision: i64) -> Result<Grant, ArbiterError> {
        let sealed = Box::pin(self.granter.store.sealed()).await?;
        self.ticket.saw_held(revision);
        mint(sealed.epoch(), revision, self.class)
    }
}

/// A grant transaction's result, as an event; `watch` notes what a watch must follow (a
/// key in its lock-delay is free of holders but not grantable: its marker is; a
/// semaphore's head watches every permit).
fn attempted(result: Result<Attempt, ArbiterError>, watch: &mut Watch) -> Event {
    match result {
        Ok(Attempt::Granted(g)) => Event::Granted(g),
        Ok(Attempt::Held { revision, watch: w }) => {
            *watch = w;
            Event::Held { revision }
        }
        Err(e) => Event::Refused(e),
    }
}
