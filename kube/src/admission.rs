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
mod tests;
