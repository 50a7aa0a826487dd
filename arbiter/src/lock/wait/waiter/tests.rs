//! The waiter's transition table: every pair a driver can produce, and the closure check
//! that no reachable (state, event) pair falls through to "no transition".

use super::effects::Seen;
use super::*;
use lock_config::FencingToken;

fn grant(revision: i64) -> Grant {
    Grant {
        token: FencingToken::pack(2, revision as u64).unwrap(),
        revision,
        class: "c".into(),
        ttl_seconds: 15,
        permit: None,
    }
}

/// A state as the table writes it (the refusal a state carries by its reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    Queued,
    /// The last field of these four: the wait is in doubt (a lost handoff may commit).
    Head(Option<i64>, u32, bool),
    Attempting(Option<Ended>, bool),
    Ending(&'static str, bool),
    Offered(&'static str, bool),
    Unsure(&'static str),
    Answered,
}

fn error(reason: &str) -> ArbiterError {
    match reason {
        "HELD_DEADLINE" => ArbiterError::HeldDeadline,
        "DRAINING" => ArbiterError::Draining,
        "LEAKED_HOLD" => ArbiterError::LeakedHold,
        "MOVING" => ArbiterError::Moving,
        "NO_QUORUM" => ArbiterError::NoQuorum,
        "GRANT_IN_DOUBT" => ArbiterError::GrantInDoubt,
        "SESSION_EXPIRED" => ArbiterError::SessionNotFound,
        other => panic!("no error for {other}"),
    }
}

/// The error's name as `error` takes it (HELD_DEADLINE apart from HELD, which the wire
/// reason merges).
fn reason(e: &ArbiterError) -> &'static str {
    match e {
        ArbiterError::HeldDeadline => "HELD_DEADLINE",
        // NO_QUORUM on the wire, told apart here: the wait's own grant is unsettled.
        ArbiterError::GrantInDoubt => "GRANT_IN_DOUBT",
        e => e.reason().as_str(),
    }
}

impl St {
    fn make(self) -> State {
        match self {
            St::Queued => State::Queued,
            St::Head(held_at, broken, doubt) => State::Head {
                held_at,
                broken,
                doubt,
            },
            St::Attempting(ended, doubt) => State::Attempting { ended, doubt },
            St::Ending(r, doubt) => State::Ending {
                refusal: error(r),
                doubt,
            },
            St::Offered(r, doubt) => State::Offered {
                refusal: error(r),
                doubt,
            },
            St::Unsure(r) => State::Unsure {
                otherwise: error(r),
            },
            St::Answered => State::Answered,
        }
    }

    fn of(s: &State) -> St {
        match s {
            State::Queued => St::Queued,
            State::Head {
                held_at,
                broken,
                doubt,
            } => St::Head(*held_at, *broken, *doubt),
            State::Attempting { ended, doubt } => St::Attempting(*ended, *doubt),
            State::Ending { refusal, doubt } => St::Ending(reason(refusal), *doubt),
            State::Offered { refusal, doubt } => St::Offered(reason(refusal), *doubt),
            State::Unsure { otherwise } => St::Unsure(reason(otherwise)),
            State::Answered => St::Answered,
        }
    }
}

/// What to do next, as the table writes it.
fn then(t: &Then) -> String {
    match t {
        Then::UntilHead => "until-head".into(),
        Then::CheckAnswer => "check-answer".into(),
        Then::Attempt => "attempt".into(),
        Then::AwaitAttempt => "await-attempt".into(),
        Then::Watch { from } => format!("watch {from}"),
        Then::Pause => "pause".into(),
        Then::Withdraw => "withdraw".into(),
        Then::AwaitAnswer => "await-answer".into(),
        Then::ReadBack => "read-back".into(),
        Then::Answer(Ok(g)) => format!("grant r{}", g.revision),
        Then::Answer(Err(e)) => format!("refuse {}", reason(e)),
    }
}

/// The events, as the table writes them (a fresh value each time: events are moved).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ev {
    BecameHead(Option<i64>),
    NoAnswer,
    Granted(i64),
    Held(i64),
    Refused(&'static str),
    ReleaseSeen,
    WatchBroken,
    Paused,
    Ended(Ended),
    Withdrawn,
    OfferTaken,
    Fenced,
    HandedOn(i64),
    HandedSessionGone,
    NotHandedOn,
    AnswerLost,
    ReadBack(Option<i64>),
}

impl Ev {
    fn make(self) -> Event {
        match self {
            Ev::BecameHead(h) => Event::BecameHead { held_at: h },
            Ev::NoAnswer => Event::NoAnswer,
            Ev::Granted(r) => Event::Granted(grant(r)),
            Ev::Held(r) => Event::Held { revision: r },
            Ev::Refused(r) => Event::Refused(error(r)),
            Ev::ReleaseSeen => Event::ReleaseSeen,
            Ev::WatchBroken => Event::WatchBroken,
            Ev::Paused => Event::Paused,
            Ev::Ended(e) => Event::Ended(e),
            Ev::Withdrawn => Event::Withdrawn,
            Ev::OfferTaken => Event::OfferTaken,
            Ev::Fenced => Event::Fenced,
            Ev::HandedOn(r) => Event::HandedOn(grant(r)),
            Ev::HandedSessionGone => Event::HandedSessionGone,
            Ev::NotHandedOn => Event::NotHandedOn,
            Ev::AnswerLost => Event::AnswerLost,
            Ev::ReadBack(r) => Event::ReadBack(r.map(grant)),
        }
    }

    /// One sample of each kind of event.
    const ALL: [Ev; 17] = [
        Ev::BecameHead(None),
        Ev::NoAnswer,
        Ev::Granted(9),
        Ev::Held(9),
        Ev::Refused("LEAKED_HOLD"),
        Ev::ReleaseSeen,
        Ev::WatchBroken,
        Ev::Paused,
        Ev::Ended(crate::lock::wait::wait_end::Ended::Deadline),
        Ev::Withdrawn,
        Ev::OfferTaken,
        Ev::Fenced,
        Ev::HandedOn(9),
        Ev::HandedSessionGone,
        Ev::NotHandedOn,
        Ev::AnswerLost,
        Ev::ReadBack(None),
    ];

    fn kind(self) -> std::mem::Discriminant<Ev> {
        std::mem::discriminant(&self)
    }
}

/// The events a driver produces for each `then` (the contract in `Then`'s docs).
fn produces(then: &str) -> Vec<Ev> {
    use Ev::*;
    let handed = [HandedOn(9), HandedSessionGone, NotHandedOn, AnswerLost];
    let txn = [
        Granted(9),
        Held(9),
        Refused("LEAKED_HOLD"),
        Refused("GRANT_IN_DOUBT"),
    ];
    match then.split(' ').next().unwrap_or("") {
        "until-head" => vec![
            BecameHead(None),
            BecameHead(Some(5)),
            Ended(crate::lock::wait::wait_end::Ended::Deadline),
        ],
        "check-answer" => [&handed[..], &[NoAnswer]].concat(),
        "attempt" => [
            &txn[..],
            &[Ended(crate::lock::wait::wait_end::Ended::Draining)],
        ]
        .concat(),
        "await-attempt" => txn.to_vec(),
        "watch" => [
            &handed[..],
            &[
                ReleaseSeen,
                WatchBroken,
                Ended(crate::lock::wait::wait_end::Ended::Deadline),
            ],
        ]
        .concat(),
        "pause" => vec![Paused, Ended(crate::lock::wait::wait_end::Ended::Deadline)],
        "withdraw" => vec![Withdrawn, OfferTaken, Fenced, Refused("NO_QUORUM")],
        "await-answer" => handed.to_vec(),
        "read-back" => vec![ReadBack(Some(9)), ReadBack(None), Refused("NO_QUORUM")],
        "grant" | "refuse" => vec![],
        other => panic!("unknown then {other}"),
    }
}

type Row = (&'static str, St, Ev, St, Effects, &'static str);

const NONE: Effects = Effects {
    stand: false,
    seen: None,
};
const RESTAND: Effects = Effects {
    stand: true,
    seen: Some(Seen::Released),
};
const RELEASED: Effects = Effects {
    stand: false,
    seen: Some(Seen::Released),
};
const fn held(r: i64) -> Effects {
    Effects {
        stand: false,
        seen: Some(Seen::Held(r)),
    }
}

/// Every pair a driver can produce: (why, state, event) -> (state, effects, then).
fn table() -> Vec<Row> {
    use Ended::{Deadline, Draining};
    use St::*;
    vec![
        // queued
        (
            "a new head checks its offer first",
            Queued,
            Ev::BecameHead(None),
            Head(None, 0, false),
            NONE,
            "check-answer",
        ),
        (
            "a new head whose queue saw the key held",
            Queued,
            Ev::BecameHead(Some(5)),
            Head(Some(5), 0, false),
            NONE,
            "check-answer",
        ),
        (
            "the deadline before reaching the head",
            Queued,
            Ev::Ended(Deadline),
            Ending("HELD_DEADLINE", false),
            NONE,
            "withdraw",
        ),
        (
            "a drain before reaching the head",
            Queued,
            Ev::Ended(Draining),
            Ending("DRAINING", false),
            NONE,
            "withdraw",
        ),
        // the head
        (
            "nothing handed on, key state unknown: a transaction",
            Head(None, 0, false),
            Ev::NoAnswer,
            Attempting(None, false),
            NONE,
            "attempt",
        ),
        (
            "nothing handed on, key seen held: watch after it",
            Head(Some(5), 0, false),
            Ev::NoAnswer,
            Head(Some(5), 0, false),
            NONE,
            "watch 6",
        ),
        (
            "a release handed the key on",
            Head(Some(5), 0, false),
            Ev::HandedOn(7),
            Answered,
            held(7),
            "grant r7",
        ),
        (
            "a release found this session ended",
            Head(None, 0, false),
            Ev::HandedSessionGone,
            Answered,
            NONE,
            "refuse SESSION_EXPIRED",
        ),
        (
            "a release did not hand on: fresh offer, look again",
            Head(Some(5), 0, false),
            Ev::NotHandedOn,
            Head(None, 0, false),
            RESTAND,
            "check-answer",
        ),
        (
            "a release's answer lost: fresh offer, own txn reads back, the wait in doubt",
            Head(Some(5), 0, false),
            Ev::AnswerLost,
            Head(None, 0, true),
            RESTAND,
            "check-answer",
        ),
        (
            "the release seen: look again",
            Head(Some(5), 1, false),
            Ev::ReleaseSeen,
            Head(None, 0, false),
            RELEASED,
            "check-answer",
        ),
        (
            "the first broken watch: a transaction and a new watch",
            Head(Some(5), 0, false),
            Ev::WatchBroken,
            Head(None, 1, false),
            RELEASED,
            "check-answer",
        ),
        (
            "the watch keeps breaking: poll",
            Head(Some(5), 1, false),
            Ev::WatchBroken,
            Head(Some(5), 2, false),
            NONE,
            "pause",
        ),
        (
            "the poll's pause over: look again",
            Head(Some(5), 2, false),
            Ev::Paused,
            Head(None, 2, false),
            RELEASED,
            "check-answer",
        ),
        (
            "the deadline while watching",
            Head(Some(5), 0, false),
            Ev::Ended(Deadline),
            Ending("HELD_DEADLINE", false),
            NONE,
            "withdraw",
        ),
        (
            "a drain while watching",
            Head(Some(5), 0, false),
            Ev::Ended(Draining),
            Ending("DRAINING", false),
            NONE,
            "withdraw",
        ),
        // the transaction
        (
            "granted by its own transaction",
            Attempting(None, false),
            Ev::Granted(8),
            Answered,
            held(8),
            "grant r8",
        ),
        (
            "held: watch from the revision it was seen at",
            Attempting(None, false),
            Ev::Held(8),
            Head(Some(8), 0, false),
            held(8),
            "watch 9",
        ),
        // Bug 1 (found by the gate: a drain cut a transaction off and answered DRAINING
        // while the holder record named the waiter): an end mid-transaction waits for it.
        (
            "drain mid-transaction: the transaction decides",
            Attempting(None, false),
            Ev::Ended(Draining),
            Attempting(Some(Draining), false),
            NONE,
            "await-attempt",
        ),
        (
            "...and a grant it made is the answer",
            Attempting(Some(Draining), false),
            Ev::Granted(8),
            Answered,
            held(8),
            "grant r8",
        ),
        (
            "...held after the end: the end's refusal, offer first",
            Attempting(Some(Deadline), false),
            Ev::Held(8),
            Ending("HELD_DEADLINE", false),
            held(8),
            "withdraw",
        ),
        // Bug 2 (found by the gate: a head refused LEAKED_HOLD while a release handed it
        // the key left the key held with nobody told): a refusal withdraws the offer first.
        (
            "refused while an offer may be taken: withdraw first",
            Attempting(None, false),
            Ev::Refused("LEAKED_HOLD"),
            Ending("LEAKED_HOLD", false),
            NONE,
            "withdraw",
        ),
        (
            "refused after an end: the refusal, offer first",
            Attempting(Some(Deadline), false),
            Ev::Refused("MOVING"),
            Ending("MOVING", false),
            NONE,
            "withdraw",
        ),
        // ending
        (
            "withdrawn: nothing was handed on, the refusal stands",
            Ending("HELD_DEADLINE", false),
            Ev::Withdrawn,
            Answered,
            NONE,
            "refuse HELD_DEADLINE",
        ),
        (
            "taken: the release's answer decides",
            Ending("HELD_DEADLINE", false),
            Ev::OfferTaken,
            Offered("HELD_DEADLINE", false),
            NONE,
            "await-answer",
        ),
        (
            "a durable entry deleted: the record decides",
            Ending("HELD_DEADLINE", false),
            Ev::Fenced,
            Unsure("HELD_DEADLINE"),
            NONE,
            "read-back",
        ),
        (
            "the durable entry's delete failed",
            Ending("HELD_DEADLINE", false),
            Ev::Refused("NO_QUORUM"),
            Answered,
            NONE,
            "refuse NO_QUORUM",
        ),
        (
            "the taken offer handed on: a grant after all",
            Offered("DRAINING", false),
            Ev::HandedOn(7),
            Answered,
            held(7),
            "grant r7",
        ),
        (
            "the taken offer found the session ended",
            Offered("HELD_DEADLINE", false),
            Ev::HandedSessionGone,
            Answered,
            NONE,
            "refuse SESSION_EXPIRED",
        ),
        (
            "the taken offer not handed on: the refusal",
            Offered("HELD_DEADLINE", false),
            Ev::NotHandedOn,
            Answered,
            NONE,
            "refuse HELD_DEADLINE",
        ),
        // Bug 3 (found by the gate: HELD_DEADLINE answered, the handoff committed 2.5 s
        // later): a lost answer is an unknown outcome, read back, else NO_QUORUM.
        (
            "the taken offer's answer lost: read the record back",
            Offered("HELD_DEADLINE", false),
            Ev::AnswerLost,
            Unsure("NO_QUORUM"),
            NONE,
            "read-back",
        ),
        (
            "...the record is ours: a grant",
            Unsure("NO_QUORUM"),
            Ev::ReadBack(Some(7)),
            Answered,
            NONE,
            "grant r7",
        ),
        (
            "...not ours (yet): unknown, never the definite refusal",
            Unsure("NO_QUORUM"),
            Ev::ReadBack(None),
            Answered,
            NONE,
            "refuse NO_QUORUM",
        ),
        (
            "a durable wait's record not ours: its refusal",
            Unsure("HELD_DEADLINE"),
            Ev::ReadBack(None),
            Answered,
            NONE,
            "refuse HELD_DEADLINE",
        ),
        (
            "the read back failed",
            Unsure("HELD_DEADLINE"),
            Ev::Refused("NO_QUORUM"),
            Answered,
            NONE,
            "refuse NO_QUORUM",
        ),
        // Bug 4 (found by the gate in CI: a release's handoff sent to an etcd leader that
        // was stopped timed out, the head kept waiting and was answered HELD_DEADLINE, and
        // the handoff committed 1.4 s later when the leader resumed): the doubt a lost answer
        // leaves is carried to the end of the wait, whose refusal is read back first.
        (
            "in doubt: the doubt goes through the head's looks",
            Head(None, 0, true),
            Ev::NoAnswer,
            Attempting(None, true),
            NONE,
            "attempt",
        ),
        (
            "in doubt: ...its transactions",
            Attempting(None, true),
            Ev::Held(8),
            Head(Some(8), 0, true),
            held(8),
            "watch 9",
        ),
        (
            "in doubt: ...a release not handing on",
            Head(Some(8), 0, true),
            Ev::NotHandedOn,
            Head(None, 0, true),
            RESTAND,
            "check-answer",
        ),
        (
            "in doubt: ...the release seen",
            Head(Some(8), 0, true),
            Ev::ReleaseSeen,
            Head(None, 0, true),
            RELEASED,
            "check-answer",
        ),
        (
            "in doubt: ...broken watches",
            Head(Some(8), 1, true),
            Ev::WatchBroken,
            Head(Some(8), 2, true),
            NONE,
            "pause",
        ),
        (
            "in doubt: ...the end",
            Head(Some(8), 0, true),
            Ev::Ended(Deadline),
            Ending("HELD_DEADLINE", true),
            NONE,
            "withdraw",
        ),
        (
            "in doubt: ...an end mid-transaction",
            Attempting(None, true),
            Ev::Ended(Deadline),
            Attempting(Some(Deadline), true),
            NONE,
            "await-attempt",
        ),
        (
            "in doubt: ...a refusal",
            Attempting(None, true),
            Ev::Refused("LEAKED_HOLD"),
            Ending("LEAKED_HOLD", true),
            NONE,
            "withdraw",
        ),
        (
            "in doubt: its own grant is the answer (the late handoff can no longer commit)",
            Attempting(Some(Deadline), true),
            Ev::Granted(9),
            Answered,
            held(9),
            "grant r9",
        ),
        (
            "in doubt, withdrawn: read back, never the definite refusal",
            Ending("HELD_DEADLINE", true),
            Ev::Withdrawn,
            Unsure("NO_QUORUM"),
            NONE,
            "read-back",
        ),
        (
            "in doubt, a later release took the offer: its answer decides",
            Ending("HELD_DEADLINE", true),
            Ev::OfferTaken,
            Offered("HELD_DEADLINE", true),
            NONE,
            "await-answer",
        ),
        (
            "in doubt, the later release did not hand on: read back",
            Offered("HELD_DEADLINE", true),
            Ev::NotHandedOn,
            Unsure("NO_QUORUM"),
            NONE,
            "read-back",
        ),
        (
            "in doubt, the later release handed on: a grant",
            Offered("DRAINING", true),
            Ev::HandedOn(9),
            Answered,
            held(9),
            "grant r9",
        ),
        // Bug 5 (found by the gate's bridge partition: a grant transaction held in a member
        // cut from the leader was applied after its waiter had been handed the key, had
        // released it, and was answered): a grant that could not be settled may commit once
        // the key is free again, so nothing the wait answers after it is definite.
        (
            "its own grant unsettled: the wait ends",
            Attempting(None, false),
            Ev::Refused("GRANT_IN_DOUBT"),
            Ending("GRANT_IN_DOUBT", false),
            NONE,
            "withdraw",
        ),
        (
            "unsettled, withdrawn: unknown, without a read-back",
            Ending("GRANT_IN_DOUBT", false),
            Ev::Withdrawn,
            Answered,
            NONE,
            "refuse GRANT_IN_DOUBT",
        ),
        (
            "unsettled, also in doubt of a handoff: unknown all the same",
            Ending("GRANT_IN_DOUBT", true),
            Ev::Withdrawn,
            Answered,
            NONE,
            "refuse GRANT_IN_DOUBT",
        ),
        (
            "unsettled, a release took the offer: its answer is awaited",
            Ending("GRANT_IN_DOUBT", false),
            Ev::OfferTaken,
            Offered("GRANT_IN_DOUBT", false),
            NONE,
            "await-answer",
        ),
        (
            "unsettled, handed the key: it is held, the answer stays unknown",
            Offered("GRANT_IN_DOUBT", false),
            Ev::HandedOn(9),
            Answered,
            held(9),
            "refuse GRANT_IN_DOUBT",
        ),
        (
            "unsettled, the release did not hand on",
            Offered("GRANT_IN_DOUBT", false),
            Ev::NotHandedOn,
            Answered,
            NONE,
            "refuse GRANT_IN_DOUBT",
        ),
        (
            "unsettled, the release's answer lost",
            Offered("GRANT_IN_DOUBT", true),
            Ev::AnswerLost,
            Answered,
            NONE,
            "refuse GRANT_IN_DOUBT",
        ),
        (
            "unsettled, its session ended: no put on its lease can commit",
            Offered("GRANT_IN_DOUBT", false),
            Ev::HandedSessionGone,
            Answered,
            NONE,
            "refuse SESSION_EXPIRED",
        ),
        (
            "unsettled, a durable entry deleted: unknown, without a read-back",
            Ending("GRANT_IN_DOUBT", false),
            Ev::Fenced,
            Answered,
            NONE,
            "refuse GRANT_IN_DOUBT",
        ),
    ]
}

fn run(state: St, event: Ev) -> (St, Effects, String) {
    let t = step(state.make(), event.make());
    (St::of(&t.state), t.effects, then(&t.then))
}

#[test]
fn transition_table() {
    for (why, state, event, want_state, want_effects, want_then) in table() {
        let got = run(state, event);
        assert_eq!(
            got,
            (want_state, want_effects, want_then.to_owned()),
            "{why}: {state:?} on {event:?}"
        );
    }
}

/// From every state the table reaches, every event its `then` can produce has a row, so
/// no driver can fall into "no transition" — and the pairs that no driver produces do.
#[test]
fn every_reachable_pair_has_a_row() {
    let rows = table();
    // A row for the same kind of state and the same kind of event.
    let has_row = |state: St, ev: Ev| {
        rows.iter().any(|r| {
            std::mem::discriminant(&r.1) == std::mem::discriminant(&state)
                && r.2.kind() == ev.kind()
        })
    };
    let mut reached: Vec<(St, String)> = vec![];
    let start = start();
    reached.push((St::of(&start.state), then(&start.then)));
    let ending = end_with(ArbiterError::HeldDeadline);
    reached.push((St::of(&ending.state), then(&ending.then)));
    for (_, state, event, _, _, _) in &rows {
        let (s, _, t) = run(*state, *event);
        reached.push((s, t));
    }
    for (state, then) in &reached {
        for ev in produces(then) {
            assert!(
                has_row(*state, ev),
                "{state:?} after {then}: no row for {ev:?}"
            );
            let (s, _, t) = run(*state, ev);
            assert!(
                !(s == St::Answered && t == "refuse INTERNAL"),
                "{state:?} on {ev:?}: no transition"
            );
        }
    }
    // A pair no driver makes is an internal error answer, never a panic.
    for ev in Ev::ALL {
        let (s, _, t) = run(St::Answered, ev);
        assert_eq!((s, t.as_str()), (St::Answered, "refuse INTERNAL"), "{ev:?}");
    }
}

/// The start of each kind of wait.
#[test]
fn starts() {
    let t = start();
    assert_eq!(
        (St::of(&t.state), t.effects, then(&t.then)),
        (
            St::Queued,
            Effects {
                stand: true,
                seen: None
            },
            "until-head".into()
        )
    );
    let t = end_with(ArbiterError::Draining);
    assert_eq!(
        (St::of(&t.state), then(&t.then)),
        (St::Ending("DRAINING", false), "withdraw".into())
    );
    assert_eq!(
        RESTAND.list().collect::<Vec<_>>(),
        vec![Effect::Stand, Effect::SawReleased]
    );
    assert_eq!(held(3).list().collect::<Vec<_>>(), vec![Effect::SawHeld(3)]);
}

/// A grant of an exclusive key tells the queue the key is held (the next head watches); a
/// semaphore's permit does not (other permits may be free: the next head attempts). Found
/// when every waiter after the first watched while two permits stood free.
#[test]
fn only_an_exclusive_grant_marks_the_key_held_for_the_next_head() {
    let attempting = || State::Attempting {
        ended: None,
        doubt: false,
    };
    let exclusive = step(attempting(), Event::Granted(grant(9)));
    assert_eq!(
        exclusive.effects.list().collect::<Vec<_>>(),
        vec![Effect::SawHeld(9)]
    );
    let permit = Grant {
        permit: Some(1),
        ..grant(9)
    };
    let head = State::Head {
        held_at: None,
        broken: 0,
        doubt: false,
    };
    for (state, event) in [
        (attempting(), Event::Granted(permit.clone())),
        (head, Event::HandedOn(permit)),
    ] {
        let t = step(state, event);
        assert_eq!(t.effects.list().count(), 0);
        assert!(matches!(t.then, Then::Answer(Ok(_))));
    }
}
