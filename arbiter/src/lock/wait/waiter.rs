//! A waiter's life as one pure transition function (ADR-14, 15): `step(state, event)`
//! returns the next state, the effects on the key's queue, and what to do next. The async
//! drivers (`fifo.rs` for in-memory FIFO waits, `durable.rs` for the ending of durable
//! waits) only perform what it says and turn what happened into the next [`Event`]; no
//! decision is made at the rim.
//!
//! The life of a FIFO waiter, in the states below:
//!
//! ```text
//!  Queued --became head--> Head --attempt--> Attempting --granted--> answered (grant)
//!                           ^  \                |   \--held--> Head (watch from there)
//!                           |   \--watch--------+    \--refused--> Ending
//!                           |      release seen / watch broken / offer not handed on
//!  Queued, Head --end--> Ending --withdrawn--> answered (the refusal)
//!                           \--offer taken--> Offered --answer--> answered
//!                                               \--answer lost--> Unsure --read back--> answered
//! ```
//!
//! Five rules, each a bug the release gate found; the table of cases in `waiter/tests.rs`
//! pins each one down, in the rows under its "Bug N" comment:
//! 1. A wait ends only at a waiting point, never while a grant transaction is in flight: an
//!    end that comes during an attempt is remembered and the transaction's result decides
//!    (a drain that cut a transaction off told a waiter DRAINING while a holder record
//!    named it).
//! 2. A refusal is never answered while a release may have taken the waiter's offer: the
//!    offer is withdrawn first, and a taken one's answer decides (a head refused
//!    LEAKED_HOLD while a release handed it the key left the key held with nobody told).
//! 3. A release that took the offer and could not say what its handoff did leaves the
//!    outcome unknown: the holder record is read back, and "not yet ours" is NO_QUORUM,
//!    never a definite refusal a late commit could contradict (HELD_DEADLINE was answered
//!    and the handoff committed 2.5 s later).
//! 4. That doubt outlives the offer: a head whose taken offer's answer was lost stands a
//!    fresh one and keeps waiting, but the lost handoff may still commit (a transaction
//!    sent to a stopped etcd leader is applied when it resumes, long after its caller gave
//!    up), so every refusal that wait ends with is read back first and answered NO_QUORUM,
//!    never the definite one (HELD_DEADLINE was answered, the handoff committed 1.4 s
//!    later).
//! 5. A wait whose own grant transaction could not be settled (`grant.rs`: its answer lost,
//!    and the fence that would stop it could not be put) answers nothing definite after it,
//!    not even a handoff: that transaction may commit once the key is free again, so a
//!    grant answered now and released would leave a hold on a session whose every request
//!    was answered (the gate's bridge partition found it). NO_QUORUM says the acquire may
//!    yet take effect.

use crate::error::{ArbiterError, Internal};
use crate::lock::grant::Grant;
use crate::lock::wait::wait_end::Ended;

mod effects;
mod events;
pub use effects::{Effect, Effects};
pub use events::{Event, Then};

/// Where a waiter is.
#[derive(Debug)]
pub enum State {
    /// In the key's queue behind others; its offer stands.
    Queued,
    /// First in the queue, between transactions. `held_at`: the revision the key was last
    /// seen held at (watch for the release after it), None: look with a grant transaction.
    /// `broken`: watches that broke in a row (past one, poll instead of re-watching).
    /// `doubt` (in this state and the three below): a release took an earlier offer of this
    /// wait and its answer was lost, so its handoff may still commit.
    Head {
        held_at: Option<i64>,
        broken: u32,
        doubt: bool,
    },
    /// Its grant transaction is in flight; an end that came meanwhile waits for its result.
    Attempting { ended: Option<Ended>, doubt: bool },
    /// The wait is over with `refusal`, unless a release has taken the offer: withdrawing.
    Ending { refusal: ArbiterError, doubt: bool },
    /// A release took the offer: its answer decides, `refusal` if it did not hand on.
    Offered { refusal: ArbiterError, doubt: bool },
    /// Whether a handoff committed is unknown: the holder record decides; not this
    /// session's means `otherwise`.
    Unsure { otherwise: ArbiterError },
    /// Answered; nothing more happens.
    Answered,
}

/// One transition.
#[derive(Debug)]
pub struct Transition {
    pub state: State,
    pub effects: Effects,
    pub then: Then,
}

fn go(state: State, effects: Effects, then: Then) -> Transition {
    Transition {
        state,
        effects,
        then,
    }
}

/// Answered with a grant (the queue remembers the key held at its revision, so the next
/// head watches rather than spend a transaction on a taken key). A semaphore's permit says
/// nothing of the kind: other permits may be free, so the next head looks with its own
/// transaction (remembering "held" there left every waiter after the first watching while
/// permits stood free).
fn granted(grant: Grant) -> Transition {
    let effects = match grant.permit {
        Some(_) => Effects::NONE,
        None => Effects::held(grant.revision),
    };
    go(State::Answered, effects, Then::Answer(Ok(grant)))
}

fn answer(result: Result<Grant, ArbiterError>) -> Transition {
    go(State::Answered, Effects::NONE, Then::Answer(result))
}

/// The head's next look, once it has checked its offer: a transaction when the key's
/// state is unknown, else the watch.
fn look(held_at: Option<i64>, broken: u32, doubt: bool) -> Transition {
    match held_at {
        None => go(
            State::Attempting { ended: None, doubt },
            Effects::NONE,
            Then::Attempt,
        ),
        Some(h) => go(
            State::Head {
                held_at: Some(h),
                broken,
                doubt,
            },
            Effects::NONE,
            Then::Watch { from: h + 1 },
        ),
    }
}

/// Back to the head's first question (was the key handed on?), the key's state unknown.
fn recheck(broken: u32, doubt: bool, effects: Effects) -> Transition {
    go(
        State::Head {
            held_at: None,
            broken,
            doubt,
        },
        effects,
        Then::CheckAnswer,
    )
}

/// The wait is over with `refusal`: first take the offer back.
fn ending(refusal: ArbiterError, doubt: bool) -> Transition {
    go(
        State::Ending { refusal, doubt },
        Effects::NONE,
        Then::Withdraw,
    )
}

/// The refusal a wait ends with, or, when a lost handoff may still commit, the holder
/// record read back first and NO_QUORUM unless it is this session's.
fn refuse(refusal: ArbiterError, doubt: bool) -> Transition {
    if unsettled(&refusal) {
        return answer(Err(refusal));
    }
    if doubt {
        return unsure(ArbiterError::NoQuorum);
    }
    answer(Err(refusal))
}

/// The wait's own grant transaction may still commit: no read-back and no handoff can make
/// its answer definite.
fn unsettled(refusal: &ArbiterError) -> bool {
    matches!(refusal, ArbiterError::GrantInDoubt)
}

fn unsure(otherwise: ArbiterError) -> Transition {
    go(State::Unsure { otherwise }, Effects::NONE, Then::ReadBack)
}

/// The start of a FIFO wait: queued, its offer standing from the moment it joins (a release
/// that comes before it wakes as head still hands on to it).
pub fn start() -> Transition {
    go(
        State::Queued,
        Effects {
            stand: true,
            seen: None,
        },
        Then::UntilHead,
    )
}

/// The start of a wait's end decided outside the queue (a durable wait): withdrawing.
pub fn end_with(refusal: ArbiterError) -> Transition {
    ending(refusal, false)
}

/// The transition function. Pairs that cannot happen (the driver never produces that
/// event in that state) end the wait with an internal error rather than panic.
pub fn step(state: State, event: Event) -> Transition {
    use Event as E;
    use State as S;
    match (state, event) {
        // ---- queued ----
        (S::Queued, E::BecameHead { held_at }) => go(
            S::Head {
                held_at,
                broken: 0,
                doubt: false,
            },
            Effects::NONE,
            Then::CheckAnswer,
        ),
        (S::Queued, E::Ended(e)) => ending(e.refusal(), false),

        // ---- the head, between transactions ----
        (
            S::Head {
                held_at,
                broken,
                doubt,
            },
            E::NoAnswer,
        ) => look(held_at, broken, doubt),
        (S::Head { .. }, E::HandedOn(g)) => granted(g),
        // A session that ended gets no handoff, late or not: definite.
        (S::Head { .. }, E::HandedSessionGone) => answer(Err(ArbiterError::SessionNotFound)),
        // Not handed on: a fresh offer, and the next look is the head's own transaction.
        (S::Head { doubt, .. }, E::NotHandedOn) => recheck(0, doubt, Effects::restand()),
        // The release's outcome unknown: the same, and from now on the wait is in doubt
        // (its own transaction reads back a handoff that committed; one still to commit
        // only the final read-back can see).
        (S::Head { .. }, E::AnswerLost) => recheck(0, true, Effects::restand()),
        (S::Head { doubt, .. }, E::ReleaseSeen) => recheck(0, doubt, Effects::released()),
        // A broken watch: a transaction and a new watch at once; if it keeps breaking,
        // poll every second or so (ADR-15).
        (
            S::Head {
                broken: 0, doubt, ..
            },
            E::WatchBroken,
        ) => recheck(1, doubt, Effects::released()),
        (
            S::Head {
                held_at,
                broken,
                doubt,
            },
            E::WatchBroken,
        ) => go(
            S::Head {
                held_at,
                broken: broken + 1,
                doubt,
            },
            Effects::NONE,
            Then::Pause,
        ),
        (S::Head { broken, doubt, .. }, E::Paused) => recheck(broken, doubt, Effects::released()),
        (S::Head { doubt, .. }, E::Ended(e)) => ending(e.refusal(), doubt),

        // ---- the head's transaction in flight: only its result decides ----
        (S::Attempting { .. }, E::Granted(g)) => granted(g),
        (S::Attempting { ended: None, doubt }, E::Held { revision }) => go(
            S::Head {
                held_at: Some(revision),
                broken: 0,
                doubt,
            },
            Effects::held(revision),
            Then::Watch { from: revision + 1 },
        ),
        // An end that came while the transaction was in flight is looked at now.
        (
            S::Attempting {
                ended: Some(e),
                doubt,
            },
            E::Held { revision },
        ) => Transition {
            effects: Effects::held(revision),
            ..ending(e.refusal(), doubt)
        },
        (S::Attempting { doubt, .. }, E::Ended(e)) => go(
            S::Attempting {
                ended: Some(e),
                doubt,
            },
            Effects::NONE,
            Then::AwaitAttempt,
        ),
        // A refusal while a release may have taken the offer: that answer decides.
        (S::Attempting { doubt, .. }, E::Refused(e)) => ending(e, doubt),

        // ---- the wait is over: withdrawing, or awaiting a taken offer's answer ----
        (S::Ending { refusal, doubt }, E::Withdrawn) => refuse(refusal, doubt),
        (S::Ending { refusal, doubt }, E::OfferTaken) => go(
            S::Offered { refusal, doubt },
            Effects::NONE,
            Then::AwaitAnswer,
        ),
        (S::Ending { refusal, .. }, E::Fenced) if unsettled(&refusal) => answer(Err(refusal)),
        (S::Ending { refusal, doubt }, E::Fenced) => unsure(if doubt {
            ArbiterError::NoQuorum
        } else {
            refusal
        }),
        (S::Ending { .. }, E::Refused(e)) => answer(Err(e)),
        // Handed the key, but the wait's own transaction is unsettled: once this grant is
        // released, that one may commit. The handoff's hold stands, the answer is unknown.
        (S::Offered { refusal, .. }, E::HandedOn(g)) if unsettled(&refusal) => Transition {
            effects: Effects::held(g.revision),
            ..answer(Err(refusal))
        },
        (S::Offered { .. }, E::HandedOn(g)) => granted(g),
        (S::Offered { .. }, E::HandedSessionGone) => answer(Err(ArbiterError::SessionNotFound)),
        (S::Offered { refusal, doubt }, E::NotHandedOn) => refuse(refusal, doubt),
        // The release's transaction may still commit after its bound: not yet this
        // session's is an unknown outcome, never the wait's definite refusal.
        (S::Offered { refusal, .. }, E::AnswerLost) if unsettled(&refusal) => answer(Err(refusal)),
        (S::Offered { .. }, E::AnswerLost) => unsure(ArbiterError::NoQuorum),
        (S::Unsure { .. }, E::ReadBack(Some(g))) => answer(Ok(g)),
        (S::Unsure { otherwise }, E::ReadBack(None)) => answer(Err(otherwise)),
        (S::Unsure { .. }, E::Refused(e)) => answer(Err(e)),

        // Debug forms only: a grant's token prints redacted (`FencingToken`'s Debug).
        (state, event) => answer(Err(ArbiterError::Internal(Internal::NoTransition(
            format!("{state:?} on {event:?}"),
        )))),
    }
}

#[cfg(test)]
mod tests;
