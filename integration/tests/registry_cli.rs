//! `lockctl registry check DIR`: accepts the dev registry with the cost table, and rejects
//! each invalid class of DESIGN 5 with a message naming the file, the class and the field.

use lock_integration::paths::dev_registry;
use lock_integration::stack::lockctl;

const NS: &str = "apiVersion: lock.dev/v1alpha1\nkind: Namespace\nmetadata: {name: pay}\nspec: {region: local}\n";

fn check(dir: &std::path::Path) -> (Option<i32>, String) {
    let out = lockctl(&["registry", "check", dir.to_str().unwrap()], &[]).unwrap();
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn dev_registry_passes_with_costs() {
    let (code, out) = check(&dev_registry());
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("KEEPALIVES/S") && out.contains("pay-ledger"),
        "{out}"
    );
}

#[test]
fn each_invalid_class_is_rejected_by_name() {
    let cases = [
        (
            "ttl-low",
            "purpose: efficiency\n  enforcement: advisory\n  ttlSeconds: 4",
            "spec.ttlSeconds",
        ),
        (
            "ttl-high",
            "purpose: efficiency\n  enforcement: advisory\n  ttlSeconds: 301",
            "spec.ttlSeconds",
        ),
        (
            "advisory-floor",
            "purpose: efficiency\n  enforcement: advisory\n  ttlSeconds: 15",
            "spec.ttlSeconds",
        ),
        (
            "no-owner",
            "purpose: correctness\n  enforcement: advisory\n  ttlSeconds: 30\n  waiverExpires: \"2027-01-01\"",
            "spec.riskOwner",
        ),
        (
            "no-waiver",
            "purpose: correctness\n  enforcement: advisory\n  ttlSeconds: 30\n  riskOwner: a@b",
            "spec.waiverExpires",
        ),
        (
            "open-correctness",
            "purpose: correctness\n  enforcement: advisory\n  ttlSeconds: 30\n  riskOwner: a@b\n  waiverExpires: \"2027-01-01\"\n  onQuorumLoss: open",
            "spec.onQuorumLoss",
        ),
        (
            "open-fenced",
            "purpose: efficiency\n  enforcement: fenced\n  onQuorumLoss: open",
            "spec.onQuorumLoss",
        ),
        (
            "fenced-untested",
            "purpose: correctness\n  enforcement: fenced",
            "spec.enforcement",
        ),
        (
            "bad-fairness",
            "purpose: efficiency\n  enforcement: advisory\n  ttlSeconds: 30\n  fairness: sometimes",
            "spec",
        ),
        (
            "bad-tier",
            "purpose: efficiency\n  enforcement: advisory\n  ttlSeconds: 30\n  tier: gold",
            "spec",
        ),
        (
            "typo",
            "purpose: efficiency\n  enforcement: advisory\n  ttlSecond: 30",
            "spec",
        ),
    ];
    for (name, spec, field) in cases {
        let dir = tempfile::tempdir().unwrap();
        let doc = format!(
            "{NS}---\napiVersion: lock.dev/v1alpha1\nkind: LockClass\nmetadata: {{name: {name}}}\nspec:\n  namespace: pay\n  prefixes: [pay/x]\n  {spec}\n"
        );
        std::fs::write(dir.path().join("classes.yaml"), doc).unwrap();
        let (code, out) = check(dir.path());
        assert_eq!(code, Some(2), "{name}: {out}");
        assert!(
            out.contains(&format!("LockClass/{name}: {field}")),
            "{name}: {out}"
        );
        assert!(out.contains("classes.yaml"), "{name}: {out}");
    }
}

#[tokio::test]
async fn register_lists_advisory_classes_flags_expired_waivers_and_counts_holds() {
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(dev_registry()).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, dir.path().join(p.file_name().unwrap())).unwrap();
    }
    std::fs::write(
        dir.path().join("old.yaml"),
        "apiVersion: lock.dev/v1alpha1\nkind: LockClass\nmetadata: {name: pay-old}\nspec:\n  namespace: pay\n  prefixes: [pay/old]\n  purpose: correctness\n  enforcement: advisory\n  ttlSeconds: 30\n  riskOwner: legacy@example.com\n  waiverExpires: \"2020-01-31\"\n",
    )
    .unwrap();
    // The dev registry's own waiver has a fixed date; the test's copy moves it a year past
    // today, so the test does not turn red on the day it passes.
    let waiver = lock_arbiter::registry_files::today()
        .plus_one_year()
        .to_string();
    let classes = dir.path().join("classes.yaml");
    let text = std::fs::read_to_string(&classes).unwrap();
    assert!(
        text.contains("waiverExpires: \"2027-06-30\""),
        "the dev registry changed"
    );
    std::fs::write(&classes, text.replace("2027-06-30", &waiver)).unwrap();
    let out = lockctl(&["register", dir.path().to_str().unwrap()], &[]).unwrap();
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{table}");
    let line = |class: &str| {
        table
            .lines()
            .find(|l| l.starts_with(class))
            .unwrap()
            .to_owned()
    };
    assert!(line("pay-old").contains("EXPIRED") && line("pay-old").contains("legacy@example.com"));
    assert!(line("pay-ledger").contains(" ok ") && line("pay-ledger").contains(&waiver));
    assert!(
        !table.contains("orders-default"),
        "efficiency classes are not on the register"
    );

    // JSON, with current holds counted from a live store.
    let stack = lock_integration::Stack::start(lock_integration::StackOptions::default())
        .await
        .unwrap();
    let ops = stack
        .pki
        .svid("ops", lock_integration::pki::OPERATOR)
        .unwrap();
    assert!(
        stack
            .lockctl_as(&ops, &["acquire", "pay/ledger/reg"])
            .unwrap()
            .status
            .success()
    );
    let out = lock_integration::stack::lockctl_etcd(
        &[
            "register",
            dir.path().to_str().unwrap(),
            "--json",
            "--etcd",
            &stack.etcd.client_url,
        ],
        &stack.etcd.pki,
        "operator",
    )
    .unwrap();
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ledger = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["class"] == "pay-ledger")
        .unwrap();
    assert_eq!(ledger["holds"], 1);
    assert_eq!(ledger["expired"], false);
    let old = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["class"] == "pay-old")
        .unwrap();
    assert_eq!(old["expired"], true);
}
