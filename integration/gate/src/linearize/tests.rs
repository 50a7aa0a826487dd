//! The fenced-mutex spec and the per-key search on small hand-made histories.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use crate::history::Phase;

const K: &str = "pay/gate/k";

fn op(client: u32, kind: Kind, session: i64, token: Option<u64>, t: (u64, u64), ph: Phase) -> Op {
    Op {
        client,
        kind,
        key: Some(K.into()),
        session: Some(session),
        token,
        invoked: t.0,
        done: Some((t.1, ph)),
        why: None,
    }
}

fn refused(client: u32, session: i64, t: (u64, u64)) -> Op {
    let mut o = op(client, Kind::Acquire, session, None, t, Phase::Fail);
    o.why = Some("HELD".into());
    o
}

fn verdict(ops: &[Op], truth: &StoreTruth) -> Verdict {
    let refs: Vec<&Op> = ops.iter().collect();
    check_key(K, &refs, &[], truth, 1_000_000)
}

#[test]
fn a_handoff_with_refusals_is_linearizable() {
    let ops = vec![
        op(1, Kind::Acquire, 10, Some(5), (0, 10), Phase::Ok),
        refused(2, 11, (12, 14)),
        op(1, Kind::Release, 10, Some(5), (20, 22), Phase::Ok),
        op(2, Kind::Acquire, 11, Some(8), (15, 30), Phase::Ok),
    ];
    assert_eq!(verdict(&ops, &StoreTruth::default()), Verdict::Linearizable);
}

#[test]
fn two_holders_at_once_are_not() {
    let ops = vec![
        op(1, Kind::Acquire, 10, Some(5), (0, 10), Phase::Ok),
        op(2, Kind::Acquire, 11, Some(8), (12, 14), Phase::Ok),
        op(1, Kind::Release, 10, Some(5), (20, 22), Phase::Ok),
    ];
    assert_eq!(
        verdict(&ops, &StoreTruth::default()),
        Verdict::NotLinearizable
    );
}

#[test]
fn a_replayed_release_that_succeeds_is_not() {
    let ops = vec![
        op(1, Kind::Acquire, 10, Some(5), (0, 1), Phase::Ok),
        op(1, Kind::Release, 10, Some(5), (2, 3), Phase::Ok),
        op(1, Kind::Acquire, 10, Some(7), (4, 5), Phase::Ok),
        op(1, Kind::Release, 10, Some(5), (6, 7), Phase::Ok),
    ];
    assert_eq!(
        verdict(&ops, &StoreTruth::default()),
        Verdict::NotLinearizable
    );
}

#[test]
fn an_expired_session_frees_the_key() {
    let ops = vec![
        op(1, Kind::Acquire, 10, Some(5), (0, 10), Phase::Ok),
        op(2, Kind::Acquire, 11, Some(8), (12, 40), Phase::Ok),
        op(1, Kind::Release, 10, Some(5), (50, 52), Phase::Fail),
    ];
    let mut truth = StoreTruth::default();
    truth.session_end_seen.insert(10, 30);
    let mut ops = ops;
    ops[2].why = Some("STALE_TOKEN".into());
    assert_eq!(verdict(&ops, &truth), Verdict::Linearizable);
}

#[test]
fn a_grant_lost_in_flight_may_have_happened() {
    let mut lost = op(1, Kind::Acquire, 10, None, (0, 5), Phase::Info);
    lost.done = None;
    let ops = vec![lost, refused(2, 11, (10, 12))];
    assert_eq!(verdict(&ops, &StoreTruth::default()), Verdict::Linearizable);
}

#[test]
fn a_smaller_token_later_is_not() {
    let ops = vec![
        op(1, Kind::Acquire, 10, Some(9), (0, 1), Phase::Ok),
        op(1, Kind::Release, 10, Some(9), (2, 3), Phase::Ok),
        op(2, Kind::Acquire, 11, Some(7), (4, 5), Phase::Ok),
    ];
    assert_eq!(
        verdict(&ops, &StoreTruth::default()),
        Verdict::NotLinearizable
    );
}

#[test]
fn an_exhausted_budget_claims_nothing() {
    let ops = [
        op(1, Kind::Acquire, 10, Some(5), (0, 10), Phase::Ok),
        op(2, Kind::Acquire, 11, Some(8), (12, 14), Phase::Ok),
    ];
    let refs: Vec<&Op> = ops.iter().collect();
    assert_eq!(
        check_key(K, &refs, &[], &StoreTruth::default(), 1),
        Verdict::Unchecked
    );
}
