//! The exposition: every family in it, never a key or an identity, and grants read back.

use super::*;

/// lockctl's `register --metrics` reads grants with `lock_store::admin::grants_by_class`:
/// it must read this exposition's.
#[test]
fn grants_are_read_back_by_class() {
    let m = &*METRICS;
    m.grants.get_or_create(&m.class("read-back")).inc();
    m.grants.get_or_create(&m.class("read-back")).inc();
    let g = lock_store::admin::grants_by_class(&m.encode());
    assert_eq!(g.get("read-back"), Some(&2));
}

#[test]
fn the_exposition_has_every_family_and_no_key_or_identity() {
    let m = &*METRICS;
    m.grants.get_or_create(&m.class("pay-ledger")).inc();
    m.refused(Reason::Held);
    m.request("acquire", Err(Reason::Held), Duration::from_millis(3));
    m.etcd("txn", true, Duration::from_millis(1));
    let text = m.encode();
    for family in [
        "lock_arbiter_grants_total{class=\"pay-ledger\"}",
        "lock_arbiter_refusals_total{reason=\"HELD\"}",
        "lock_arbiter_request_seconds_bucket{",
        "operation=\"acquire\"",
        "outcome=\"HELD\"",
        "lock_arbiter_etcd_request_seconds_count{operation=\"txn\",outcome=\"ok\"}",
        "lock_arbiter_queue_depth ",
        "lock_arbiter_sealed ",
        "lock_arbiter_epoch ",
        "lock_arbiter_serving ",
        "lock_arbiter_registry_version ",
    ] {
        assert!(text.contains(family), "{family} missing from:\n{text}");
    }
}
