//! The explorer's markup, case by case.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use crate::html::{Nav, frame};
use crate::oidc::Operator;

fn row(key: &str, waiters: u64, flags: Vec<Flag>) -> Row {
    Row {
        key: key.into(),
        mode: Mode::Exclusive,
        identity: "spiffe://example.org/ns/pay/sa/<b>".into(),
        instance: Some("pod-1".into()),
        class: "pay-fast".into(),
        acquired_at_ms: 1_796_641_762_000,
        held_for_ms: 185_000,
        session: "7a".into(),
        session_ttl_s: Some(5),
        ttl_left_s: Some(4),
        durable_waiters: waiters,
        shared_holders: 0,
        writer_waiting: false,
        flags,
    }
}

fn session(access: Access) -> WebSession {
    WebSession {
        operator: Operator {
            issuer: "i".into(),
            subject: "s".into(),
            name: "Vera".into(),
        },
        access,
        expires_at: u64::MAX,
        csrf: "csrf-1".into(),
    }
}

#[test]
fn times_read_absolute_and_relative() {
    for (ms, want) in [
        (0, "1970-01-01 00:00:00 UTC"),
        (951_782_400_000, "2000-02-29 00:00:00 UTC"),
        (1_796_641_762_000, "2026-12-07 11:09:22 UTC"),
    ] {
        assert_eq!(utc(ms), want);
    }
    assert_eq!(ago(185_000), "3 min 5 s");
    assert_eq!(ago(7_440_000), "2 h 4 min");
}

/// (case, the row, the state's class, its word)
type Case = (&'static str, Row, &'static str, &'static str);

#[test]
fn a_state_is_a_colour_and_a_word() {
    let mut shared = row("pay/r", 0, vec![]);
    shared.mode = Mode::Shared;
    let cases: Vec<Case> = vec![
        ("quiet", row("pay/a", 0, vec![]), "state-held", ">held<"),
        (
            "queued",
            row("pay/a", 2, vec![]),
            "state-queued",
            "held, 2 waiting",
        ),
        ("a reader", shared, "state-held", ">read<"),
        (
            "flagged beats queued",
            row("pay/a", 2, vec![Flag::SessionGone]),
            "state-bad",
            "session-gone",
        ),
    ];
    for (case, r, class, word) in cases {
        let got = state(&r);
        assert!(got.contains(class) && got.contains(word), "{case}: {got}");
    }
}

#[test]
fn text_from_the_store_is_escaped_and_keys_link_to_their_detail() {
    let html = holds(
        "pay",
        &[row("pay/a b", 1, vec![])],
        Some("held:pay/a b"),
        "",
    );
    assert!(html.contains("sa/&lt;b&gt;"), "{html}");
    assert!(!html.contains("sa/<b>"));
    assert!(
        html.contains("href=\"/explorer/key?key=pay/a%20b\""),
        "{html}"
    );
    assert!(html.contains("after=held%3Apay/a%20b"), "{html}");
    let filtered = holds(
        "pay",
        &[row("pay/a", 0, vec![]), row("pay/b", 0, vec![])],
        None,
        "pay/b",
    );
    assert!(filtered.contains("1 hold(s)") && !filtered.contains("data-key=\"pay/a\""));
}

#[test]
fn only_an_operator_is_offered_the_force_release() {
    let rows = [row("pay/a", 0, vec![])];
    let none = History::NotConfigured;
    let op = key_detail(
        "pay/a",
        &rows,
        &BTreeMap::new(),
        &none,
        0,
        &session(Access::Act),
    );
    assert!(op.contains("id=\"file-force-release\"") && op.contains("value=\"csrf-1\""));
    let viewer = key_detail(
        "pay/a",
        &rows,
        &BTreeMap::new(),
        &none,
        0,
        &session(Access::View),
    );
    assert!(!viewer.contains("file-force-release"), "{viewer}");
    assert!(viewer.contains("needs the operator role"));
    let free = key_detail(
        "pay/a",
        &[],
        &BTreeMap::new(),
        &none,
        0,
        &session(Access::Act),
    );
    assert!(free.contains("id=\"not-held\"") && !free.contains("file-force-release"));
}

#[test]
fn the_frame_says_who_and_what_they_may_do() {
    let page = frame("Explorer", Some(&session(Access::View)), Nav::Explorer, "x");
    assert!(page.contains("viewer: read only") && page.contains("aria-current=\"page\">Explorer"));
    let out = frame("Explorer", None, Nav::Explorer, "x");
    assert!(out.contains("id=\"signin\""));
}

#[test]
fn a_generated_instance_is_cut_in_the_table_and_whole_in_its_title() {
    assert_eq!(short("pod-a1"), "pod-a1");
    assert_eq!(short("p-f11a6bfa35438a1f680ba436b1290538"), "p-f11a6bfa…");
    let mut r = row("pay/a", 0, vec![]);
    r.instance = Some("p-f11a6bfa35438a1f680ba436b1290538".into());
    let html = holds("pay", &[r], None, "");
    assert!(html.contains("title=\"p-f11a6bfa35438a1f680ba436b1290538\">p-f11a6bfa…<"));
}

#[test]
fn a_key_page_says_what_the_audit_store_said() {
    let s = session(Access::View);
    let off = key_detail(
        "pay/a",
        &[],
        &BTreeMap::new(),
        &History::NotConfigured,
        0,
        &s,
    );
    assert!(off.contains("id=\"history-off\"") && off.contains("lockctl audit pay/a"));
    let failed = key_detail(
        "pay/a",
        &[],
        &BTreeMap::new(),
        &History::Failed("refused <x>".into()),
        0,
        &s,
    );
    assert!(failed.contains("id=\"history-error\"") && failed.contains("refused &lt;x&gt;"));
    let rows = History::Rows(vec![HistoryRow {
        observed_at_ms: 1_000,
        kind: "grant".into(),
        spiffe_id: "spiffe://x/<a>".into(),
        session: "7a".into(),
        class: "pay-fast".into(),
    }]);
    let shown = key_detail("pay/a", &[], &BTreeMap::new(), &rows, 61_000, &s);
    assert!(shown.contains("<td class=\"kind\">grant</td>") && shown.contains("1 min 0 s ago"));
    assert!(shown.contains("spiffe://x/&lt;a&gt;"));
}

#[test]
fn a_hold_names_its_sessions_other_keys() {
    let rows = [row("pay/a", 0, vec![])];
    let view = SessionView {
        ttl_left_s: Some(4),
        holds: vec![
            ("pay/a".into(), Mode::Exclusive),
            ("pay/b".into(), Mode::Shared),
        ],
        waiting: vec!["pay/c".into()],
        more: false,
    };
    let sessions = BTreeMap::from([("7a".to_owned(), view)]);
    let html = key_detail(
        "pay/a",
        &rows,
        &sessions,
        &History::NotConfigured,
        0,
        &session(Access::View),
    );
    assert!(
        html.contains("holds 1 other key(s): <a href=\"/explorer/key?key=pay/b\">"),
        "{html}"
    );
    assert!(
        html.contains("waits for <a href=\"/explorer/key?key=pay/c\">"),
        "{html}"
    );
}
