//! The rows and their flags, case by case.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;

fn holder(class: &str, session: &str, acquired_at_ms: u64) -> Holder {
    Holder {
        spiffe_id: "spiffe://example.org/ns/pay/sa/a".into(),
        instance: Some("pod-1".into()),
        session: session.into(),
        class: class.into(),
        acquired_at_ms,
    }
}

fn session(ttl: u32, left: Option<i64>) -> SessionSeen {
    SessionSeen {
        record: Some(SessionRecord {
            spiffe_id: "spiffe://example.org/ns/pay/sa/a".into(),
            instance: Some("pod-1".into()),
            ttl_seconds: ttl,
            closing: false,
        }),
        ttl_left_s: left,
    }
}

fn rules() -> Rules {
    Rules {
        held_over_ms: [("fast".to_owned(), 60_000)].into(),
        expiring_below_s: 3,
        waiver_expired: ["advisory".to_owned()].into(),
    }
}

/// (case, the hold's class, held for (ms), its session's TTL left — None: no session
/// read at all, Some(None): its lease gone — the flags wanted)
type Case = (
    &'static str,
    &'static str,
    u64,
    Option<Option<i64>>,
    Vec<Flag>,
);

#[test]
fn flags_say_what_looks_wrong_and_nothing_else() {
    let cases: Vec<Case> = vec![
        (
            "a fresh hold, a live session",
            "fast",
            1_000,
            Some(Some(9)),
            vec![],
        ),
        (
            "older than its class's bound",
            "fast",
            61_000,
            Some(Some(9)),
            vec![Flag::HeldLong { bound_ms: 60_000 }],
        ),
        (
            "a class with no bound is never held long",
            "slow",
            10_000_000,
            Some(Some(9)),
            vec![],
        ),
        (
            "a session about to lapse",
            "fast",
            1_000,
            Some(Some(2)),
            vec![Flag::Expiring { ttl_left_s: 2 }],
        ),
        (
            "a lease with no TTL left",
            "fast",
            1_000,
            Some(Some(0)),
            vec![Flag::SessionGone],
        ),
        (
            "a lease that is gone",
            "fast",
            1_000,
            Some(None),
            vec![Flag::SessionGone],
        ),
        (
            "a session not found at all",
            "fast",
            1_000,
            None,
            vec![Flag::SessionGone],
        ),
        (
            "an advisory class past its waiver",
            "advisory",
            1_000,
            Some(Some(9)),
            vec![Flag::WaiverExpired],
        ),
        (
            "everything at once",
            "fast",
            61_000,
            Some(None),
            vec![Flag::HeldLong { bound_ms: 60_000 }, Flag::SessionGone],
        ),
    ];
    for (case, class, held_for, left, want) in cases {
        let mut seen = Seen {
            now_ms: 100_000_000,
            holds: vec![("pay/k".into(), holder(class, "7a", 100_000_000 - held_for))],
            ..Seen::default()
        };
        if let Some(left) = left {
            seen.sessions.insert("7a".into(), session(5, left));
        }
        let got = rows(&seen, &rules());
        assert_eq!(got.len(), 1, "{case}");
        assert_eq!(got[0].flags, want, "{case}");
        assert_eq!(got[0].held_for_ms, held_for, "{case}");
    }
}

#[test]
fn a_row_carries_its_holder_session_and_counts_and_no_token() {
    let mut seen = Seen {
        now_ms: 10_000,
        holds: vec![
            ("pay/a".into(), holder("fast", "7a", 4_000)),
            ("pay/b".into(), holder("fast", "7b", 9_000)),
        ],
        ..Seen::default()
    };
    seen.sessions.insert("7a".into(), session(5, Some(4)));
    seen.durable_waiters.insert("pay/a".into(), 3);
    seen.shared.insert("pay/b".into(), (2, true));
    let got = rows(&seen, &rules());
    assert_eq!(
        got.iter()
            .map(|r| (
                r.key.as_str(),
                r.durable_waiters,
                r.shared_holders,
                r.writer_waiting
            ))
            .collect::<Vec<_>>(),
        vec![("pay/a", 3, 0, false), ("pay/b", 0, 2, true)]
    );
    assert_eq!(got[0].session_ttl_s, Some(5));
    assert_eq!(got[0].ttl_left_s, Some(4));
    assert_eq!(got[0].instance.as_deref(), Some("pod-1"));
    let json = serde_json::to_string(&got).unwrap();
    assert!(!json.contains("token"), "{json}");
    assert!(!json.contains("revision"), "{json}");
}

#[test]
fn a_clock_behind_the_holders_reads_held_for_zero() {
    let seen = Seen {
        now_ms: 1_000,
        holds: vec![("pay/a".into(), holder("fast", "7a", 5_000))],
        ..Seen::default()
    };
    assert_eq!(rows(&seen, &rules())[0].held_for_ms, 0);
}

#[test]
fn a_key_held_only_by_readers_has_a_row_per_reader() {
    let mut seen = Seen {
        now_ms: 10_000,
        holds: vec![("pay/a".into(), holder("fast", "7a", 4_000))],
        shared_holds: vec![
            ("pay/r".into(), holder("reports", "7b", 9_000)),
            ("pay/r".into(), holder("reports", "7c", 8_000)),
        ],
        ..Seen::default()
    };
    seen.shared.insert("pay/r".into(), (2, true));
    let got = rows(&seen, &rules());
    assert_eq!(
        got.iter()
            .map(|r| (r.key.as_str(), r.mode, r.session.as_str(), r.shared_holders))
            .collect::<Vec<_>>(),
        vec![
            ("pay/a", Mode::Exclusive, "7a", 0),
            ("pay/r", Mode::Shared, "7b", 2),
            ("pay/r", Mode::Shared, "7c", 2),
        ]
    );
    assert!(got[1].writer_waiting);
}

#[test]
fn a_sessions_keys_say_what_it_holds_and_waits_for() {
    let keys: Vec<String> = [
        "/s/7a",
        "/l/pay/b",
        "/l/pay/a",
        "/r/pay/r//s/7a",
        "/r/pay/w//w/7a",
        "/q/pay/fair//7a",
        "/x/7a/123",
    ]
    .map(str::to_owned)
    .to_vec();
    let v = session_view(&keys, Some(4), 10);
    assert_eq!(
        v.holds,
        vec![
            ("pay/a".to_owned(), Mode::Exclusive),
            ("pay/b".to_owned(), Mode::Exclusive),
            ("pay/r".to_owned(), Mode::Shared),
        ]
    );
    assert_eq!(v.waiting, vec!["pay/fair".to_owned(), "pay/w".to_owned()]);
    assert!(!v.more);
    let cut = session_view(&keys, None, 2);
    assert_eq!(cut.holds.len(), 2);
    assert!(cut.more && cut.ttl_left_s.is_none());
}
