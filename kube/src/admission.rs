//! The validating admission webhook's decision (pure): a registry change is admitted when
//! the registry with it applied has no problem the registry without it did not have.
//!
//! The judge is the registry's one validation (`lock_config::registry::Registry::load`),
//! so the webhook refuses exactly what `lockctl registry check`, the arbiters and
//! `grants push` refuse — a fenced class without an unexpired PauseTestResult, a
//! class declaring `onQuorumLoss: open` (not built), a TTL outside 5–300 s (30 s at least
//! for advisory), an advisory correctness class without `riskOwner` and `waiverExpires`,
//! unknown fields, grants to namespaces that do not exist — including across documents: a
//! delete is refused if what is left breaks (the PauseTestResult a fenced class relies on).
//!
//! AdmissionReview v1 is written out here (a few fields of `admission.k8s.io/v1`) rather
//! than taken from k8s-openapi, whose types for every Kubernetes API would dominate the
//! build for these few fields.

use lock_config::registry::resource::normalize;
use lock_config::registry::{Date, Registry, RegistryError, Source};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeSet;

pub const KINDS: [&str; 4] = ["Namespace", "LockClass", "LockGrant", "PauseTestResult"];

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionReview {
    pub api_version: String,
    pub kind: String,
    pub request: Option<AdmissionRequest>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct GroupVersionKind {
    pub group: String,
    pub version: String,
    pub kind: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    pub uid: String,
    pub kind: GroupVersionKind,
    pub operation: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub object: Option<Value>,
    #[serde(default)]
    pub old_object: Option<Value>,
}

/// What the webhook answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub allowed: bool,
    /// Why not (every new problem, one per line).
    pub message: String,
}

impl Verdict {
    fn allow() -> Self {
        Verdict {
            allowed: true,
            message: String::new(),
        }
    }
    fn deny(message: impl Into<String>) -> Self {
        Verdict {
            allowed: false,
            message: message.into(),
        }
    }

    /// The AdmissionReview v1 response for request `uid`.
    pub fn review(&self, uid: &str) -> Value {
        let mut response = json!({"uid": uid, "allowed": self.allowed});
        if !self.allowed {
            response["status"] = json!({"code": 403, "reason": "Invalid", "message": self.message});
        }
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": response,
        })
    }
}

/// Every registry document in `sources`, normalised (Lists expanded, server metadata off).
fn documents(sources: &[Source]) -> Vec<Value> {
    use serde::Deserialize as _;
    let mut out = Vec::new();
    for s in sources {
        for de in serde_yaml_ng::Deserializer::from_str(&s.text) {
            let Ok(v) = serde_yaml_ng::Value::deserialize(de) else {
                break;
            };
            if v.is_null() {
                continue;
            }
            if let Ok(json) = serde_json::to_value(&v) {
                out.extend(normalize(json));
            }
        }
    }
    out
}

fn identity(doc: &Value) -> (String, String) {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
    (
        text(doc.get("kind")),
        text(doc.get("metadata").and_then(|m| m.get("name"))),
    )
}

fn as_source(docs: &[Value]) -> Source {
    let text = docs
        .iter()
        .map(|d| serde_yaml_ng::to_string(d).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("---\n");
    Source {
        name: "admission".into(),
        text,
    }
}

/// Problems, without the file they were found in (the same document reads the same in
/// the reviewed files and in the cluster).
fn problems(sources: &[Source], today: Date) -> BTreeSet<(String, String, String)> {
    match Registry::load(sources, today) {
        Ok(_) => BTreeSet::new(),
        Err(e) => {
            e.0.into_iter()
                .map(
                    |RegistryError {
                         document,
                         field,
                         problem,
                         ..
                     }| (document, field, problem),
                )
                .collect()
        }
    }
}

/// Decides `req` against the registry `current` (the documents in force), on `today`.
pub fn review(current: &[Source], req: &AdmissionRequest, today: Date) -> Verdict {
    if req.kind.group != crate::crd::GROUP || !KINDS.contains(&req.kind.kind.as_str()) {
        return Verdict::deny(format!(
            "{}/{} is not a registry kind: this webhook judges only {} {:?}",
            req.kind.group,
            req.kind.kind,
            crate::crd::GROUP,
            KINDS
        ));
    }
    let mut docs = documents(current);
    let target = match req.operation.as_str() {
        "CREATE" | "UPDATE" => req.object.clone(),
        "DELETE" => req.old_object.clone(),
        _ => return Verdict::allow(),
    };
    let Some(target) = target else {
        return Verdict::deny(format!("{} without the object", req.operation));
    };
    let normalized = normalize(target);
    let [object] = normalized.as_slice() else {
        return Verdict::deny("one object per request");
    };
    let (kind, name) = identity(object);
    if kind != req.kind.kind || name.is_empty() {
        return Verdict::deny(format!(
            "the object is {kind}/{name}, the request is for a {}",
            req.kind.kind
        ));
    }
    docs.retain(|d| identity(d) != (kind.clone(), name.clone()));
    if req.operation != "DELETE" {
        docs.push(object.clone());
    }
    let before = problems(current, today);
    let after = problems(&[as_source(&docs)], today);
    let new: Vec<String> = after
        .difference(&before)
        .map(|(doc, field, problem)| format!("{doc}: {field}: {problem}"))
        .collect();
    if new.is_empty() {
        Verdict::allow()
    } else {
        Verdict::deny(format!(
            "{} {kind}/{name} refused by the registry's validation:\n{}",
            req.operation.to_lowercase(),
            new.join("\n")
        ))
    }
}

#[cfg(test)]
mod tests {
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
}
