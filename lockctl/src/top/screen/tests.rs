//! The terminal view's keys, case by case.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use lock_explorer::Mode;

fn row(key: &str, session: &str, held_for_ms: u64, waiters: u64) -> Row {
    Row {
        key: key.into(),
        mode: Mode::Exclusive,
        identity: "spiffe://example.org/ns/pay/sa/a".into(),
        instance: None,
        class: "fast".into(),
        acquired_at_ms: 0,
        held_for_ms,
        session: session.into(),
        session_ttl_s: Some(5),
        ttl_left_s: Some(4),
        durable_waiters: waiters,
        shared_holders: 0,
        writer_waiting: false,
        flags: vec![],
    }
}

fn keys(s: &Screen) -> Vec<&str> {
    s.rows.iter().map(|r| r.key.as_str()).collect()
}

fn holds() -> Screen {
    let mut s = Screen::new(Some("pay".into()), Sort::HeldFor);
    s.show_rows(
        vec![
            row("pay/a", "1", 10, 0),
            row("pay/b", "2", 30, 5),
            row("pay/c", "3", 20, 1),
        ],
        Some("held:pay/c".into()),
    );
    s
}

#[test]
fn sort_cycles_and_the_selection_stays_on_its_hold() {
    let mut s = holds();
    assert_eq!(keys(&s), ["pay/b", "pay/c", "pay/a"], "longest held first");
    s.on_key(Key::Down);
    assert_eq!(s.selected_row().unwrap().key, "pay/c");
    for (want, order) in [
        (Sort::Waiters, ["pay/b", "pay/c", "pay/a"]),
        (Sort::Key, ["pay/a", "pay/b", "pay/c"]),
        (Sort::HeldFor, ["pay/b", "pay/c", "pay/a"]),
    ] {
        assert_eq!(s.on_key(Key::Sort), Effect::Draw);
        assert_eq!(s.sort, want);
        assert_eq!(keys(&s), order);
        assert_eq!(s.selected_row().unwrap().key, "pay/c", "{want:?}");
    }
}

#[test]
fn a_refresh_keeps_the_hold_or_the_nearest_line() {
    let mut s = holds();
    s.on_key(Key::Down);
    s.on_key(Key::Down);
    s.on_key(Key::Enter);
    assert!(s.detail);
    // pay/a is held longer now: it moves to the top and stays selected.
    s.show_rows(
        vec![row("pay/a", "1", 99, 0), row("pay/b", "2", 30, 5)],
        None,
    );
    assert_eq!(s.selected_row().unwrap().key, "pay/a");
    assert_eq!(s.selected, 0);
    // Released: the nearest line, details still open on it.
    s.show_rows(vec![row("pay/b", "2", 31, 5)], None);
    assert_eq!(s.selected_row().unwrap().key, "pay/b");
    // Nothing left: nothing to show details of.
    s.show_rows(vec![], None);
    assert!(!s.detail);
    assert!(s.selected_row().is_none());
}

/// (case, the keys pressed from a fresh namespace list, the namespace then, the effect
/// of the last key, details open)
type Case = (&'static str, Vec<Key>, Option<&'static str>, Effect, bool);

#[test]
fn keys_move_between_namespaces_holds_and_details() {
    let cases: Vec<Case> = vec![
        ("quit", vec![Key::Quit], None, Effect::Quit, false),
        (
            "open the second namespace",
            vec![Key::Down, Key::Enter],
            Some("pay"),
            Effect::Read,
            false,
        ),
        (
            "down past the end stays on the last",
            vec![Key::Down, Key::Down, Key::Down, Key::Enter],
            Some("pay"),
            Effect::Read,
            false,
        ),
        (
            "back from a namespace reads the list again",
            vec![Key::Enter, Key::Back],
            None,
            Effect::Read,
            false,
        ),
        (
            "back on the list does nothing",
            vec![Key::Back],
            None,
            Effect::Draw,
            false,
        ),
        (
            "no next page of namespaces",
            vec![Key::NextPage],
            None,
            Effect::Draw,
            false,
        ),
    ];
    for (case, presses, ns, effect, detail) in cases {
        let mut s = Screen::new(None, Sort::HeldFor);
        s.show_namespaces(vec![("ops".into(), 1, 0), ("pay".into(), 3, 2)], None);
        let mut last = Effect::Draw;
        for k in presses {
            last = s.on_key(k);
        }
        assert_eq!(s.namespace.as_deref(), ns, "{case}");
        assert_eq!(last, effect, "{case}");
        assert_eq!(s.detail, detail, "{case}");
    }
}

#[test]
fn details_open_and_close_and_a_pinned_namespace_stays() {
    let mut s = holds();
    assert!(s.pinned);
    assert_eq!(s.on_key(Key::Enter), Effect::Draw);
    assert!(s.detail);
    assert_eq!(s.on_key(Key::Back), Effect::Draw);
    assert!(!s.detail);
    assert_eq!(s.on_key(Key::Back), Effect::Draw, "--namespace pins it");
    assert_eq!(s.namespace.as_deref(), Some("pay"));
}

#[test]
fn pages_turn_forward_and_back_by_their_cursors() {
    let mut s = holds();
    assert_eq!(s.on_key(Key::NextPage), Effect::Read);
    assert_eq!(s.after.as_deref(), Some("held:pay/c"));
    s.show_rows(vec![row("pay/d", "4", 1, 0)], None);
    assert_eq!(s.on_key(Key::NextPage), Effect::Draw, "the last page");
    assert_eq!(s.on_key(Key::PrevPage), Effect::Read);
    assert_eq!(s.after, None);
    assert_eq!(s.on_key(Key::PrevPage), Effect::Draw, "the first page");
}
