//! The two ends of every step a driver runs: what happened ([`Event`], as the driver
//! reports it) and what it does next ([`Then`], each producing the next event).

use crate::error::ArbiterError;
use crate::lock::grant::Grant;
use crate::lock::wait::wait_end::Ended;

/// What happened, as the driver reports it.
#[derive(Debug)]
pub enum Event {
    /// The waiter reached the head of its queue; the queue last saw the key held at
    /// `held_at` (another head's observation).
    BecameHead { held_at: Option<i64> },
    /// Looked at the offer without waiting: no answer yet.
    NoAnswer,
    /// Its own grant transaction committed.
    Granted(Grant),
    /// Its own grant transaction found the key held, seen at `revision`.
    Held { revision: i64 },
    /// Its own grant transaction (or a read) was refused: LEAKED_HOLD, NO_QUORUM, MOVING,
    /// SESSION_EXPIRED, SEALED...
    Refused(ArbiterError),
    /// The key's release was seen (the watch's delete, or this arbiter's own release).
    ReleaseSeen,
    /// The watch could not be made, broke, or was compacted.
    WatchBroken,
    /// A poll's pause is over.
    Paused,
    /// The caller's deadline passed, or the arbiter started draining.
    Ended(Ended),
    /// The offer was taken back: no release had taken it.
    Withdrawn,
    /// The offer could not be taken back: a release has it and will answer.
    OfferTaken,
    /// The waiter left in a way no later handoff can pick (a durable entry deleted), but
    /// one may have come before: only the holder record can say.
    Fenced,
    /// A release handed the key on to this waiter: its grant.
    HandedOn(Grant),
    /// A release took the offer but could not hand on: this waiter's session had ended.
    HandedSessionGone,
    /// A release took the offer but did not hand on (its token was stale, the epoch moved).
    NotHandedOn,
    /// A release took the offer and dropped it unanswered, or its answer did not come in
    /// time: its transaction's outcome is unknown.
    AnswerLost,
    /// The holder record read back: this session's grant, or None.
    ReadBack(Option<Grant>),
}

/// What the driver does next; each produces the next event (but `Answer`).
#[derive(Debug)]
pub enum Then {
    /// Wait to be head (bounded by the end) -> BecameHead | Ended.
    UntilHead,
    /// Look at the offer without waiting -> HandedOn | HandedSessionGone | NotHandedOn |
    /// AnswerLost | NoAnswer.
    CheckAnswer,
    /// Run the grant transaction -> Granted | Held | Refused; an end that comes while it
    /// is in flight is reported (Ended), never cuts it short.
    Attempt,
    /// Keep awaiting the transaction already in flight -> Granted | Held | Refused.
    AwaitAttempt,
    /// Watch for the release after `from`, racing the offer's answer and the end ->
    /// ReleaseSeen | WatchBroken | Ended | HandedOn | HandedSessionGone | NotHandedOn |
    /// AnswerLost.
    Watch { from: i64 },
    /// Pause before polling (bounded by the end) -> Paused | Ended.
    Pause,
    /// Take the offer back -> Withdrawn | OfferTaken (a durable wait: delete its entry
    /// -> Fenced).
    Withdraw,
    /// Wait (bounded) for the answer of the release that took the offer -> HandedOn |
    /// HandedSessionGone | NotHandedOn | AnswerLost.
    AwaitAnswer,
    /// Read the holder record back -> ReadBack | Refused.
    ReadBack,
    /// Answer the caller.
    Answer(Result<Grant, ArbiterError>),
}
