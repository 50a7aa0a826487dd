#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use crate::registry::Source;

const TODAY: Date = Date {
    year: 2026,
    month: 12,
    day: 2,
};

fn src(text: &str) -> Vec<Source> {
    vec![Source {
        name: "test.yaml".into(),
        text: text.into(),
    }]
}

const NS: &str = "apiVersion: lock.dev/v1alpha1\nkind: Namespace\nmetadata: {name: pay}\nspec: {region: local}\n---\n";

fn class(spec: &str) -> String {
    format!(
        "{NS}apiVersion: lock.dev/v1alpha1\nkind: LockClass\nmetadata: {{name: c1}}\nspec:\n  namespace: pay\n  prefixes: [pay/ledger]\n{spec}"
    )
}

fn errors(text: &str) -> Vec<RegistryError> {
    Registry::load(&src(text), TODAY).unwrap_err().0
}

#[test]
fn dev_registry_loads() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/registry/dev");
    let sources: Vec<Source> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            Source {
                name: p.display().to_string(),
                text: std::fs::read_to_string(&p).unwrap(),
            }
        })
        .collect();
    let reg = Registry::load(&sources, TODAY).unwrap();
    let k = LockKey::parse("orders/batch/7").unwrap();
    let c = reg.class_for(&k).unwrap();
    assert_eq!((c.name, c.ttl_seconds), ("orders-batch", 60));
    let k = LockKey::parse("orders/batchy").unwrap();
    assert_eq!(reg.class_for(&k).unwrap().name, "orders-default");
    assert!(
        reg.class_for(&LockKey::parse("pay/other").unwrap())
            .is_none()
    );
}

#[test]
fn each_invalid_class_is_refused_naming_it() {
    let cases = [
        (
            "  purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 4\n",
            "spec.ttlSeconds",
        ),
        (
            "  purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 301\n",
            "spec.ttlSeconds",
        ),
        (
            "  purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 20\n",
            "spec.ttlSeconds",
        ),
        (
            "  purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 60\n  maxHoldSeconds: 59\n",
            "spec.maxHoldSeconds",
        ),
        (
            "  purpose: correctness\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n  waiverExpires: \"2027-01-01\"\n",
            "spec.riskOwner",
        ),
        (
            "  purpose: correctness\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n  riskOwner: a\n",
            "spec.waiverExpires",
        ),
        (
            "  purpose: correctness\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n  riskOwner: a\n  waiverExpires: soon\n",
            "spec.waiverExpires",
        ),
        (
            "  purpose: efficiency\n  tier: entity\n  enforcement: fenced\n  onQuorumLoss: open\n",
            "spec.onQuorumLoss",
        ),
        (
            "  purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n  onQuorumLoss: open\n",
            "spec.onQuorumLoss",
        ),
        (
            "  purpose: correctness\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n  riskOwner: a\n  waiverExpires: \"2027-01-01\"\n  onQuorumLoss: open\n",
            "spec.onQuorumLoss",
        ),
        (
            "  purpose: efficiency\n  tier: entity\n  enforcement: fenced\n  resource: pg/ledger\n  schemaVersion: \"3\"\n",
            "spec.enforcement",
        ),
        (
            "  purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n  fairness: sometimes\n",
            "spec",
        ),
        // Lock-delay: advisory only, at most the TTL, memory fairness, not shared.
        (
            "  purpose: efficiency\n  tier: entity\n  enforcement: fenced\n  resource: pg/ledger\n  schemaVersion: \"3\"\n  lockDelaySeconds: 5\n",
            "spec.lockDelaySeconds",
        ),
        (
            "  purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n  lockDelaySeconds: 31\n",
            "spec.lockDelaySeconds",
        ),
        (
            "  purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n  fairness: durable\n  lockDelaySeconds: 10\n",
            "spec.lockDelaySeconds",
        ),
        (
            "  purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n  shared: true\n  lockDelaySeconds: 10\n",
            "spec.lockDelaySeconds",
        ),
        // Semaphores: 2..=64 permits, memory fairness, not shared, no lock-delay.
        (
            "  purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n  permits: 1\n",
            "spec.permits",
        ),
        (
            "  purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n  permits: 65\n",
            "spec.permits",
        ),
        (
            "  purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n  fairness: durable\n  permits: 3\n",
            "spec.permits",
        ),
        (
            "  purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n  shared: true\n  permits: 3\n",
            "spec.permits",
        ),
        (
            "  purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n  lockDelaySeconds: 5\n  permits: 3\n",
            "spec.permits",
        ),
        // Shared holds with a durable queue: every shared grant would overtake the queue.
        (
            "  purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n  fairness: durable\n  shared: true\n",
            "spec.shared",
        ),
        (
            "  purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSecond: 30\n",
            "spec",
        ), // ADR-07: the tier is required (no default to entity).
        (
            "  purpose: efficiency\n  enforcement: advisory\n  ttlSeconds: 30\n",
            "spec",
        ),
    ];
    for (spec, field) in cases {
        let errs = errors(&class(spec));
        assert!(
            errs.iter().any(|e| e.field == field
                && e.document == "LockClass/c1"
                && e.source == "test.yaml"),
            "{spec:?} -> {errs:?}"
        );
    }
}

#[test]
fn fenced_needs_an_unexpired_pause_test_result() {
    let fenced = class(
        "  purpose: correctness\n  tier: entity\n  enforcement: fenced\n  resource: pg/ledger\n  schemaVersion: \"3\"\n  ttlSeconds: 10\n",
    );
    let result = |passed: &str, expires: &str| {
        format!(
            "{fenced}---\napiVersion: lock.dev/v1alpha1\nkind: PauseTestResult\nmetadata: {{name: r1}}\nspec:\n  class: c1\n  resource: pg/ledger\n  schemaVersion: \"3\"\n  passedAt: \"{passed}\"\n  expires: \"{expires}\"\n"
        )
    };
    assert!(Registry::load(&src(&result("2026-11-01", "2027-11-01")), TODAY).is_ok());
    let expired = errors(&result("2025-11-01", "2026-11-01"));
    assert!(expired[0].problem.contains("c1"), "{expired:?}");
    // An expiry more than one year after the pass is not accepted as evidence.
    assert!(Registry::load(&src(&result("2026-11-01", "2028-11-01")), TODAY).is_err());
}

/// ADR-01, 17: fenced means this resource, as it is now. A result counts only for its
/// class's resource and schema version; the refusal says what the result it found is for.
#[test]
fn a_pause_test_result_counts_only_for_its_resource_and_schema_version() {
    let class_on = |resource: &str, version: &str| {
        class(&format!(
            "  purpose: correctness\n  tier: entity\n  enforcement: fenced\n{resource}{version}  ttlSeconds: 10\n"
        ))
    };
    let result = "---\napiVersion: lock.dev/v1alpha1\nkind: PauseTestResult\nmetadata: {name: r1}\nspec:\n  class: c1\n  resource: pg/ledger\n  schemaVersion: \"3\"\n  passedAt: \"2026-11-01\"\n  expires: \"2027-11-01\"\n";
    let cases = [
        (
            "its own resource and version",
            "  resource: pg/ledger\n",
            "  schemaVersion: \"3\"\n",
            None,
        ),
        (
            "another resource",
            "  resource: pg/payouts\n",
            "  schemaVersion: \"3\"\n",
            Some((
                "spec.enforcement",
                "for pg/payouts at schema version 3 (the unexpired one for this class is for pg/ledger at schema version 3)",
            )),
        ),
        (
            "the schema changed since the test",
            "  resource: pg/ledger\n",
            "  schemaVersion: \"4\"\n",
            Some((
                "spec.enforcement",
                "for pg/ledger at schema version 4 (the unexpired one",
            )),
        ),
        (
            "no resource named",
            "",
            "  schemaVersion: \"3\"\n",
            Some(("spec.resource", "must name the resource")),
        ),
        (
            "no schema version named",
            "  resource: pg/ledger\n",
            "",
            Some((
                "spec.schemaVersion",
                "must name that resource's schema version",
            )),
        ),
    ];
    for (name, resource, version, want) in cases {
        let text = format!("{}{result}", class_on(resource, version));
        match (Registry::load(&src(&text), TODAY), want) {
            (Ok(_), None) => {}
            (Err(errs), Some((field, says))) => assert!(
                errs.0
                    .iter()
                    .any(|e| e.field == field && e.problem.contains(says)),
                "{name}: {errs:?}"
            ),
            (got, want) => panic!("{name}: {:?}, wanted {want:?}", got.map(|_| "accepted")),
        }
    }
}

#[test]
fn grants_and_namespaces_are_checked() {
    let text = format!(
        "{NS}apiVersion: lock.dev/v1alpha1\nkind: LockGrant\nmetadata: {{name: g}}\nspec:\n  spiffeId: spiffe://td/x\n  prefixes: [nope/x, pay/ok, \"pay/a//b\"]\n---\napiVersion: lock.dev/v1alpha1\nkind: LockGrant\nmetadata: {{name: h}}\nspec:\n  spiffeId: not-a-spiffe-id\n  prefixes: [pay]\n"
    );
    let errs = errors(&text);
    let fields: Vec<_> = errs
        .iter()
        .map(|e| (e.document.as_str(), e.field.as_str()))
        .collect();
    assert!(
        fields.contains(&("LockGrant/g", "spec.prefixes[0]")),
        "{errs:?}"
    );
    assert!(
        fields.contains(&("LockGrant/g", "spec.prefixes[2]")),
        "{errs:?}"
    );
    assert!(
        fields.contains(&("LockGrant/h", "spec.spiffeId")),
        "{errs:?}"
    );
}

#[test]
fn overlapping_class_prefixes_are_refused_and_nested_resolve_longest() {
    let two = format!(
        "{}---\napiVersion: lock.dev/v1alpha1\nkind: LockClass\nmetadata: {{name: c2}}\nspec:\n  namespace: pay\n  prefixes: [pay/ledger]\n  purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n",
        class("  purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n")
    );
    let errs = errors(&two);
    assert!(errs[0].problem.contains("already claimed"), "{errs:?}");
}

#[test]
fn bad_yaml_and_versions_are_located() {
    let errs = errors("kind: [unclosed");
    assert_eq!(errs[0].source, "test.yaml");
    let errs =
        errors("apiVersion: v0\nkind: Namespace\nmetadata: {name: pay}\nspec: {region: x}\n");
    assert_eq!(errs[0].field, "apiVersion");
}

#[test]
fn dates() {
    assert!(Date::parse("2024-02-29").is_some());
    assert!(Date::parse("2023-02-29").is_none());
    assert!(Date::parse("2023-13-01").is_none());
    assert!(Date::parse("23-01-01").is_none());
    assert_eq!(
        Date::parse("2024-02-29")
            .unwrap()
            .plus_one_year()
            .to_string(),
        "2025-02-28"
    );
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

        /// Arbitrary text and mangled documents: located errors, never a panic.
        #[test]
        fn registry_parsing_never_panics(
            text in "\\PC{0,300}",
            cut in 0usize..400,
        ) {
            let _ = Registry::load(&src(&text), TODAY);
            let good = class("  purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n");
            let mangled: String = good.chars().take(cut).chain(text.chars().take(20)).collect();
            let _ = Registry::load(&src(&mangled), TODAY);
        }
    }
}

#[test]
fn a_namespace_owner_is_a_label_value_alerts_route_on() {
    let ns = |owner: &str| {
        format!(
            "apiVersion: lock.dev/v1alpha1\nkind: Namespace\nmetadata: {{name: pay}}\nspec: {{region: x, owner: {owner:?}}}\n"
        )
    };
    for ok in ["payments", "team-7", "a"] {
        let reg = Registry::load(&src(&ns(ok)), TODAY).unwrap();
        let (_, spec) = reg.namespaces().next().unwrap();
        assert_eq!(spec.owner.as_deref(), Some(ok));
    }
    let long = "a".repeat(64);
    for bad in ["Payments", "pay ments", "-pay", "pay-", "", long.as_str()] {
        let errs = errors(&ns(bad));
        assert_eq!(errs[0].field, "spec.owner", "{bad:?}: {errs:?}");
        assert!(errs[0].problem.contains("label value"), "{errs:?}");
    }
    // Without one: allowed (the alerts carry owner="" and take the default route).
    assert!(Registry::load(&src(NS), TODAY).is_ok());
}

#[test]
fn lock_delay_is_accepted_on_advisory_classes_up_to_the_ttl() {
    for (delay, want) in [(0, None), (1, Some(1)), (30, Some(30))] {
        let text = class(&format!(
            "  purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n  lockDelaySeconds: {delay}\n"
        ));
        let reg = Registry::load(&src(&text), TODAY).unwrap();
        let c = reg.classes().next().unwrap();
        assert_eq!(c.lock_delay_seconds(), want, "{delay}");
    }
}

#[test]
fn a_semaphore_class_has_its_permits() {
    let text = class(
        "  purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n  permits: 3\n",
    );
    let reg = Registry::load(&src(&text), TODAY).unwrap();
    assert_eq!(reg.classes().next().unwrap().permits(), Some(3));
}
