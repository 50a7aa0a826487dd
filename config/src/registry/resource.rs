//! Registry documents as Kubernetes custom resources (ADR-24): the reviewed YAML files and
//! the CRs in a cluster are one format. What `kubectl get lockclasses -o yaml` prints adds
//! server-set metadata (uid, resourceVersion, managedFields...), a `status`, and wraps many
//! objects in a `kind: List`; [`normalize`] takes those off so the one validation reads
//! either. Any other extra field is still an error: a misspelt safety field must not be
//! ignored, and neither may a misspelt metadata field.

use serde_json::Value;

/// Metadata fields the API server sets or users may add, none of which the registry reads.
pub const KUBERNETES_METADATA: [&str; 14] = [
    "namespace",
    "labels",
    "annotations",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "finalizers",
    "ownerReferences",
    "generateName",
    "selfLink",
];

/// One YAML document (as JSON) → the registry documents in it: a `List`'s items, each with
/// Kubernetes-only metadata and `status` removed. Anything else is returned as it was, for
/// the document parser to judge.
pub fn normalize(value: Value) -> Vec<Value> {
    let is_list = value
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k == "List" || k.ends_with("List"))
        && value.get("items").is_some_and(Value::is_array);
    if is_list {
        let items = match value {
            Value::Object(mut m) => m.remove("items"),
            _ => None,
        };
        return match items {
            Some(Value::Array(items)) => items.into_iter().map(strip).collect(),
            _ => Vec::new(),
        };
    }
    vec![strip(value)]
}

fn strip(value: Value) -> Value {
    let Value::Object(mut doc) = value else {
        return value;
    };
    doc.remove("status");
    if let Some(Value::Object(meta)) = doc.get_mut("metadata") {
        for k in KUBERNETES_METADATA {
            meta.remove(k);
        }
    }
    Value::Object(doc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn normalize_table() {
        let plain = json!({"apiVersion": "lock.dev/v1alpha1", "kind": "Namespace",
                           "metadata": {"name": "pay"}, "spec": {"region": "eu"}});
        let exported = json!({"apiVersion": "lock.dev/v1alpha1", "kind": "Namespace",
            "metadata": {"name": "pay", "namespace": "lock-registry", "uid": "u1",
                         "resourceVersion": "7", "generation": 2,
                         "creationTimestamp": "2026-12-01T00:00:00Z",
                         "labels": {"team": "pay"}, "managedFields": [{"manager": "kubectl"}]},
            "spec": {"region": "eu"}, "status": {}});
        let typo = json!({"kind": "Namespace", "metadata": {"name": "pay", "lables": {}},
                          "spec": {"region": "eu"}});
        let cases: Vec<(&str, Value, Vec<Value>)> = vec![
            (
                "a reviewed file's document is untouched",
                plain.clone(),
                vec![plain.clone()],
            ),
            (
                "an exported CR loses server metadata and status",
                exported.clone(),
                vec![plain.clone()],
            ),
            (
                "a List becomes its items",
                json!({"apiVersion": "v1", "kind": "List", "items": [exported.clone(), plain.clone()]}),
                vec![plain.clone(), plain.clone()],
            ),
            (
                "kubectl's typed list too",
                json!({"apiVersion": "lock.dev/v1alpha1", "kind": "LockClassList", "items": []}),
                vec![],
            ),
            (
                "a misspelt metadata field stays, for the parser to refuse",
                typo.clone(),
                vec![typo],
            ),
            ("not an object", json!(null), vec![json!(null)]),
        ];
        for (name, input, want) in cases {
            assert_eq!(normalize(input), want, "{name}");
        }
    }
}
