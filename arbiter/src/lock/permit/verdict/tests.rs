//! The semaphore verdict, case by case.

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

fn permit(i: u32, session: &str, id: &str, instance: &str, rev: i64) -> PermitSeen {
    PermitSeen {
        permit: i,
        holder: HolderSeen {
            session: Some(session.into()),
            spiffe_id: Some(id.into()),
            instance: Some(instance.into()),
            create_revision: rev,
            mod_revision: rev,
        },
    }
}

fn refused(permits: Vec<PermitSeen>) -> PermitTxnSeen {
    PermitTxnSeen::Refused {
        epoch_mod_revision: Some(5),
        session_create_revision: Some(40),
        permits,
        read_at: Some(90),
    }
}

#[test]
fn verdict_table() {
    let sibling = |i, rev| permit(i, "9", ME, "pod-2", rev);
    let cases: Vec<(&str, PermitTxnSeen, u32, PermitVerdict)> = vec![
        (
            "committed",
            PermitTxnSeen::Committed {
                permit: 1,
                revision: 77,
            },
            3,
            PermitVerdict::Granted {
                permit: 1,
                revision: 77,
            },
        ),
        (
            "free key: permit 0",
            refused(vec![]),
            3,
            PermitVerdict::Try { permit: 0 },
        ),
        (
            "the lowest free permit",
            refused(vec![sibling(0, 60), permit(2, "8", OTHER, "x", 61)]),
            3,
            PermitVerdict::Try { permit: 1 },
        ),
        (
            "all N held by others (siblings of one identity included): full",
            refused(vec![
                sibling(0, 60),
                sibling(1, 61),
                permit(2, "8", OTHER, "x", 62),
            ]),
            3,
            PermitVerdict::Full { at: 90 },
        ),
        (
            "this session holds one: its grant again, never a second permit",
            refused(vec![sibling(0, 60), permit(2, "7a", ME, "pod-1", 62)]),
            3,
            PermitVerdict::Granted {
                permit: 2,
                revision: 62,
            },
        ),
        (
            "this process under another session: a leak",
            refused(vec![permit(1, "9", ME, "pod-1", 61)]),
            3,
            PermitVerdict::LeakedHold,
        ),
        (
            "N lowered under holders: permits above N count, none is free",
            refused(vec![sibling(3, 60), sibling(4, 61)]),
            2,
            PermitVerdict::Full { at: 90 },
        ),
        (
            "N lowered, one above N held: the free one below N",
            refused(vec![sibling(3, 60)]),
            2,
            PermitVerdict::Try { permit: 0 },
        ),
        (
            "session expired",
            PermitTxnSeen::Refused {
                epoch_mod_revision: Some(5),
                session_create_revision: None,
                permits: vec![],
                read_at: Some(90),
            },
            3,
            PermitVerdict::SessionGone,
        ),
        (
            "epoch advanced",
            PermitTxnSeen::Refused {
                epoch_mod_revision: Some(6),
                session_create_revision: Some(40),
                permits: vec![],
                read_at: Some(90),
            },
            3,
            PermitVerdict::EpochMoved,
        ),
    ];
    for (name, seen, n, want) in cases {
        assert_eq!(verdict(&me(), &seen, n), want, "{name}");
    }
}
