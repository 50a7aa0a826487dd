//! The set's grant transaction, without etcd: what it compares, and what the injected bug
//! takes away (exactly the last key's absent-compare).

use super::*;

#[test]
#[cfg(debug_assertions)]
fn set_compares_and_the_bug_that_removes_one() {
    let spec: lock_config::registry::LockClassSpec = serde_json::from_value(serde_json::json!({
        "namespace": "pay",
        "prefixes": ["pay/"],
        "purpose": "efficiency",
        "enforcement": "advisory",
        "tier": "entity",
    }))
    .unwrap();
    let class = ResolvedClass {
        name: "c",
        spec: &spec,
        ttl_seconds: 15,
    };
    let session = Session {
        lease: 0x7a,
        spiffe_id: "spiffe://example.org/ns/pay/sa/a".into(),
        instance: None,
        ttl_seconds: 15,
        create_revision: 40,
    };
    let hkeys = ["/l/pay/a", "/l/pay/b", "/l/pay/c"].map(str::to_owned);
    let classes = [class; 3];
    let epoch = Epoch::for_tests(5, Some(9));
    let build = |bugs: Vec<Bug>| {
        let (txn, _) = grant_txn(
            &Bugs::new(bugs),
            &epoch,
            &session,
            &hkeys,
            &classes,
            "/x/7a/1",
        );
        let (etcd_txn, _) = txn.clone().into_parts();
        let request = etcd_client::proto::PbTxnRequest::from(etcd_txn);
        let keys: Vec<String> = request
            .compare
            .iter()
            .map(|c| String::from_utf8_lossy(&c.key).into_owned())
            .collect();
        (txn.compare_names().to_vec(), keys)
    };
    let (names, keys) = build(vec![]);
    assert_eq!(
        names,
        [
            "epoch",
            "session",
            "attempt-fence-absent",
            "shard-fence",
            "holder-absent",
            "holder-absent",
            "holder-absent"
        ]
    );
    let (buggy_names, buggy_keys) = build(vec![Bug::SetWithoutOneCompare]);
    assert_eq!(buggy_names, names[..names.len() - 1]);
    assert_eq!(buggy_keys, keys[..keys.len() - 1]);
    assert_eq!(keys.last().map(String::as_str), Some("/l/pay/c"));
}
