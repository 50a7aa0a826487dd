//! The checks on hand-made histories: each violation kind is reported, and the
//! legitimate look-alikes (a paused holder past its TTL, a retried grant) are not.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use crate::history::{Event, Phase, operations};
use crate::store_log::{StoreEvent, StoreTruth};

const K: &str = "pay/gate/k";

fn tok(rev: u64) -> u64 {
    (1 << 48) | rev
}

/// Builds events: (client, op, t, phase, kind, session, token).
fn ev(c: u32, op: u64, t: u64, ph: Phase, f: Kind, s: i64, token: Option<u64>) -> Event {
    Event {
        c,
        op,
        t,
        ph,
        f,
        key: Some(K.into()),
        session: Some(s),
        token,
        why: None,
        via: None,
    }
}

/// A grant [t0, t1] and a release invoked at t2 (acknowledged at t2 + 1).
fn hold(c: u32, s: i64, rev: u64, t0: u64, t1: u64, t2: u64) -> Vec<Event> {
    vec![
        ev(c, 1, t0, Phase::Invoke, Kind::Acquire, s, None),
        ev(c, 1, t1, Phase::Ok, Kind::Acquire, s, Some(tok(rev))),
        ev(c, 2, t2, Phase::Invoke, Kind::Release, s, Some(tok(rev))),
        ev(c, 2, t2 + 1, Phase::Ok, Kind::Release, s, None),
    ]
}

/// As [`hold`], but the release is refused with `why`.
fn hold_refused(c: u32, s: i64, rev: u64, t: [u64; 3], why: &str) -> Vec<Event> {
    let mut e = hold(c, s, rev, t[0], t[1], t[2]);
    e[3].ph = Phase::Fail;
    e[3].why = Some(why.into());
    e
}

fn epoch_write(rev: i64) -> StoreEvent {
    StoreEvent {
        revision: rev,
        seen: 0,
        key: "/sys/epoch".into(),
        delete: false,
        create_revision: 1,
        lease: 0,
        holder: None,
    }
}

fn put(rev: i64, lease: i64) -> StoreEvent {
    StoreEvent {
        revision: rev,
        seen: 0,
        key: format!("/l/{K}"),
        delete: false,
        create_revision: rev,
        lease,
        holder: None,
    }
}

fn del(rev: i64, created: i64, lease: i64) -> StoreEvent {
    StoreEvent {
        revision: rev,
        seen: 0,
        key: format!("/l/{K}"),
        delete: true,
        create_revision: created,
        lease,
        holder: None,
    }
}

fn session_end(rev: i64, lease: i64) -> StoreEvent {
    StoreEvent {
        revision: rev,
        seen: 0,
        key: format!("/s/{lease:x}"),
        delete: true,
        create_revision: 1,
        lease,
        holder: None,
    }
}

fn run(mut events: Vec<Event>, store: &[StoreEvent]) -> Vec<Violation> {
    events.sort_by_key(|e| e.t);
    check(&operations(&events), &StoreTruth::from_events(store))
}

fn checks(v: &[Violation]) -> Vec<&'static str> {
    v.iter().map(|v| v.check).collect()
}

#[test]
fn a_clean_handoff_passes() {
    let mut e = hold(1, 10, 5, 0, 10, 20);
    e.extend(hold(2, 11, 7, 5, 30, 40));
    let store = [put(5, 10), del(6, 5, 10), put(7, 11), del(8, 7, 11)];
    assert_eq!(run(e, &store), vec![]);
}

#[test]
fn overlapping_holds_are_caught() {
    let mut e = hold(1, 10, 5, 0, 10, 50);
    e.extend(hold(2, 11, 7, 5, 30, 40));
    // The first hold was deleted by a release-like delete, not by its session ending.
    let store = [put(5, 10), del(6, 5, 10), put(7, 11), del(8, 7, 11)];
    assert_eq!(checks(&run(e, &store)), vec!["exclusion"]);
}

#[test]
fn a_paused_holder_past_its_ttl_is_not_a_violation() {
    // Its release, when it resumes, is refused: the session is gone.
    let mut e = hold_refused(1, 10, 5, [0, 10, 50], "SESSION_EXPIRED");
    e.extend(hold(2, 11, 7, 5, 30, 40));
    // Session 10 expired at revision 6, taking its hold with it, before revision 7.
    let store = [
        put(5, 10),
        del(6, 5, 10),
        session_end(6, 10),
        put(7, 11),
        del(8, 7, 11),
    ];
    assert_eq!(run(e, &store), vec![]);
}

#[test]
fn a_smaller_token_after_a_larger_one_is_caught() {
    let mut e = hold(1, 10, 9, 0, 10, 20);
    e.extend(hold(2, 11, 7, 25, 30, 40));
    let store = [put(9, 10), del(12, 9, 10), put(7, 11), del(13, 7, 11)];
    assert_eq!(checks(&run(e, &store)), vec!["token-order"]);
}

#[test]
fn a_token_given_to_two_sessions_is_caught() {
    let mut e = hold(1, 10, 9, 0, 10, 20);
    e.extend(hold(2, 11, 9, 25, 30, 40));
    // The record is on session 10's lease: the second grantee's token is not its own.
    let store = [put(9, 10), del(10, 9, 10)];
    assert_eq!(checks(&run(e, &store)), vec!["token-unique", "backed"]);
}

#[test]
fn a_token_given_to_two_sessions_at_once_is_caught() {
    // Concurrent grants: neither was acknowledged before the other was asked for, so no
    // order constrains them; the token is still one session's only.
    let mut e = hold(1, 10, 9, 0, 20, 30);
    e.extend(hold(2, 11, 9, 5, 25, 35));
    let store = [put(9, 10), del(10, 9, 10)];
    assert_eq!(checks(&run(e, &store)), vec!["token-unique", "backed"]);
}

#[test]
fn a_holder_record_on_another_lease_is_caught() {
    let e = hold(1, 10, 5, 0, 10, 20);
    let store = [put(5, 99), del(6, 5, 99)];
    assert_eq!(checks(&run(e, &store)), vec!["backed"]);
}

#[test]
fn a_holder_record_naming_another_identity_is_caught() {
    let e = hold(1, 10, 5, 0, 10, 20);
    let mut p = put(5, 10);
    p.holder = Some(lock_integration::registry::gate_id(1));
    assert_eq!(run(e.clone(), &[p.clone(), del(6, 5, 10)]), vec![]);
    p.holder = Some(lock_integration::registry::gate_id(2));
    assert_eq!(checks(&run(e, &[p, del(6, 5, 10)])), vec!["backed"]);
}

#[test]
fn a_token_of_an_epoch_the_store_had_left_is_caught() {
    // Epoch 1 from revision 1, epoch 2 from revision 4: a grant at revision 5 with an
    // epoch-1 token (an arbiter that skipped the epoch compare).
    let e = hold(1, 10, 5, 0, 10, 20);
    let store = [epoch_write(1), epoch_write(4), put(5, 10), del(6, 5, 10)];
    assert_eq!(checks(&run(e, &store)), vec!["backed"]);
    let e = hold(1, 10, 3, 0, 10, 20);
    let store = [epoch_write(1), put(3, 10), del(4, 3, 10), epoch_write(5)];
    assert_eq!(run(e, &store), vec![]);
}

#[test]
fn an_own_live_grant_refused_stale_is_caught() {
    let e = hold_refused(1, 10, 5, [0, 10, 20], "STALE_TOKEN");
    assert_eq!(checks(&run(e, &[put(5, 10)])), vec!["release"]);
}

#[test]
fn a_release_acknowledged_after_the_store_revoked_the_hold_is_caught() {
    let e = hold(1, 10, 5, 0, 10, 20);
    let store = [put(5, 10), del(6, 5, 10), session_end(6, 10)];
    assert_eq!(checks(&run(e, &store)), vec!["release"]);
    let e = hold(1, 10, 5, 0, 10, 20);
    assert_eq!(
        checks(&run(e, &[put(5, 10)])),
        vec!["release"],
        "never deleted"
    );
}

#[test]
fn the_postgres_fence_accepting_one_token_twice_is_caught() {
    let e = vec![
        ev(1, 1, 0, Phase::Invoke, Kind::PgWrite, 10, Some(tok(9))),
        ev(1, 1, 1, Phase::Ok, Kind::PgWrite, 10, None),
        ev(1, 2, 2, Phase::Invoke, Kind::PgWrite, 10, Some(tok(9))),
        ev(1, 2, 3, Phase::Ok, Kind::PgWrite, 10, None),
        // The register is not strict: its holder may write again with its token.
        ev(1, 3, 4, Phase::Invoke, Kind::Write, 10, Some(tok(9))),
        ev(1, 3, 5, Phase::Ok, Kind::Write, 10, None),
        ev(1, 4, 6, Phase::Invoke, Kind::Write, 10, Some(tok(9))),
        ev(1, 4, 7, Phase::Ok, Kind::Write, 10, None),
    ];
    assert_eq!(checks(&run(e, &[])), vec!["fence"]);
}

#[test]
fn a_retried_grant_of_the_same_session_is_one_hold() {
    let mut e = vec![
        ev(1, 1, 0, Phase::Invoke, Kind::Acquire, 10, None),
        ev(1, 1, 10, Phase::Info, Kind::Acquire, 10, None),
        ev(1, 2, 11, Phase::Invoke, Kind::Acquire, 10, None),
        ev(1, 2, 12, Phase::Ok, Kind::Acquire, 10, Some(tok(5))),
        ev(1, 3, 13, Phase::Invoke, Kind::Acquire, 10, None),
        ev(1, 3, 14, Phase::Ok, Kind::Acquire, 10, Some(tok(5))),
    ];
    e.extend(hold(2, 11, 8, 1, 30, 40));
    e.push(ev(1, 4, 20, Phase::Invoke, Kind::Release, 10, Some(tok(5))));
    let store = [put(5, 10), del(6, 5, 10), put(8, 11), del(9, 8, 11)];
    assert_eq!(run(e, &store), vec![]);
}

#[test]
fn a_grant_without_a_holder_record_is_caught() {
    let e = hold(1, 10, 5, 0, 10, 20);
    assert_eq!(checks(&run(e, &[])), vec!["backed"]);
}

#[test]
fn unknown_outcomes_constrain_nothing() {
    let e = vec![
        ev(1, 1, 0, Phase::Invoke, Kind::Acquire, 10, None),
        ev(2, 1, 1, Phase::Invoke, Kind::Acquire, 11, None),
        ev(2, 1, 2, Phase::Info, Kind::Acquire, 11, None),
    ];
    assert_eq!(run(e, &[]), vec![]);
}

#[test]
fn a_fence_accepting_a_lower_token_is_caught() {
    let e = vec![
        ev(1, 1, 0, Phase::Invoke, Kind::PgWrite, 10, Some(tok(9))),
        ev(1, 1, 1, Phase::Ok, Kind::PgWrite, 10, None),
        ev(2, 1, 2, Phase::Invoke, Kind::PgWrite, 11, Some(tok(7))),
        ev(2, 1, 3, Phase::Ok, Kind::PgWrite, 11, None),
        // Refused lower writes are the fence working.
        ev(3, 1, 4, Phase::Invoke, Kind::Write, 12, Some(tok(9))),
        ev(3, 1, 5, Phase::Ok, Kind::Write, 12, None),
        ev(4, 1, 6, Phase::Invoke, Kind::Write, 13, Some(tok(7))),
        ev(4, 1, 7, Phase::Fail, Kind::Write, 13, None),
    ];
    assert_eq!(checks(&run(e, &[])), vec!["fence"]);
}
