use super::*;

const BASE: &str = r#"
apiVersion: lock.dev/v1alpha1
kind: Namespace
metadata: {name: pay}
spec: {region: eu}
---
apiVersion: lock.dev/v1alpha1
kind: LockClass
metadata: {name: ledger}
spec: {namespace: pay, prefixes: [pay/ledger], purpose: correctness, tier: entity, enforcement: fenced, resource: pg, schemaVersion: "1", ttlSeconds: 15}
---
apiVersion: lock.dev/v1alpha1
kind: PauseTestResult
metadata: {name: ledger-pg}
spec: {class: ledger, resource: pg, schemaVersion: "1", passedAt: "2026-11-01", expires: "2027-06-01"}
"#;

fn today() -> Date {
    Date::parse("2026-12-04").unwrap()
}

fn req(op: &str, kind: &str, object: &str) -> AdmissionRequest {
    let v: Value = serde_yaml_ng::from_str(object).unwrap();
    AdmissionRequest {
        uid: "u1".into(),
        kind: GroupVersionKind {
            group: "lock.dev".into(),
            version: "v1alpha1".into(),
            kind: kind.into(),
        },
        operation: op.into(),
        name: String::new(),
        object: (op != "DELETE").then(|| v.clone()),
        old_object: (op != "CREATE").then_some(v),
    }
}

fn class(spec: &str) -> String {
    format!(
        "apiVersion: lock.dev/v1alpha1\nkind: LockClass\nmetadata: {{name: c2, namespace: lock, uid: x}}\nspec: {spec}\n"
    )
}

#[test]
fn admission_table() {
    let base = [Source {
        name: "base.yaml".into(),
        text: BASE.into(),
    }];
    let pause = "apiVersion: lock.dev/v1alpha1\nkind: PauseTestResult\nmetadata: {name: ledger-pg}\nspec: {class: ledger, resource: pg, schemaVersion: \"1\", passedAt: \"2026-11-01\", expires: \"2027-06-01\"}\n";
    let cases: Vec<(&str, AdmissionRequest, Result<(), &str>)> = vec![
        (
            "a fenced class may not be open on quorum loss",
            req(
                "CREATE",
                "LockClass",
                &class(
                    "{namespace: pay, prefixes: [pay/cache], purpose: efficiency, tier: entity, enforcement: fenced, onQuorumLoss: open}",
                ),
            ),
            Err("onQuorumLoss"),
        ),
        (
            "open on quorum loss is not built, even for an efficiency, advisory class",
            req(
                "CREATE",
                "LockClass",
                &class(
                    "{namespace: pay, prefixes: [pay/cache], purpose: efficiency, tier: entity, enforcement: advisory, ttlSeconds: 30, onQuorumLoss: open}",
                ),
            ),
            Err("not built"),
        ),
        (
            "a class without its tier (ADR-07: no default)",
            req(
                "CREATE",
                "LockClass",
                &class(
                    "{namespace: pay, prefixes: [pay/cache], purpose: efficiency, enforcement: advisory, ttlSeconds: 30}",
                ),
            ),
            Err("tier"),
        ),
        (
            "a fenced class without a pause test",
            req(
                "CREATE",
                "LockClass",
                &class(
                    "{namespace: pay, prefixes: [pay/jobs], purpose: correctness, tier: entity, enforcement: fenced, resource: pg/jobs, schemaVersion: '1'}",
                ),
            ),
            Err("PauseTestResult"),
        ),
        (
            "correctness with an open quorum posture",
            req(
                "CREATE",
                "LockClass",
                &class(
                    "{namespace: pay, prefixes: [pay/jobs], purpose: correctness, tier: entity, enforcement: advisory, riskOwner: a, waiverExpires: '2027-01-01', ttlSeconds: 30, onQuorumLoss: open}",
                ),
            ),
            Err("open"),
        ),
        (
            "TTL out of range",
            req(
                "UPDATE",
                "LockClass",
                "apiVersion: lock.dev/v1alpha1\nkind: LockClass\nmetadata: {name: ledger}\nspec: {namespace: pay, prefixes: [pay/ledger], purpose: correctness, tier: entity, enforcement: fenced, resource: pg, schemaVersion: '1', ttlSeconds: 3}\n",
            ),
            Err("ttl"),
        ),
        (
            "advisory correctness without a risk owner",
            req(
                "CREATE",
                "LockClass",
                &class(
                    "{namespace: pay, prefixes: [pay/jobs], purpose: correctness, tier: entity, enforcement: advisory, waiverExpires: '2027-01-01', ttlSeconds: 30}",
                ),
            ),
            Err("riskOwner"),
        ),
        (
            "advisory correctness without a waiver",
            req(
                "CREATE",
                "LockClass",
                &class(
                    "{namespace: pay, prefixes: [pay/jobs], purpose: correctness, tier: entity, enforcement: advisory, riskOwner: a, ttlSeconds: 30}",
                ),
            ),
            Err("waiverExpires"),
        ),
        (
            "advisory below the 30 s floor",
            req(
                "CREATE",
                "LockClass",
                &class(
                    "{namespace: pay, prefixes: [pay/jobs], purpose: efficiency, tier: entity, enforcement: advisory, ttlSeconds: 15}",
                ),
            ),
            Err("at least 30"),
        ),
        (
            "a good advisory class",
            req(
                "CREATE",
                "LockClass",
                &class(
                    "{namespace: pay, prefixes: [pay/jobs], purpose: efficiency, tier: entity, enforcement: advisory, riskOwner: a, waiverExpires: '2027-01-01', ttlSeconds: 30}",
                ),
            ),
            Ok(()),
        ),
        (
            "a misspelt field",
            req(
                "CREATE",
                "LockClass",
                &class(
                    "{namespace: pay, prefixes: [pay/jobs], purpose: efficiency, tier: entity, enforcement: advisory, riskOwner: a, waiverExpires: '2027-01-01', ttlSecond: 30}",
                ),
            ),
            Err("unknown field"),
        ),
        (
            "a class in a namespace that does not exist",
            req(
                "CREATE",
                "LockClass",
                &class(
                    "{namespace: nope, prefixes: [nope/x], purpose: efficiency, tier: entity, enforcement: advisory, riskOwner: a, waiverExpires: '2027-01-01', ttlSeconds: 30}",
                ),
            ),
            Err("nope"),
        ),
        (
            "deleting the pause test a fenced class relies on",
            req("DELETE", "PauseTestResult", pause),
            Err("PauseTestResult"),
        ),
        (
            "an expired pause test",
            req(
                "UPDATE",
                "PauseTestResult",
                &pause.replace("2027-06-01", "2026-12-01"),
            ),
            Err("expire"),
        ),
        (
            "a grant",
            req(
                "CREATE",
                "LockGrant",
                "apiVersion: lock.dev/v1alpha1\nkind: LockGrant\nmetadata: {name: w}\nspec: {spiffeId: 'spiffe://td/ns/pay/sa/w', prefixes: [pay/ledger]}\n",
            ),
            Ok(()),
        ),
        (
            "kind and object disagree",
            req("CREATE", "LockGrant", &class("{}")),
            Err("request is for a LockGrant"),
        ),
    ];
    for (name, r, want) in cases {
        let v = review(&base, &r, today());
        match want {
            Ok(()) => assert!(v.allowed, "{name}: refused: {}", v.message),
            Err(needle) => {
                assert!(!v.allowed, "{name}: admitted");
                assert!(
                    v.message.to_lowercase().contains(&needle.to_lowercase()),
                    "{name}: {:?} lacks {needle:?}",
                    v.message
                );
            }
        }
    }
}

#[test]
fn other_kinds_are_refused_and_the_response_is_v1() {
    let mut r = req(
        "CREATE",
        "LockGrant",
        "kind: LockGrant\nmetadata: {name: x}\n",
    );
    r.kind.group = "apps".into();
    let v = review(&[], &r, today());
    assert!(!v.allowed);
    let out = v.review("u1");
    assert_eq!(out["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(out["response"]["uid"], "u1");
    assert_eq!(out["response"]["allowed"], false);
    assert_eq!(out["response"]["status"]["code"], 403);
}
