//! The reader–writer rules on hand-made store logs and histories: each breach is
//! reported, and the look-alikes that are not breaches (readers together, a writer after
//! the readers drained, a reader refused after its session ended) are not.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use crate::checker;
use crate::history::{Event, Phase, operations};
use crate::linearize::{self, Verdict};

const K: &str = "pay/shared/run/g0/k0";

fn tok(rev: u64) -> u64 {
    (1 << 48) | rev
}

/// A store event on `etcd_key` at `rev` (lease `lease`); a delete names the revision that
/// made the record.
fn se(rev: i64, etcd_key: String, delete: bool, made: i64, lease: i64) -> StoreEvent {
    StoreEvent {
        revision: rev,
        seen: u64::try_from(rev).unwrap() * 1000,
        key: etcd_key,
        delete,
        create_revision: made,
        lease,
        holder: None,
        hold: Some(made),
        epoch: None,
    }
}

fn excl() -> String {
    format!("/l/{K}")
}
fn reader(lease: i64) -> String {
    format!("/r/{K}//s/{lease:x}")
}
fn mark(lease: i64) -> String {
    format!("/r/{K}//w/{lease:x}")
}

/// (case, store log, the conflicts' revisions it must show)
fn store_cases() -> Vec<(&'static str, Vec<StoreEvent>, Vec<i64>)> {
    vec![
        (
            "two readers together",
            vec![
                se(5, reader(1), false, 5, 1),
                se(6, reader(2), false, 6, 2),
                se(7, reader(1), true, 5, 1),
                se(8, reader(2), true, 6, 2),
            ],
            vec![],
        ),
        (
            "a writer marks, the readers drain, the writer is granted (its mark deleted in the grant)",
            vec![
                se(5, reader(1), false, 5, 1),
                se(6, mark(3), false, 6, 3),
                se(7, reader(1), true, 5, 1),
                se(8, mark(3), true, 6, 3),
                se(8, excl(), false, 8, 3),
            ],
            vec![],
        ),
        (
            "a reader granted while a writer waits",
            vec![
                se(5, reader(1), false, 5, 1),
                se(6, mark(3), false, 6, 3),
                se(7, reader(2), false, 7, 2),
            ],
            vec![7],
        ),
        (
            "a reader granted after the waiting writer's session ended",
            vec![
                se(6, mark(3), false, 6, 3),
                se(7, mark(3), true, 6, 3),
                se(8, reader(2), false, 8, 2),
            ],
            vec![],
        ),
        (
            "a writer granted over a reader",
            vec![se(5, reader(1), false, 5, 1), se(6, excl(), false, 6, 3)],
            vec![6],
        ),
        (
            "a reader granted over a writer",
            vec![se(5, excl(), false, 5, 3), se(6, reader(1), false, 6, 1)],
            vec![6],
        ),
        (
            "an epoch advance ends both, then a reader",
            vec![
                se(5, excl(), false, 5, 3),
                se(6, excl(), true, 5, 3),
                se(6, reader(1), true, 4, 1),
                se(7, reader(2), false, 7, 2),
            ],
            vec![],
        ),
    ]
}

#[test]
fn the_store_replay_reports_exactly_the_breaches() {
    for (case, log, want) in store_cases() {
        let got: Vec<i64> = replay(&log).conflicts.iter().map(|c| c.revision).collect();
        assert_eq!(got, want, "{case}");
    }
}

#[test]
fn the_replay_counts_overlapping_readers_and_marks() {
    let r = replay(&store_cases()[0].1);
    assert_eq!(
        (r.shared_made, r.shared_overlapping, r.marks_made),
        (2, 1, 0)
    );
    let r = replay(&store_cases()[1].1);
    assert_eq!(
        (r.shared_made, r.shared_overlapping, r.marks_made),
        (1, 0, 1)
    );
}

fn op_event(c: u32, op: u64, t: u64, ph: Phase, f: Kind, s: i64, token: Option<u64>) -> Event {
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

/// A hold [t0 asked, t1 granted], a read or write at t2 (answered `ok`), its release at
/// t3; `shared`: a reader.
fn round(c: u32, s: i64, rev: u64, t: [u64; 4], shared: bool, ok: bool) -> Vec<Event> {
    let f = if shared { Kind::Read } else { Kind::Write };
    let mut e = vec![
        op_event(c, 1, t[0], Phase::Invoke, Kind::Acquire, s, None),
        op_event(c, 1, t[1], Phase::Ok, Kind::Acquire, s, Some(tok(rev))),
        op_event(c, 2, t[2], Phase::Invoke, f, s, Some(tok(rev))),
        op_event(c, 2, t[2] + 1, Phase::Ok, f, s, None),
        op_event(c, 3, t[3], Phase::Invoke, Kind::Release, s, Some(tok(rev))),
        op_event(c, 3, t[3] + 1, Phase::Ok, Kind::Release, s, None),
    ];
    if !ok {
        e[3].ph = Phase::Fail;
        e[3].why = Some("STALE".into());
    }
    for x in [0, 1, 4, 5] {
        e[x].shared = shared;
    }
    e
}

fn violations(mut events: Vec<Event>, store: &[StoreEvent]) -> Vec<&'static str> {
    events.sort_by_key(|e| e.t);
    let ops = operations(&events);
    let truth = StoreTruth::from_events(store);
    let mut v: Vec<&'static str> = checker::check(&ops, &truth)
        .iter()
        .map(|v| v.check)
        .collect();
    if linearize::check_key(K, &ops.iter().collect::<Vec<_>>(), &[], &truth, 100_000)
        != Verdict::Linearizable
    {
        v.push("linearizable");
    }
    v
}

#[test]
fn readers_overlap_and_a_writer_follows_them() {
    let mut e = round(1, 1, 5, [0, 10, 20, 40], true, true);
    e.extend(round(2, 2, 6, [5, 15, 25, 45], true, true));
    e.extend(round(3, 3, 9, [12, 60, 70, 80], false, true));
    let store = [
        se(5, reader(1), false, 5, 1),
        se(6, reader(2), false, 6, 2),
        se(7, reader(1), true, 5, 1),
        se(8, reader(2), true, 6, 2),
        se(9, excl(), false, 9, 3),
        se(10, excl(), true, 9, 3),
    ];
    assert_eq!(violations(e, &store), Vec::<&str>::new());
}

#[test]
fn a_writer_held_beside_a_reader_is_caught_by_every_check() {
    let mut e = round(1, 1, 5, [0, 10, 50, 60], true, false);
    e.extend(round(3, 3, 6, [12, 20, 30, 40], false, true));
    let store = [
        se(5, reader(1), false, 5, 1),
        se(6, excl(), false, 6, 3),
        se(7, excl(), true, 6, 3),
        se(8, reader(1), true, 5, 1),
    ];
    let v = violations(e, &store);
    for check in ["exclusion", "shared-store", "read-fence", "linearizable"] {
        assert!(v.contains(&check), "{check} missing from {v:?}");
    }
}

#[test]
fn a_reader_refused_after_its_session_ended_is_the_fence_working() {
    // The reader is frozen past its TTL: the store ends its session (and hold) at 7,
    // a writer is granted at 8 and writes; the reader resumes, is refused.
    let mut e = round(1, 1, 5, [0, 10, 90, 95], true, false);
    // Its release finds the hold gone.
    e[5].ph = Phase::Fail;
    e[5].why = Some("STALE_TOKEN".into());
    e.extend(round(3, 3, 8, [12, 60, 70, 80], false, true));
    let store = [
        se(5, reader(1), false, 5, 1),
        se(7, reader(1), true, 5, 1),
        se(7, "/s/1".into(), true, 2, 1),
        se(8, excl(), false, 8, 3),
        se(9, excl(), true, 8, 3),
    ];
    assert_eq!(violations(e, &store), Vec::<&str>::new());
}

#[test]
fn a_read_served_below_an_accepted_write_is_reported() {
    let mut e = round(3, 3, 5, [0, 10, 20, 30], false, true);
    e.extend(round(1, 1, 4, [1, 2, 40, 50], true, true));
    let got = violations(e, &[]);
    assert!(got.contains(&"read-fence"), "{got:?}");
}

#[test]
fn a_reader_that_asks_again_is_given_its_hold_back_after_later_readers() {
    // Client 1's release fails outright (NOT_CONNECTED): it still holds revision 5. Client
    // 2 is granted 6; client 1 asks again and is given 5 back: a re-answer, not a grant
    // out of token order.
    let mut e = round(1, 1, 5, [0, 10, 20, 30], true, true);
    e[5].ph = Phase::Fail;
    e[5].why = Some("NOT_CONNECTED".into());
    e.extend(round(2, 2, 6, [32, 35, 60, 70], true, true));
    let mut again = round(1, 1, 5, [40, 45, 50, 80], true, true);
    for x in &mut again {
        x.op += 10;
    }
    e.extend(again);
    let store = [
        se(5, reader(1), false, 5, 1),
        se(6, reader(2), false, 6, 2),
        se(7, reader(2), true, 6, 2),
        se(8, reader(1), true, 5, 1),
    ];
    assert_eq!(violations(e, &store), Vec::<&str>::new());
}
