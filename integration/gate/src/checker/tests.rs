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
        served: None,
        rev: None,
        set: None,
        shared: false,
        permit: None,
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
        hold: None,
        epoch: None,
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
        hold: None,
        epoch: None,
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
        hold: None,
        epoch: None,
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
        hold: None,
        epoch: None,
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

fn force_record(rev: i64) -> StoreEvent {
    StoreEvent {
        revision: rev,
        seen: 0,
        key: "/sys/force/f1".into(),
        delete: false,
        create_revision: rev,
        lease: 99,
        holder: None,
        hold: None,
        epoch: None,
    }
}

#[test]
fn a_force_released_holder_that_still_believes_is_not_a_violation() {
    // Operators force-released hold 5 (its delete and the /sys/force/ record at revision
    // 6, one Txn) while client 1 still believed it held; its release is then refused.
    let mut e = hold_refused(1, 10, 5, [0, 10, 50], "STALE_TOKEN");
    e.extend(hold(2, 11, 7, 5, 30, 40));
    let forced = [
        put(5, 10),
        del(6, 5, 10),
        force_record(6),
        put(7, 11),
        del(8, 7, 11),
    ];
    assert_eq!(run(e.clone(), &forced), vec![]);
    // The same delete without the record is a release nobody made: overlapping holds.
    let unrecorded = [put(5, 10), del(6, 5, 10), put(7, 11), del(8, 7, 11)];
    assert_eq!(checks(&run(e.clone(), &unrecorded)), vec!["exclusion"]);
    // A release acknowledged after the force release is the arbiter's bug.
    let mut acked = e;
    acked[3].ph = Phase::Ok;
    acked[3].why = None;
    assert_eq!(checks(&run(acked, &forced)), vec!["release"]);
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
    // Seen from the grant (backed) and from the store's side (nobody with that identity
    // asked for the key).
    assert_eq!(
        checks(&run(e, &[p, del(6, 5, 10)])),
        vec!["backed", "store-identity"]
    );
}

/// A holder record nobody was told about (the answer of its grant was lost): only the
/// store's side can see that it names another identity than the session's owner.
#[test]
fn a_holder_record_of_a_lost_answer_naming_another_identity_is_caught() {
    let open = |c: u32, s: i64| {
        let mut e = [
            ev(c, 7, 0, Phase::Invoke, Kind::Open, 0, None),
            ev(c, 7, 1, Phase::Ok, Kind::Open, s, None),
        ];
        e[0].session = None;
        e
    };
    let mut e: Vec<Event> = open(1, 10).into();
    e.extend(open(2, 11));
    // Client 1's acquire never answered; client 2 asked for the key too.
    e.push(ev(1, 1, 2, Phase::Invoke, Kind::Acquire, 10, None));
    e.push(ev(2, 1, 2, Phase::Invoke, Kind::Acquire, 11, None));
    e.push(ev(2, 1, 3, Phase::Fail, Kind::Acquire, 11, None));
    let mut p = put(5, 10);
    p.holder = Some(lock_integration::registry::gate_id(1));
    assert_eq!(run(e.clone(), &[p.clone()]), vec![]);
    // On client 1's session, naming client 2 (who asked, and was refused).
    p.holder = Some(lock_integration::registry::gate_id(2));
    assert_eq!(
        checks(&run(e.clone(), &[p.clone()])),
        vec!["store-identity"]
    );
    // Naming an identity that never asked for the key.
    p.holder = Some(lock_integration::registry::gate_id(3));
    assert_eq!(checks(&run(e, &[p])), vec!["store-identity"]);
}

#[test]
fn an_attack_that_succeeded_is_caught_and_refused_ones_are_not() {
    let mut e = Vec::new();
    for (op, ph) in [(1, Phase::Fail), (2, Phase::Info), (3, Phase::Ok)] {
        let mut i = ev(64, op, op * 10, Phase::Invoke, Kind::Attack, 10, None);
        i.via = Some("attack:release-other-session".into());
        e.push(i);
        e.push(ev(64, op, op * 10 + 1, ph, Kind::Attack, 10, None));
    }
    let found = run(e, &[]);
    assert_eq!(checks(&found), vec!["attack"]);
    assert!(found[0].detail.contains("release-other-session"));
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

/// The arbiter names its delete's revision: a release acknowledged as a delete the store
/// does not have (another delete ended the hold) is caught.
#[test]
fn a_release_naming_another_delete_is_caught() {
    let mut e = hold(1, 10, 5, 0, 10, 20);
    e[3].rev = Some(6);
    let store = [put(5, 10), del(6, 5, 10)];
    assert_eq!(run(e.clone(), &store), vec![]);
    e[3].rev = Some(9);
    assert_eq!(checks(&run(e, &store)), vec!["release"]);
}

/// A handoff (issue 18): client 1's release writes client 2's record over its own at
/// revision 7 (create revision stays 5), answering both from that commit. Clean; and a
/// handoff nobody released (client 1's release refused) is caught.
#[test]
fn a_handoff_is_a_release_and_a_grant_in_one_write() {
    let mut e = hold(1, 10, 5, 0, 10, 20);
    e[3].rev = Some(7);
    e.extend(hold(2, 11, 7, 15, 22, 40));
    let overwrite = StoreEvent {
        revision: 7,
        seen: 21,
        key: format!("/l/{K}"),
        delete: false,
        create_revision: 5,
        lease: 11,
        holder: None,
        hold: Some(7),
        epoch: None,
    };
    let store = [put(5, 10), overwrite, del(8, 7, 11)];
    let mut store = store.to_vec();
    store[2].hold = Some(7);
    assert_eq!(run(e.clone(), &store), vec![]);
    e[3].ph = Phase::Fail;
    e[3].why = Some("STALE_TOKEN".into());
    e[3].rev = None;
    assert_eq!(checks(&run(e, &store)), vec!["release"]);
}

/// Found by the long-lived soak (a frozen etcd leader): a release of grant 5 gets no
/// answer, the client asks again and is given 5 back ("your grant back"), then the
/// unanswered release commits late and hands the key to client 2 at revision 7. The
/// client's belief in 5 ended with its own release, which the store shows at 7; only a
/// store that never ended 5 before 7 makes the overlap a violation.
fn given_back_then_released_late(store_end: i64) -> Vec<Violation> {
    let s = 10;
    let mut e = vec![
        ev(1, 1, 0, Phase::Invoke, Kind::Acquire, s, None),
        ev(1, 1, 10, Phase::Ok, Kind::Acquire, s, Some(tok(5))),
        ev(1, 2, 20, Phase::Invoke, Kind::Release, s, Some(tok(5))),
        ev(1, 2, 30, Phase::Info, Kind::Release, s, None),
        ev(1, 3, 31, Phase::Invoke, Kind::Acquire, s, None),
        ev(1, 3, 32, Phase::Ok, Kind::Acquire, s, Some(tok(5))),
    ];
    e.extend([
        ev(2, 1, 25, Phase::Invoke, Kind::Acquire, 11, None),
        ev(2, 1, 60, Phase::Ok, Kind::Acquire, 11, Some(tok(7))),
        ev(2, 2, 70, Phase::Invoke, Kind::Release, 11, Some(tok(7))),
        ev(2, 2, 71, Phase::Ok, Kind::Release, 11, None),
    ]);
    let store = [put(5, s), del(store_end, 5, s), put(7, 11), del(8, 7, 11)];
    run(e, &store)
}

#[test]
fn a_grant_given_back_ends_with_its_own_late_release() {
    assert_eq!(
        checks(&given_back_then_released_late(6)),
        Vec::<&str>::new()
    );
    // The store ended 5 only after 7 was granted: two holders.
    assert!(checks(&given_back_then_released_late(9)).contains(&"exclusion"));
}

/// A renewal answered "renewed" after the store ended the session is caught; one asked
/// before the end was seen (answered just before it, or the watcher late) is not.
#[test]
fn a_renewal_of_an_ended_session_is_caught() {
    let renewal = |op: u64, t: u64| {
        let mut invoke = ev(1, op, t, Phase::Invoke, Kind::KeepAlive, 7, None);
        invoke.key = None;
        let mut ok = ev(1, op, t + 1, Phase::Ok, Kind::KeepAlive, 7, None);
        ok.key = None;
        vec![invoke, ok]
    };
    let mut end = session_end(20, 7);
    end.seen = 100;
    let before = renewal(1, 90);
    assert!(run(before, std::slice::from_ref(&end)).is_empty());
    let after = [renewal(1, 90), renewal(2, 150)].concat();
    assert_eq!(checks(&run(after, &[end])), vec!["renewal"]);
}

/// A set's keys acknowledged with two tokens were not one transaction.
#[test]
fn a_set_granted_with_two_tokens_is_caught() {
    let part = |op: u64, key: &str, token: u64| {
        let mut invoke = ev(1, op, 10, Phase::Invoke, Kind::Acquire, 7, None);
        let mut ok = ev(1, op, 20, Phase::Ok, Kind::Acquire, 7, Some(token));
        for e in [&mut invoke, &mut ok] {
            e.key = Some(key.into());
            e.set = Some(1);
        }
        vec![invoke, ok]
    };
    let one: Vec<Event> = [part(1, "pay/gate/a", tok(9)), part(2, "pay/gate/b", tok(9))].concat();
    let mut out = Vec::new();
    sets(&operations(&one), &mut out);
    assert!(out.is_empty(), "{out:?}");
    let two: Vec<Event> = [
        part(1, "pay/gate/a", tok(9)),
        part(2, "pay/gate/b", tok(10)),
    ]
    .concat();
    sets(&operations(&two), &mut out);
    assert_eq!(checks(&out), ["set"]);
}
