use super::*;

#[test]
fn hold_ends_are_the_rows_that_end_a_hold() {
    let row = |kind: Kind, key: &str| Row {
        revision: 1,
        key: key.into(),
        kind,
        spiffe_id: String::new(),
        session: String::new(),
        class: "c".into(),
        detail: String::new(),
    };
    let cases = [
        (Kind::Grant, "pay/a", None),
        (Kind::Release, "pay/a", Some("release")),
        (Kind::Handoff, "pay/a", Some("handoff")),
        (Kind::Expiry, "pay/a", Some("expiry")),
        (
            Kind::ClosedWithSession,
            "pay/a",
            Some("closed-with-session"),
        ),
        (Kind::RevokedByAdvance, "pay/a", Some("revoked-by-advance")),
        (Kind::ForceRelease, "pay/a", Some("force-release")),
        // The executed request's record is not a hold.
        (Kind::ForceRelease, "/sys/force/0123456789abcdef", None),
        (Kind::SessionExpiry, "/s/1f", None),
    ];
    for (kind, key, want) in cases {
        assert_eq!(super::hold_end(&row(kind, key)), want, "{kind:?} {key}");
    }
}

#[test]
fn lag_alarm_table() {
    let cases = [
        (100, 100, Some(1000), false),
        (600, 100, Some(1000), false),
        (601, 100, Some(1000), true),
        (10_000, 0, None, false),
        (5, 10, Some(4), false),
    ];
    for (head, checkpoint, window, want) in cases {
        assert_eq!(
            lag_alarm(head, checkpoint, window),
            want,
            "{head} {checkpoint} {window:?}"
        );
    }
}
