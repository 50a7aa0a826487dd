//! The grant verdict, case by case.

use super::settle::{SettleSeen, settled};
use super::verdict::DelaySeen;
use super::*;

const ME: &str = "spiffe://example.org/ns/pay/sa/a";
const OTHER: &str = "spiffe://example.org/ns/pay/sa/b";

fn me() -> Claimant<'static> {
    Claimant {
        lease_hex: "7a",
        spiffe_id: ME,
        instance: None,
        session_create_revision: 40,
        epoch_mod_revision: 5,
    }
}

fn holder(session: &str, id: &str, create: i64) -> Option<HolderSeen> {
    Some(HolderSeen {
        session: Some(session.into()),
        spiffe_id: Some(id.into()),
        instance: None,
        create_revision: create,
        mod_revision: create,
    })
}

fn refused(epoch: Option<i64>, session: Option<i64>, h: Option<HolderSeen>) -> TxnSeen {
    TxnSeen::Refused {
        epoch_mod_revision: epoch,
        session_create_revision: session,
        holder: h,
        read_at: Some(90),
        delay: None,
    }
}

fn marker(session: &str, leased: bool) -> Option<DelaySeen> {
    Some(DelaySeen {
        session: Some(session.into()),
        mod_revision: 70,
        leased,
    })
}

/// A class with `lockDelaySeconds`: the transaction also read the key's marker.
fn refused_delayed(h: Option<HolderSeen>, d: Option<DelaySeen>) -> TxnSeen {
    match refused(Some(5), Some(40), h) {
        TxnSeen::Refused {
            epoch_mod_revision,
            session_create_revision,
            holder,
            read_at,
            ..
        } => TxnSeen::Refused {
            epoch_mod_revision,
            session_create_revision,
            holder,
            read_at,
            delay: d,
        },
        committed => committed,
    }
}

#[test]
fn verdict_table() {
    let undecodable = Some(HolderSeen {
        session: None,
        spiffe_id: None,
        instance: None,
        create_revision: 60,
        mod_revision: 60,
    });
    let cases: Vec<(&str, TxnSeen, Verdict)> = vec![
        (
            "committed",
            TxnSeen::Committed { revision: 77 },
            Verdict::Granted { revision: 77 },
        ),
        (
            "held by another identity",
            refused(Some(5), Some(40), holder("9", OTHER, 60)),
            Verdict::Held { at: 90 },
        ),
        (
            "held by this session: the same grant again",
            refused(Some(5), Some(40), holder("7a", ME, 60)),
            Verdict::Granted { revision: 60 },
        ),
        (
            "handed on to this session by a release: the grant is the overwrite",
            refused(
                Some(5),
                Some(40),
                Some(HolderSeen {
                    mod_revision: 75,
                    ..holder("7a", ME, 60).unwrap()
                }),
            ),
            Verdict::Granted { revision: 75 },
        ),
        (
            "held by this identity, another session",
            refused(Some(5), Some(40), holder("9", ME, 60)),
            Verdict::LeakedHold,
        ),
        (
            "undecodable holder is someone else's",
            refused(Some(5), Some(40), undecodable),
            Verdict::Held { at: 90 },
        ),
        (
            "released between compare and read",
            refused(Some(5), Some(40), None),
            Verdict::ReleasedMeanwhile,
        ),
        // Lock-delay (a class with lockDelaySeconds): the marker beside the holder.
        (
            "delay class, held: the holder decides, whatever the marker",
            refused_delayed(holder("9", OTHER, 60), marker("9", false)),
            Verdict::Held { at: 90 },
        ),
        (
            "delay class, holder gone, marker on no lease: ended without a release",
            refused_delayed(None, marker("9", false)),
            Verdict::EndedUnreleased {
                session: Some("9".into()),
                marker_mod_revision: 70,
            },
        ),
        (
            "delay class, own hold ended without a release: the delay is everyone's",
            refused_delayed(None, marker("7a", false)),
            Verdict::EndedUnreleased {
                session: Some("7a".into()),
                marker_mod_revision: 70,
            },
        ),
        (
            "delay class, marker on a lease: in the delay, watch it",
            refused_delayed(None, marker("9", true)),
            Verdict::Delayed { at: 90 },
        ),
        (
            "delay class, neither: released between compare and read",
            refused_delayed(None, None),
            Verdict::ReleasedMeanwhile,
        ),
        (
            "session expired",
            refused(Some(5), None, holder("9", OTHER, 60)),
            Verdict::SessionGone,
        ),
        (
            "session re-created under the same id",
            refused(Some(5), Some(41), None),
            Verdict::SessionGone,
        ),
        (
            "epoch advanced",
            refused(Some(6), Some(40), holder("9", OTHER, 60)),
            Verdict::EpochMoved,
        ),
        (
            "epoch record deleted",
            refused(None, Some(40), None),
            Verdict::EpochMoved,
        ),
        (
            "epoch moved explains a gone session too",
            refused(Some(6), None, None),
            Verdict::EpochMoved,
        ),
    ];
    for (name, seen, want) in cases {
        assert_eq!(verdict(&me(), &seen), want, "{name}");
    }
}

/// Replicas share an identity (issue 32): a leak is the same identity *and* instance.
#[test]
fn leak_is_the_same_process_not_the_same_identity() {
    let held_by = |id: &str, instance: Option<&str>| HolderSeen {
        instance: instance.map(str::to_owned),
        ..holder("9", id, 60).unwrap()
    };
    let asking = |instance: Option<&'static str>| Claimant { instance, ..me() };
    let cases: Vec<(&str, Option<&'static str>, HolderSeen, Verdict)> = vec![
        (
            "a sibling replica holds it: a contender, it waits",
            Some("pod-a"),
            held_by(ME, Some("pod-b")),
            Verdict::Held { at: 90 },
        ),
        (
            "this instance holds it under another session: the leak",
            Some("pod-a"),
            held_by(ME, Some("pod-a")),
            Verdict::LeakedHold,
        ),
        (
            "no instance on either side: the old rule, by identity",
            None,
            held_by(ME, None),
            Verdict::LeakedHold,
        ),
        (
            "an instance-less holder is not this instance",
            Some("pod-a"),
            held_by(ME, None),
            Verdict::Held { at: 90 },
        ),
        (
            "an instance-less claimant is not the holding instance",
            None,
            held_by(ME, Some("pod-a")),
            Verdict::Held { at: 90 },
        ),
        (
            "the same instance name under another identity is someone else",
            Some("pod-a"),
            held_by(OTHER, Some("pod-a")),
            Verdict::Held { at: 90 },
        ),
    ];
    for (name, instance, h, want) in cases {
        assert_eq!(holder_verdict(&asking(instance), &h, 90), want, "{name}");
        // The whole verdict agrees with the holder's part of it.
        let seen = refused(Some(5), Some(40), Some(h.clone()));
        assert_eq!(verdict(&asking(instance), &seen), want, "{name}");
    }
    // This very session is its own grant whatever the instance says.
    let mine = HolderSeen {
        instance: Some("pod-b".into()),
        ..holder("7a", ME, 60).unwrap()
    };
    assert_eq!(
        holder_verdict(&asking(Some("pod-a")), &mine, 90),
        Verdict::Granted { revision: 60 }
    );
}

#[test]
fn held_without_a_header_watches_from_the_holder_write() {
    let seen = TxnSeen::Refused {
        epoch_mod_revision: Some(5),
        session_create_revision: Some(40),
        holder: holder("9", OTHER, 60),
        read_at: None,
        delay: None,
    };
    assert_eq!(verdict(&me(), &seen), Verdict::Held { at: 60 });
}

/// What a settled attempt means (issue 34's bridge partition).
#[test]
fn settled_table() {
    let seen = |fenced_now, fence_present, session: Option<i64>, h| SettleSeen {
        fenced_now,
        fence_present,
        session_create_revision: session,
        holder: h,
    };
    let no_quorum = || Err::<Verdict, &str>("NO_QUORUM");
    let cases: Vec<(&str, SettleSeen, Result<Verdict, &str>)> = vec![
        (
            "fenced now, the holder ours: the attempt committed (or was handed on)",
            seen(true, false, Some(40), holder("7a", ME, 61)),
            Ok(Verdict::Granted { revision: 61 }),
        ),
        (
            "fenced now, held by another: it never committed and never will",
            seen(true, false, Some(40), holder("9", OTHER, 61)),
            no_quorum(),
        ),
        (
            "fenced now, the key free: the same",
            seen(true, false, Some(40), None),
            no_quorum(),
        ),
        (
            "an earlier try's fence found, the holder ours",
            seen(false, true, Some(40), holder("7a", ME, 61)),
            Ok(Verdict::Granted { revision: 61 }),
        ),
        (
            "an earlier try's fence found, the key free",
            seen(false, true, Some(40), None),
            no_quorum(),
        ),
        (
            "the session gone (its lease with it): nothing on it can commit",
            seen(false, false, None, None),
            Ok(Verdict::SessionGone),
        ),
        (
            "the session replaced by one of the same id",
            seen(false, false, Some(41), holder("7a", ME, 61)),
            Ok(Verdict::SessionGone),
        ),
        (
            "refused with the session bound and no fence: cannot happen, said so",
            seen(false, false, Some(40), None),
            Err("INTERNAL"),
        ),
    ];
    for (why, seen, want) in cases {
        let got = settled(&me(), &seen).map_err(|e| e.reason().as_str());
        assert_eq!(got, want, "{why}");
    }
}

// ---- the transaction (`request.rs`): each injected bug removes exactly its compare -----

/// The names of the compares of a grant of `pay/k` (on a shard; durable, or with an
/// attempt fence; with a lock-delay) under `bugs`.
#[cfg(debug_assertions)]
fn grant_compares(bugs: &[Bug], shard: bool, durable: bool, delay: bool) -> Vec<&'static str> {
    use crate::store::epoch::Epoch;
    let spec: lock_config::registry::LockClassSpec = serde_json::from_value(serde_json::json!({
        "namespace": "pay",
        "prefixes": ["pay/"],
        "purpose": "efficiency",
        "enforcement": "advisory",
        "lockDelaySeconds": delay.then_some(5),
        "tier": "entity",
    }))
    .unwrap();
    let class = ResolvedClass {
        name: "c",
        spec: &spec,
        ttl_seconds: 15,
    };
    let epoch = Epoch::for_tests(5, shard.then_some(9));
    let session = Session {
        lease: 0x7a,
        spiffe_id: ME.into(),
        instance: None,
        ttl_seconds: 15,
        create_revision: 40,
    };
    let key = LockKey::parse("pay/k").unwrap();
    let place = QueuePlace {
        key: "/q/pay/k//7a".into(),
        create_revision: 44,
    };
    let ask = request::Ask {
        epoch: &epoch,
        session: &session,
        key: &key,
        class: &class,
        queued: durable.then_some(&place),
        fence: (!durable).then_some("/x/7a/1"),
    };
    let (txn, _) = request::grant_txn(&Bugs::new(bugs.to_vec()), &ask);
    txn.compare_names().to_vec()
}

#[test]
#[cfg(debug_assertions)]
fn grant_compares_and_the_bugs_that_remove_one() {
    assert_eq!(
        grant_compares(&[], true, false, true),
        [
            "epoch",
            "holder-absent",
            "session",
            "shard-fence",
            "attempt-fence-absent",
            "delay-absent"
        ]
    );
    assert_eq!(
        grant_compares(&[], false, true, false),
        ["epoch", "holder-absent", "session", "queue-place"]
    );
    for (bug, removed) in [
        (Bug::GrantWithoutEpochCompare, "epoch"),
        (Bug::ShardFenceOff, "shard-fence"),
    ] {
        for durable in [false, true] {
            let mut want = grant_compares(&[], true, durable, true);
            want.retain(|n| *n != removed);
            assert_eq!(grant_compares(&[bug], true, durable, true), want, "{bug:?}");
        }
    }
}
