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
        via: None,
        served: None,
        rev: None,
        set: None,
        shared: false,
        permit: None,
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

/// A random small history of one key: three clients, each one operation at a time, with
/// every kind of answer (and lost answers), tokens from a small range so that duplicates,
/// inversions and stale releases all occur.
fn random_history(rng: &mut rand::rngs::StdRng) -> Vec<Op> {
    use rand::Rng as _;
    let mut ops = Vec::new();
    for client in 1..=3u32 {
        let session = i64::from(client) * 10;
        let mut t = rng.random_range(0..20u64);
        for _ in 0..rng.random_range(0..4) {
            let start = t + rng.random_range(0..10);
            let end = start + rng.random_range(1..15);
            t = end + 1;
            let token = Some(rng.random_range(1..7u64));
            let mut o = if rng.random_bool(0.6) {
                match rng.random_range(0..4) {
                    0 | 1 => op(
                        client,
                        Kind::Acquire,
                        session,
                        token,
                        (start, end),
                        Phase::Ok,
                    ),
                    2 => refused(client, session, (start, end)),
                    _ => op(
                        client,
                        Kind::Acquire,
                        session,
                        None,
                        (start, end),
                        Phase::Info,
                    ),
                }
            } else {
                match rng.random_range(0..4) {
                    0 | 1 => op(
                        client,
                        Kind::Release,
                        session,
                        token,
                        (start, end),
                        Phase::Ok,
                    ),
                    2 => {
                        let mut o = op(
                            client,
                            Kind::Release,
                            session,
                            token,
                            (start, end),
                            Phase::Fail,
                        );
                        o.why = Some("STALE_TOKEN".into());
                        o
                    }
                    _ => op(
                        client,
                        Kind::Release,
                        session,
                        token,
                        (start, end),
                        Phase::Info,
                    ),
                }
            };
            if o.done.is_some_and(|(_, ph)| ph == Phase::Info) && rng.random_bool(0.5) {
                o.done = None;
            }
            ops.push(o);
        }
    }
    ops
}

#[test]
fn the_wgl_search_agrees_with_stateright_on_random_histories() {
    use rand::SeedableRng as _;
    let mut rng = rand::rngs::StdRng::seed_from_u64(17);
    let truth = StoreTruth::default();
    let (mut compared, mut not_linearizable) = (0, 0);
    for i in 0..4000 {
        let ops = random_history(&mut rng);
        let refs: Vec<&Op> = ops.iter().collect();
        let reference = check_key_stateright(K, &refs, &[], &truth, 200_000);
        if reference == Verdict::Unchecked {
            continue;
        }
        let wgl = check_key(K, &refs, &[], &truth, 1_000_000);
        assert_eq!(wgl, reference, "history {i}: {ops:#?}");
        compared += 1;
        not_linearizable += usize::from(reference == Verdict::NotLinearizable);
    }
    // Both kinds of verdict were exercised, many times.
    assert!(compared > 3000, "{compared} compared");
    assert!(
        not_linearizable > 300 && compared - not_linearizable > 300,
        "{not_linearizable} of {compared} not linearizable"
    );
}

#[test]
fn an_epoch_advance_falls_at_its_commit_revision() {
    // Client 1 holds (revision 5); the advance (write at revision 7) revokes it while client
    // 2's grant at revision 6 — which committed before the advance — is acknowledged. By
    // time alone the advance could come first and free the key for client 2; by revision it
    // comes after, so client 2 was granted a held key.
    let ops = [
        op(1, Kind::Acquire, 10, Some((1 << 48) | 5), (0, 2), Phase::Ok),
        op(
            2,
            Kind::Acquire,
            11,
            Some((1 << 48) | 6),
            (3, 20),
            Phase::Ok,
        ),
    ];
    let advance = Op {
        client: 0,
        kind: Kind::Advance,
        key: None,
        session: None,
        token: None,
        invoked: 3,
        done: Some((20, Phase::Ok)),
        why: None,
        via: None,
        served: None,
        rev: None,
        set: None,
        shared: false,
        permit: None,
    };
    let refs: Vec<&Op> = ops.iter().collect();
    let by_time = StoreTruth::default();
    assert_eq!(
        check_key(K, &refs, &[&advance], &by_time, 100_000),
        Verdict::Linearizable
    );
    let mut by_revision = StoreTruth::default();
    by_revision.epoch_writes.extend([1, 7]);
    assert_eq!(
        check_key(K, &refs, &[&advance], &by_revision, 100_000),
        Verdict::NotLinearizable
    );
}

#[test]
fn a_session_that_ended_before_it_asked_is_no_anomaly() {
    // Found by `make gate`: client 3's session ended at revision 6, before client 2's grant
    // at revision 8 was acknowledged; client 3 only learns it on its first call (t = 30),
    // answered SESSION_EXPIRED. Its end must not be placed after that call.
    let mut expired = op(3, Kind::Acquire, 12, None, (30, 31), Phase::Fail);
    expired.why = Some("SESSION_EXPIRED".into());
    let ops = [
        op(1, Kind::Acquire, 10, Some((1 << 48) | 5), (0, 2), Phase::Ok),
        op(1, Kind::Release, 10, Some((1 << 48) | 5), (3, 4), Phase::Ok),
        op(
            2,
            Kind::Acquire,
            11,
            Some((1 << 48) | 8),
            (5, 20),
            Phase::Ok,
        ),
        expired,
    ];
    let mut truth = StoreTruth::default();
    truth.session_end.insert(12, 6);
    truth.session_end_seen.insert(12, 25);
    let refs: Vec<&Op> = ops.iter().collect();
    assert_eq!(
        check_key(K, &refs, &[], &truth, 100_000),
        Verdict::Linearizable
    );
}

/// The store settles an answer that was lost: the grant created a hold on the caller's
/// lease (so a grant to someone else while it was live is a double grant), and a release
/// whose hold was never deleted did nothing.
#[test]
fn a_lost_answer_is_settled_by_the_store() {
    use crate::store_log::StoreEvent;
    let hold = |rev: i64, seen: u64, lease: i64, delete: bool| StoreEvent {
        revision: if delete { rev + 1 } else { rev },
        seen,
        key: format!("/l/{K}"),
        delete,
        create_revision: rev,
        lease,
        holder: None,
        hold: None,
        epoch: None,
    };
    let epoch = StoreEvent {
        revision: 1,
        seen: 0,
        key: "/sys/epoch".into(),
        delete: false,
        create_revision: 1,
        lease: 0,
        holder: None,
        hold: None,
        epoch: None,
    };
    let mut lost = op(1, Kind::Acquire, 10, None, (0, 5), Phase::Info);
    lost.done = None;
    // Client 2 is granted at revision 8 while client 1's hold (revision 5) lives on.
    let ops = vec![
        lost.clone(),
        op(
            2,
            Kind::Acquire,
            11,
            Some((1 << 48) | 8),
            (10, 12),
            Phase::Ok,
        ),
    ];
    let unseen = StoreTruth::default();
    assert_eq!(verdict(&ops, &unseen), Verdict::Linearizable);
    let seen =
        StoreTruth::from_events(&[epoch.clone(), hold(5, 3, 10, false), hold(8, 11, 11, false)]);
    assert_eq!(verdict(&ops, &seen), Verdict::NotLinearizable);
    // Released by client 1 (its answer lost too) before client 2's grant: fine.
    let mut rel = op(
        1,
        Kind::Release,
        10,
        Some((1 << 48) | 5),
        (6, 7),
        Phase::Info,
    );
    rel.done = None;
    let mut with_release = ops.clone();
    with_release.push(rel.clone());
    let released = StoreTruth::from_events(&[
        epoch.clone(),
        hold(5, 3, 10, false),
        hold(5, 8, 10, true),
        hold(8, 11, 11, false),
    ]);
    assert_eq!(verdict(&with_release, &released), Verdict::Linearizable);
    // The same lost release, but the store never ended the hold (client 2's grant left no
    // record): it did nothing.
    let never = StoreTruth::from_events(&[epoch.clone(), hold(5, 3, 10, false)]);
    assert_eq!(verdict(&with_release, &never), Verdict::NotLinearizable);
    // A handoff (client 2's record written over client 1's) ends the hold like a delete:
    // the lost release made it.
    assert_eq!(verdict(&with_release, &seen), Verdict::Linearizable);
}

/// Found by `make gate`: a session ended (seen at t = 25) before a call of it whose answer
/// was lost (NO_QUORUM, t = 30): that call never held the key, and the session's end must
/// not be a window that closes before it opens.
#[test]
fn a_session_that_ended_before_a_lost_call_is_no_anomaly() {
    let mut lost = op(3, Kind::Acquire, 12, None, (30, 31), Phase::Info);
    lost.why = Some("NO_QUORUM".into());
    let ops = [
        op(1, Kind::Acquire, 10, Some((1 << 48) | 5), (0, 2), Phase::Ok),
        op(
            1,
            Kind::Release,
            10,
            Some((1 << 48) | 5),
            (40, 41),
            Phase::Ok,
        ),
        lost,
    ];
    // It ended at revision 4, before client 1's grant at revision 5 (t = 0..2): placed at
    // its revision, its window must not open only at the lost call.
    let mut truth = StoreTruth::default();
    truth.session_end.insert(12, 4);
    truth.session_end_seen.insert(12, 25);
    let refs: Vec<&Op> = ops.iter().collect();
    assert_eq!(
        check_key(K, &refs, &[], &truth, 100_000),
        Verdict::Linearizable
    );
}

/// Found by `make gate`: a grant whose answer was lost (NO_QUORUM) created the hold; the
/// session's retry later got the same token back. Another client's HELD in between is
/// explained by the lost grant, which the store shows, not by the retry.
#[test]
fn a_lost_grant_answered_again_by_a_retry_explains_a_refusal_before_it() {
    use crate::store_log::StoreEvent;
    let store = [
        StoreEvent {
            revision: 1,
            seen: 0,
            key: "/sys/epoch".into(),
            delete: false,
            create_revision: 1,
            lease: 0,
            holder: None,
            hold: None,
            epoch: None,
        },
        StoreEvent {
            revision: 5,
            seen: 3,
            key: format!("/l/{K}"),
            delete: false,
            create_revision: 5,
            lease: 10,
            holder: None,
            hold: None,
            epoch: None,
        },
    ];
    let mut lost = op(1, Kind::Acquire, 10, None, (0, 2), Phase::Info);
    lost.why = Some("NO_QUORUM".into());
    let ops = vec![
        lost,
        refused(2, 11, (4, 5)),
        op(1, Kind::Acquire, 10, Some((1 << 48) | 5), (6, 7), Phase::Ok),
    ];
    assert_eq!(
        verdict(&ops, &StoreTruth::from_events(&store)),
        Verdict::Linearizable
    );
}

/// Found by `make soak` (round 2, seed 1002): a session's release of its shared hold was
/// lost (NO_QUORUM), and its next acquire of the key, exclusive, was answered LEAKED_HOLD:
/// its own shared hold still stood. That refusal is the caller's own hold, not another's.
#[test]
fn leaked_hold_to_a_session_holding_the_key_shared_is_its_own_hold() {
    let shared = |mut o: Op| {
        o.shared = true;
        o
    };
    let leaked = |client, session, t| {
        let mut o = op(client, Kind::Acquire, session, None, t, Phase::Fail);
        o.why = Some("LEAKED_HOLD".into());
        o
    };
    let mut lost_release = shared(op(1, Kind::Release, 10, Some(5), (20, 22), Phase::Info));
    lost_release.why = Some("NO_QUORUM".into());
    let ops = vec![
        shared(op(1, Kind::Acquire, 10, Some(5), (0, 10), Phase::Ok)),
        lost_release,
        leaked(1, 10, (30, 32)),
    ];
    assert_eq!(verdict(&ops, &StoreTruth::default()), Verdict::Linearizable);

    // Released for certain, nobody holds it: LEAKED_HOLD then has no hold to name.
    let ops = vec![
        shared(op(1, Kind::Acquire, 10, Some(5), (0, 10), Phase::Ok)),
        shared(op(1, Kind::Release, 10, Some(5), (20, 22), Phase::Ok)),
        leaked(1, 10, (30, 32)),
    ];
    assert_eq!(
        verdict(&ops, &StoreTruth::default()),
        Verdict::NotLinearizable
    );

    // HELD is another session's hold: the caller's own shared hold does not explain it.
    let mut held = leaked(1, 10, (30, 32));
    held.why = Some("HELD".into());
    let ops = vec![
        shared(op(1, Kind::Acquire, 10, Some(5), (0, 10), Phase::Ok)),
        held,
    ];
    assert_eq!(
        verdict(&ops, &StoreTruth::default()),
        Verdict::NotLinearizable
    );
}
