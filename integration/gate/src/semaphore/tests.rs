//! A semaphore's rules on hand-made histories (N = 3): three holders at once pass, a fourth
//! (on a permit N, or on a permit held) is caught by the per-key checks, the store's
//! replay and the linearizability search alike, and the look-alikes (a holder whose session
//! the store ended first, writes of different permits out of token order) are not.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use crate::checker::check;
use crate::history::{Event, Kind, Phase, operations};
use crate::linearize::{self, Verdict};
use crate::store_log::StoreEvent;

fn key() -> String {
    format!("{GATE_SEM_PREFIX}/t/g0/k0")
}

fn tok(rev: u64) -> u64 {
    (1 << 48) | rev
}

fn ev(c: u32, op: u64, t: u64, ph: Phase, f: Kind, s: i64) -> Event {
    Event {
        c,
        op,
        t,
        ph,
        f,
        key: Some(key()),
        session: Some(s),
        token: None,
        why: None,
        via: None,
        served: None,
        rev: None,
        set: None,
        shared: false,
        permit: None,
    }
}

/// Client `c` (session `s`) granted `permit` at revision `rev` over [t0, t1], writing to
/// the register under it at t1 + 1 (accepted), releasing at t2.
fn hold(c: u32, s: i64, permit: u32, rev: u64, t0: u64, t1: u64, t2: u64) -> Vec<Event> {
    let with = |mut e: Event, token: bool| {
        if token {
            e.token = Some(tok(rev));
        }
        e.permit = Some(permit);
        e
    };
    vec![
        ev(c, 1, t0, Phase::Invoke, Kind::Acquire, s),
        with(ev(c, 1, t1, Phase::Ok, Kind::Acquire, s), true),
        with(ev(c, 2, t1 + 1, Phase::Invoke, Kind::Write, s), true),
        ev(c, 2, t1 + 2, Phase::Ok, Kind::Write, s),
        with(ev(c, 3, t2, Phase::Invoke, Kind::Release, s), true),
        ev(c, 3, t2 + 1, Phase::Ok, Kind::Release, s),
    ]
}

fn record(rev: i64, permit: u32, lease: i64, delete: bool, seen: u64) -> StoreEvent {
    StoreEvent {
        revision: rev,
        seen,
        key: format!("/p/{}//{permit}", key()),
        delete,
        create_revision: rev,
        lease,
        holder: None,
        hold: None,
        epoch: None,
    }
}

/// Permit `permit`'s record made at `rev` on `lease`, seen by the watcher at `seen`.
fn made(rev: i64, permit: u32, lease: i64, seen: u64) -> StoreEvent {
    record(rev, permit, lease, false, seen)
}

/// The delete at `rev` of the record made at `hold`.
fn gone(rev: i64, hold: i64, permit: u32, lease: i64, seen: u64) -> StoreEvent {
    let mut e = record(rev, permit, lease, true, seen);
    e.hold = Some(hold);
    e.create_revision = hold;
    e
}

fn session_end(rev: i64, lease: i64, seen: u64) -> StoreEvent {
    StoreEvent {
        revision: rev,
        seen,
        key: format!("/s/{lease:x}"),
        delete: true,
        create_revision: 1,
        lease,
        holder: None,
        hold: None,
        epoch: None,
    }
}

/// The checks that fire, and the search's verdict on the key.
fn verdict(mut events: Vec<Event>, store: &[StoreEvent]) -> (Vec<&'static str>, Verdict) {
    events.sort_by_key(|e| e.t);
    let ops = operations(&events);
    let truth = StoreTruth::from_events(store);
    let mut found: Vec<&'static str> = check(&ops, &truth).iter().map(|v| v.check).collect();
    found.sort_unstable();
    found.dedup();
    let verdicts = linearize::check_all(&ops, &truth, 100_000);
    (found, verdicts[&key()].0.clone())
}

/// Three clients on permits 0, 1, 2 at once, then a fourth once one left.
fn three_then_a_fourth() -> (Vec<Event>, Vec<StoreEvent>) {
    let mut e = hold(1, 0x10, 0, 5, 0, 10, 100);
    e.extend(hold(2, 0x20, 1, 6, 5, 20, 110));
    e.extend(hold(3, 0x30, 2, 7, 8, 30, 120));
    e.extend(hold(4, 0x40, 0, 11, 90, 105, 130));
    let store = vec![
        made(5, 0, 0x10, 10),
        made(6, 1, 0x20, 20),
        made(7, 2, 0x30, 30),
        gone(10, 5, 0, 0x10, 101),
        made(11, 0, 0x40, 105),
        gone(12, 6, 1, 0x20, 111),
        gone(13, 7, 2, 0x30, 121),
        gone(14, 11, 0, 0x40, 131),
    ];
    (e, store)
}

#[test]
fn n_holders_at_once_pass() {
    let (e, store) = three_then_a_fourth();
    assert_eq!(verdict(e, &store), (vec![], Verdict::Linearizable));
    assert_eq!(most_at_once(&StoreTruth::from_events(&store)), 3);
}

#[test]
fn an_n_plus_first_on_permit_n_is_caught() {
    let (mut e, mut store) = three_then_a_fourth();
    // The fourth is granted permit 3 while the three hold (semaphore-over-grant).
    e.extend(hold(5, 0x50, 3, 8, 40, 50, 60));
    store.push(made(8, 3, 0x50, 50));
    store.push(gone(9, 8, 3, 0x50, 61));
    store.sort_by_key(|s| s.revision);
    // Its write and the first holder's went to different fences: no fence finding.
    let (found, lin) = verdict(e, &store);
    assert_eq!(found, vec!["semaphore", "semaphore-store"]);
    assert_eq!(lin, Verdict::NotLinearizable);
}

#[test]
fn a_second_holder_of_one_permit_is_caught() {
    let (mut e, mut store) = three_then_a_fourth();
    // Permit 1 given again while its holder holds: one holder per permit, and four at once.
    e.extend(hold(5, 0x50, 1, 8, 40, 50, 60));
    store.push(made(8, 1, 0x50, 50));
    store.push(gone(9, 8, 1, 0x50, 61));
    store.sort_by_key(|s| s.revision);
    let (found, lin) = verdict(e, &store);
    assert!(found.contains(&"exclusion"), "{found:?}");
    assert!(found.contains(&"semaphore"), "{found:?}");
    assert_eq!(lin, Verdict::NotLinearizable);
}

#[test]
fn a_holder_whose_session_ended_first_is_excused() {
    let (mut e, mut store) = three_then_a_fourth();
    // Client 1's session ended at revision 8 (a frozen holder past its TTL, still believing
    // it holds permit 0 until 100); client 5 was then given permit 0 at 9, and wrote.
    e.retain(|x| x.c != 4);
    e.extend(hold(5, 0x50, 0, 9, 40, 50, 60));
    store.retain(|s| s.lease != 0x40);
    store.retain(|s| !(s.delete && s.lease == 0x10));
    store.push(session_end(8, 0x10, 38));
    store.push(gone(8, 5, 0, 0x10, 38));
    store.push(made(9, 0, 0x50, 50));
    store.push(gone(10, 9, 0, 0x50, 61));
    store.sort_by_key(|s| s.revision);
    // Client 1's release of a hold the store took away: refused STALE_TOKEN, as it is.
    let release = e
        .iter()
        .position(|x| x.c == 1 && x.f == Kind::Release && x.ph == Phase::Ok)
        .unwrap();
    e[release].ph = Phase::Fail;
    e[release].why = Some("STALE_TOKEN".into());
    // Its write came after client 5's on the same permit: refused by the permit's fence.
    let write = e
        .iter()
        .position(|x| x.c == 1 && x.f == Kind::Write && x.ph == Phase::Invoke)
        .unwrap();
    e[write].t = 70;
    e[write + 1].t = 71;
    e[write + 1].ph = Phase::Fail;
    e[write + 1].why = Some("STALE".into());
    assert_eq!(verdict(e, &store), (vec![], Verdict::Linearizable));
}

#[test]
fn fences_are_per_permit() {
    let (mut e, store) = three_then_a_fourth();
    // Permit 0's holder writes again late, under its token 5, after permit 2's 7 was
    // accepted: another permit's fence, so accepted and fine.
    let mut late = hold(1, 0x10, 0, 5, 0, 10, 100)[2..4].to_vec();
    for (i, x) in late.iter_mut().enumerate() {
        x.op = 9;
        x.t = 80 + i as u64;
    }
    e.extend(late.clone());
    assert_eq!(verdict(e.clone(), &store).0, Vec::<&str>::new());
    // On its own permit, after the later holder of permit 0 (11) wrote: a stale write
    // accepted.
    for (i, x) in late.iter_mut().enumerate() {
        x.op = 10;
        x.t = 115 + i as u64;
    }
    e.extend(late);
    assert_eq!(verdict(e, &store).0, vec!["fence"]);
}

#[test]
fn held_with_a_permit_free_is_not_linearizable() {
    let (mut e, store) = three_then_a_fourth();
    let mut held = vec![
        ev(6, 1, 140, Phase::Invoke, Kind::Acquire, 0x60),
        ev(6, 1, 145, Phase::Fail, Kind::Acquire, 0x60),
    ];
    held[1].why = Some("HELD".into());
    e.extend(held.clone());
    // Every permit was free by then.
    assert_eq!(verdict(e.clone(), &store).1, Verdict::NotLinearizable);
    // While the three held, HELD is right.
    held[0].t = 35;
    held[1].t = 36;
    let (mut e, store) = three_then_a_fourth();
    e.extend(held);
    assert_eq!(verdict(e, &store), (vec![], Verdict::Linearizable));
}

#[test]
fn two_permits_on_one_session_in_the_store_are_caught() {
    let (e, mut store) = three_then_a_fourth();
    // Client 4's session (holding permit 0 from 11 to 14) given permit 1 too, at 12.
    store.push(made(12, 1, 0x40, 112));
    assert_eq!(verdict(e, &store).0, vec!["semaphore-store"]);
}

#[test]
fn only_the_gate_semaphore_class_has_permits() {
    assert_eq!(permits(&key()), Some(GATE_SEM_PERMITS));
    assert_eq!(permits(&format!("{GATE_SEM_PREFIX}x/k")), None);
    assert_eq!(permits("pay/gate/r1/g0/k0"), None);
}
