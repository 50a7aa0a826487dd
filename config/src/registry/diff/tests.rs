use super::*;
use crate::registry::{Date, Registry, Source};

const BASE: &str = r#"
apiVersion: lock.dev/v1alpha1
kind: Namespace
metadata: {name: pay}
spec: {region: eu-west}
---
apiVersion: lock.dev/v1alpha1
kind: LockClass
metadata: {name: pay-ledger}
spec:
  namespace: pay
  prefixes: [pay/ledger]
  purpose: efficiency
  tier: entity
  enforcement: advisory
  ttlSeconds: 60
---
apiVersion: lock.dev/v1alpha1
kind: LockGrant
metadata: {name: ledger}
spec:
  spiffeId: spiffe://dev.lock.local/ns/pay/sa/ledger
  prefixes: [pay/ledger]
"#;

const MORE: &str =
    "+2 etcd writes per waiter (durable fairness: the queue entry written and deleted)";
const LESS: &str =
    "-2 etcd writes per waiter (memory fairness: no queue entry written and deleted)";
/// A second class in BASE's namespace (append a `fairness:` line to vary it).
const AUDIT: &str = "---\napiVersion: lock.dev/v1alpha1\nkind: LockClass\nmetadata: {name: pay-audit}\nspec:\n  namespace: pay\n  prefixes: [pay/audit]\n  purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n";

fn load(text: &str) -> Registry {
    Registry::load(
        &[Source {
            name: "t.yaml".into(),
            text: text.into(),
        }],
        Date::parse("2026-12-04").unwrap(),
    )
    .unwrap()
}

/// Each change as (line, risky), followed by its cost line (indented, never risky).
fn lines_between(old: &str, new: &str) -> Vec<(String, bool)> {
    diff(&load(old), &load(new))
        .iter()
        .flat_map(|c| {
            std::iter::once((c.to_string(), c.risky()))
                .chain(c.cost().map(|cost| (format!("  {cost}"), false)))
        })
        .collect()
}

fn lines(new: &str) -> Vec<(String, bool)> {
    lines_between(BASE, new)
}

#[test]
fn table() {
    let ledger = "spiffe://dev.lock.local/ns/pay/sa/ledger";
    type Case<'a> = (&'a str, String, Vec<(String, bool)>);
    let cases: Vec<Case> = vec![
            ("nothing", BASE.into(), vec![]),
            (
                "a prefix granted",
                BASE.replace("spiffeId: spiffe://dev.lock.local/ns/pay/sa/ledger\n  prefixes: [pay/ledger]", "spiffeId: spiffe://dev.lock.local/ns/pay/sa/ledger\n  prefixes: [pay/ledger, pay/audit]"),
                vec![(format!("+ grant     {ledger} may lock pay/audit"), true)],
            ),
            (
                "a prefix taken away (safe)",
                BASE.replace("spiffeId: spiffe://dev.lock.local/ns/pay/sa/ledger\n  prefixes: [pay/ledger]", "spiffeId: spiffe://dev.lock.local/ns/pay/sa/ledger\n  prefixes: [pay/ledger/eu]"),
                vec![
                    (format!("+ grant     {ledger} may lock pay/ledger/eu"), true),
                    (format!("- grant     {ledger} may no longer lock pay/ledger"), false),
                ],
            ),
            (
                "the namespace moves region",
                BASE.replace("region: eu-west", "region: us-east"),
                vec![("~ namespace pay: region eu-west -> us-east".into(), true)],
            ),
            (
                "a shorter TTL is riskier, a longer one is not",
                BASE.replace("ttlSeconds: 60", "ttlSeconds: 30"),
                vec![("~ class     pay-ledger: ttlSeconds 60 -> 30".into(), true)],
            ),
            (
                "longer TTL",
                BASE.replace("ttlSeconds: 60", "ttlSeconds: 120"),
                vec![("~ class     pay-ledger: ttlSeconds 60 -> 120".into(), false)],
            ),
            // No "closed -> open on quorum loss" case: validation refuses `open` until ADR-04's
            // open mode exists (validate/classes.rs), so no loaded registry holds it.
            (
                "durable fairness and coord tier",
                BASE.replace("tier: entity", "tier: coord")
                    .replace("ttlSeconds: 60", "ttlSeconds: 60\n  fairness: durable"),
                vec![
                    ("~ class     pay-ledger: fairness memory -> durable".into(), false),
                    (format!("  pay-ledger: {MORE}"), false),
                    ("~ class     pay-ledger: tier entity -> coord".into(), false),
                ],
            ),
            (
                "a class added with durable fairness: its waiters' writes",
                format!("{BASE}{AUDIT}  fairness: durable\n"),
                vec![
                    ("+ class     pay-audit (ttl 30s)".into(), false),
                    (format!("  pay-audit: {MORE}"), false),
                ],
            ),
            (
                "a class added with memory fairness: no cost line",
                format!("{BASE}{AUDIT}"),
                vec![("+ class     pay-audit (ttl 30s)".into(), false)],
            ),
            (
                "the fence evidence's resource and schema version",
                BASE.replace(
                    "tier: entity",
                    "tier: entity\n  resource: pg/ledger\n  schemaVersion: \"4\"",
                ),
                vec![
                    ("~ class     pay-ledger: resource - -> pg/ledger".into(), false),
                    ("~ class     pay-ledger: schemaVersion - -> 4".into(), false),
                ],
            ),
            (
                "a rate budget set",
                format!("{BASE}  rate: {{perSecond: 5, burst: 10}}\n"),
                vec![(format!("~ rate      {ledger}: default -> 5/s burst 10"), false)],
            ),
            (
                "an owner named: shown, not risky",
                BASE.replace("spec: {region: eu-west}", "spec: {region: eu-west, owner: payments}"),
                vec![("~ namespace pay: owner (none) -> payments".to_owned(), false)],
            ),
            (
                "ValidateToken's own budget set",
                format!("{BASE}  validateRate: {{perSecond: 2, burst: 4}}\n"),
                vec![(
                    format!("~ rate      {ledger} (validateRate): default -> 2/s burst 4"),
                    false,
                )],
            ),
        ];
    for (name, new, want) in cases {
        assert_eq!(lines(&new), want, "{name}");
    }
    // Back from durable to memory: the writes go away.
    let durable = BASE.replace("ttlSeconds: 60", "ttlSeconds: 60\n  fairness: durable");
    assert_eq!(
        lines_between(&durable, BASE),
        vec![
            (
                "~ class     pay-ledger: fairness durable -> memory".into(),
                false
            ),
            (format!("  pay-ledger: {LESS}"), false),
        ]
    );
}

#[test]
fn a_push_is_diffed_against_the_live_filter_configuration() {
    let base = load(BASE);
    let old =
        crate::FilterConfig::from_registry(&base, "eu-west", &["dev.lock.local".into()], None);
    let wider = BASE.replace(
            "spiffeId: spiffe://dev.lock.local/ns/pay/sa/ledger\n  prefixes: [pay/ledger]",
            "spiffeId: spiffe://dev.lock.local/ns/pay/sa/ledger\n  prefixes: [pay/ledger, pay/audit]",
        ).replace("region: eu-west", "region: us-east");
    let new = crate::FilterConfig::from_registry(
        &load(&wider),
        "eu-west",
        &["dev.lock.local".into()],
        None,
    );
    let lines: Vec<String> = diff_filter(&old, &new)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        lines,
        vec![
            "+ grant     spiffe://dev.lock.local/ns/pay/sa/ledger may lock pay/audit",
            "~ namespace pay: region eu-west -> us-east",
        ]
    );
    assert!(diff_filter(&old, &old).is_empty());
}

#[test]
fn classes_and_namespaces_come_and_go() {
    let more = format!(
        "{BASE}---\napiVersion: lock.dev/v1alpha1\nkind: Namespace\nmetadata: {{name: orders}}\nspec: {{region: eu-west}}\n---\napiVersion: lock.dev/v1alpha1\nkind: LockClass\nmetadata: {{name: orders-default}}\nspec:\n  namespace: orders\n  prefixes: [orders]\n  purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 45\n"
    );
    let (base, more) = (load(BASE), load(&more));
    let added: Vec<String> = diff(&base, &more).iter().map(ToString::to_string).collect();
    assert_eq!(
        added,
        vec![
            "+ namespace orders in eu-west",
            "+ class     orders-default (ttl 45s)"
        ]
    );
    let removed: Vec<String> = diff(&more, &base).iter().map(ToString::to_string).collect();
    assert_eq!(
        removed,
        vec![
            "- namespace orders (was in eu-west)",
            "- class     orders-default (was ttl 45s)"
        ]
    );
    assert!((keepalives_per_second(1000, 30) - 100.0).abs() < 1e-9);
}
