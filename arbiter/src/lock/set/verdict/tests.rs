//! A set's verdict and its release, case by case.

use super::*;

const ME: &str = "spiffe://example.org/ns/pay/sa/a";
const OTHER: &str = "spiffe://example.org/ns/pay/sa/b";

fn me() -> Claimant<'static> {
    Claimant {
        lease_hex: "7a",
        spiffe_id: ME,
        instance: Some("pod-1"),
        session_create_revision: 40,
        epoch_mod_revision: 5,
    }
}

fn holder(session: &str, id: &str, instance: &str, rev: i64) -> Option<HolderSeen> {
    Some(HolderSeen {
        session: Some(session.into()),
        spiffe_id: Some(id.into()),
        instance: Some(instance.into()),
        create_revision: rev,
        mod_revision: rev,
    })
}

fn refused(holders: Vec<Option<HolderSeen>>) -> SetSeen {
    SetSeen::Refused {
        epoch_mod_revision: Some(5),
        session_create_revision: Some(40),
        holders,
        read_at: Some(90),
    }
}

#[test]
fn the_verdict_table() {
    let mine = |rev| holder("7a", ME, "pod-1", rev);
    let sibling = |rev| holder("7b", ME, "pod-2", rev);
    let leak = |rev| holder("7c", ME, "pod-1", rev);
    let other = |rev| holder("9", OTHER, "x", rev);
    let cases: Vec<(&str, SetSeen, SetVerdict)> = vec![
        (
            "committed",
            SetSeen::Committed { revision: 88 },
            SetVerdict::Granted { revision: 88 },
        ),
        (
            "the epoch moved explains everything",
            SetSeen::Refused {
                epoch_mod_revision: Some(6),
                session_create_revision: None,
                holders: vec![other(3)],
                read_at: Some(90),
            },
            SetVerdict::EpochMoved,
        ),
        (
            "a session that is gone holds nothing",
            SetSeen::Refused {
                epoch_mod_revision: Some(5),
                session_create_revision: None,
                holders: vec![mine(80), mine(80)],
                read_at: Some(90),
            },
            SetVerdict::SessionGone,
        ),
        (
            "a retry of a set that committed gets it back",
            refused(vec![mine(80), mine(80), mine(80)]),
            SetVerdict::Granted { revision: 80 },
        ),
        (
            "two of my grants are not one set",
            refused(vec![mine(80), mine(81)]),
            SetVerdict::OwnHold,
        ),
        (
            "a key of mine and a free one: waiting would wait on myself",
            refused(vec![None, mine(80)]),
            SetVerdict::OwnHold,
        ),
        (
            "my process under another session",
            refused(vec![None, leak(70)]),
            SetVerdict::LeakedHold,
        ),
        (
            "a sibling replica of my identity is a contender",
            refused(vec![None, sibling(70)]),
            SetVerdict::Held { index: 1, at: 90 },
        ),
        (
            "the first key another session holds is waited on",
            refused(vec![None, other(60), other(61)]),
            SetVerdict::Held { index: 1, at: 90 },
        ),
        (
            "all free by the read",
            refused(vec![None, None]),
            SetVerdict::ReleasedMeanwhile,
        ),
    ];
    for (name, seen, want) in cases {
        assert_eq!(verdict(&me(), &seen), want, "{name}");
    }
}

#[test]
fn a_release_ends_the_keys_still_that_grant_and_the_callers() {
    let h = |id: &str, rev: i64, lease: i64| {
        Some((
            HolderSeen {
                session: Some(format!("{lease:x}")),
                spiffe_id: Some(id.into()),
                instance: None,
                create_revision: rev,
                mod_revision: rev,
            },
            Some(lease),
        ))
    };
    let holders = vec![
        h(ME, 80, 0x7a),   // the set's
        None,              // released alone, or force released
        h(OTHER, 95, 0x9), // granted since to another
        h(ME, 81, 0x7a),   // mine, another grant
        h(ME, 80, 0x7a),   // the set's
    ];
    assert_eq!(releasable(&holders, 80, Some(0x7a), ME), [0, 4]);
    assert_eq!(releasable(&holders, 80, None, ME), [0, 4]);
    // Another session of the same identity, or another identity: nothing.
    assert!(releasable(&holders, 80, Some(0x7b), ME).is_empty());
    assert!(releasable(&holders, 80, None, OTHER).is_empty());
    assert!(releasable(&holders, 79, Some(0x7a), ME).is_empty());
}
