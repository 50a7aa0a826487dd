//! The shared-class verdicts, case by case.

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

fn h(session: &str, id: &str, instance: &str, rev: i64) -> HolderSeen {
    HolderSeen {
        session: Some(session.into()),
        spiffe_id: Some(id.into()),
        instance: Some(instance.into()),
        create_revision: rev,
        mod_revision: rev,
    }
}

fn seen() -> Seen {
    Seen {
        epoch_mod_revision: Some(5),
        session_create_revision: Some(40),
        read_at: 90,
        ..Seen::default()
    }
}

const READER: &str = "/r/pay/k//s/9";
const MARK: &str = "/r/pay/k//w/9";

#[test]
fn a_shared_grant_waits_for_the_writer_and_its_mark_only() {
    let cases: Vec<(&str, Seen, SharedVerdict)> = vec![
        (
            "a moved epoch explains everything",
            Seen {
                epoch_mod_revision: Some(6),
                ..seen()
            },
            SharedVerdict::EpochMoved,
        ),
        (
            "a session that is gone",
            Seen {
                session_create_revision: None,
                ..seen()
            },
            SharedVerdict::SessionGone,
        ),
        (
            "its own record: a retry gets the grant back",
            Seen {
                shared: Some(("/r/pay/k//s/7a".into(), h("7a", ME, "pod-1", 70))),
                ..seen()
            },
            SharedVerdict::Granted { revision: 70 },
        ),
        (
            "an exclusive holder is waited for",
            Seen {
                holder: Some(h("9", OTHER, "x", 60)),
                ..seen()
            },
            SharedVerdict::Wait {
                watch: None,
                at: 90,
            },
        ),
        (
            "a sibling replica's exclusive hold is waited for too",
            Seen {
                holder: Some(h("7b", ME, "pod-2", 60)),
                ..seen()
            },
            SharedVerdict::Wait {
                watch: None,
                at: 90,
            },
        ),
        (
            "this session's own exclusive hold is not a shared grant: release it first",
            Seen {
                holder: Some(h("7a", ME, "pod-1", 60)),
                ..seen()
            },
            SharedVerdict::LeakedHold,
        ),
        (
            "this process's exclusive hold under another session is its leak",
            Seen {
                holder: Some(h("7c", ME, "pod-1", 60)),
                ..seen()
            },
            SharedVerdict::LeakedHold,
        ),
        (
            "a writer waiting stops new readers",
            Seen {
                writer_waiting: Some((MARK.into(), 9)),
                ..seen()
            },
            SharedVerdict::Wait {
                watch: Some(MARK.into()),
                at: 90,
            },
        ),
        (
            "its own mark, left by an exclusive wait that ended: dropped, then again",
            Seen {
                writer_waiting: Some(("/r/pay/k//w/7a".into(), 0x7a)),
                ..seen()
            },
            SharedVerdict::DropOwnMark {
                mark: "/r/pay/k//w/7a".into(),
            },
        ),
        (
            "nothing in the way by the read",
            seen(),
            SharedVerdict::Again,
        ),
    ];
    for (name, s, want) in cases {
        assert_eq!(shared_verdict(&me(), &s), want, "{name}");
    }
}

#[test]
fn an_exclusive_grant_waits_for_every_reader() {
    let cases: Vec<(&str, Seen, SharedVerdict)> = vec![
        (
            "its own exclusive record: granted",
            Seen {
                holder: Some(h("7a", ME, "pod-1", 70)),
                ..seen()
            },
            SharedVerdict::Granted { revision: 70 },
        ),
        (
            "another's exclusive hold",
            Seen {
                holder: Some(h("9", OTHER, "x", 60)),
                ..seen()
            },
            SharedVerdict::Wait {
                watch: None,
                at: 90,
            },
        ),
        (
            "a reader: wait for it",
            Seen {
                shared: Some((READER.into(), h("9", OTHER, "x", 60))),
                ..seen()
            },
            SharedVerdict::Wait {
                watch: Some(READER.into()),
                at: 90,
            },
        ),
        (
            "a sibling replica's read is waited for",
            Seen {
                shared: Some(("/r/pay/k//s/7b".into(), h("7b", ME, "pod-2", 60))),
                ..seen()
            },
            SharedVerdict::Wait {
                watch: Some("/r/pay/k//s/7b".into()),
                at: 90,
            },
        ),
        (
            "its own read would be waited for forever",
            Seen {
                shared: Some(("/r/pay/k//s/7a".into(), h("7a", ME, "pod-1", 60))),
                ..seen()
            },
            SharedVerdict::LeakedHold,
        ),
        ("free by the read", seen(), SharedVerdict::Again),
    ];
    for (name, s, want) in cases {
        assert_eq!(exclusive_verdict(&me(), &s), want, "{name}");
    }
}
