//! The handoff's transaction, without etcd: what it compares, and what the injected bug
//! takes away.

use super::*;
use crate::store::epoch::Epoch;
use crate::store::layout::permits_prefix;

fn head(durable: bool) -> Head {
    Head {
        lease: 0x7b,
        session_create_revision: 41,
        holder: Holder {
            spiffe_id: "spiffe://example.org/ns/pay/sa/b".into(),
            instance: None,
            session: lease_hex(0x7b),
            class: "c".into(),
            acquired_at_ms: 0,
        },
        entry: durable.then(|| QueuePlace {
            key: "/q/pay/k//7b".into(),
            create_revision: 44,
        }),
        reply: None,
    }
}

/// The compares and writes of a handoff of `pay/k` (a permit's; to a durable head; with a
/// lock-delay) on a shard, under `bugs`.
#[cfg(debug_assertions)]
fn handoff(
    bugs: &[Bug],
    permit: bool,
    durable: bool,
    delay: bool,
) -> (Vec<&'static str>, Vec<String>) {
    let key = LockKey::parse("pay/k").unwrap();
    let hkey = if permit {
        permit_key(&key, 2)
    } else {
        holder_key(&key)
    };
    let at = HandoffAt {
        key: &key,
        hkey: &hkey,
        permit: permit.then_some(2),
        revision: 70,
        lease: 0x7a,
    };
    let epoch = Epoch::for_tests(5, Some(9));
    let (txn, _) = handoff_txn(&Bugs::new(bugs.to_vec()), &epoch, at, delay, &head(durable));
    (txn.compare_names().to_vec(), txn.writes().to_vec())
}

#[test]
#[cfg(debug_assertions)]
fn handoff_compares_writes_and_the_bug_that_removes_the_holder_compares() {
    let (compares, writes) = handoff(&[], false, true, true);
    assert_eq!(
        compares,
        [
            "epoch",
            "shard-fence",
            "token",
            "lease",
            "head-session",
            "head-place"
        ]
    );
    assert_eq!(writes, ["/l/pay/k", "/d/pay/k", "/q/pay/k//7b"]);
    // A permit's handoff claims every permit of the key for the batch, and compares the
    // head holds none of them.
    let (compares, writes) = handoff(&[], true, false, false);
    assert_eq!(
        compares,
        [
            "epoch",
            "shard-fence",
            "token",
            "lease",
            "head-session",
            "head-holds-no-permit"
        ]
    );
    assert_eq!(
        writes,
        [
            permit_key(&LockKey::parse("pay/k").unwrap(), 2),
            permits_prefix(&LockKey::parse("pay/k").unwrap())
        ]
    );
    for durable in [false, true] {
        let (mut want, writes) = handoff(&[], false, durable, false);
        want.retain(|n| !matches!(*n, "token" | "lease"));
        let (got, buggy_writes) =
            handoff(&[Bug::HandoffWithoutHolderCompare], false, durable, false);
        assert_eq!(got, want);
        assert_eq!(buggy_writes, writes);
    }
}
