//! CustomResourceDefinitions for the registry's four kinds, generated from the document
//! types in lock-config (`schemars`, OpenAPI 3 settings, subschemas inlined).
//!
//! Kubernetes takes only *structural* schemas (apiextensions.k8s.io/v1): every node has a
//! `type`, no `$ref`, no `additionalProperties` beside `properties`, formats from its own
//! list. [`structural_problems`] checks that (table-tested), [`crds`] rewrites schemars'
//! output into it: `deny_unknown_fields` becomes the API server's pruning of unknown fields
//! (and the webhook, which parses strictly, refuses them).

use lock_config::registry::{LockClassSpec, LockGrantSpec, NamespaceSpec, PauseTestResultSpec};
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Value, json};

pub const GROUP: &str = "lock.dev";
pub const VERSION: &str = "v1alpha1";

/// One kind: its names and its spec's schema.
pub struct Kind {
    pub kind: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub short: &'static str,
    pub spec: Value,
    /// `kubectl get` columns: (name, JSON path, type).
    pub columns: &'static [(&'static str, &'static str, &'static str)],
}

fn schema_of<T: JsonSchema>() -> Value {
    let schema = SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator()
        .into_root_schema_for::<T>();
    let mut v = schema.to_value();
    structural(&mut v);
    v
}

/// Formats the API server knows; others are dropped (schemars says `uint32`).
const FORMATS: [&str; 8] = [
    "int32",
    "int64",
    "float",
    "double",
    "byte",
    "date",
    "date-time",
    "password",
];

/// Rewrites a schemars schema into a structural one.
fn structural(v: &mut Value) {
    let Value::Object(m) = v else { return };
    for k in [
        "$schema",
        "title",
        "components",
        "$defs",
        "definitions",
        "examples",
    ] {
        m.remove(k);
    }
    if m.contains_key("properties") {
        m.remove("additionalProperties");
    }
    // An absent option needs no default; the API server would store a literal null.
    if m.get("default") == Some(&Value::Null) {
        m.remove("default");
    }
    if let Some(f) = m.get("format").and_then(Value::as_str)
        && !FORMATS.contains(&f)
    {
        m.remove("format");
    }
    // A nullable enum lists null among its values (schemars' AddNullable): the API server
    // wants the values only.
    if let Some(Value::Array(values)) = m.get_mut("enum") {
        values.retain(|x| !x.is_null());
    }
    for (_, child) in m.iter_mut() {
        match child {
            Value::Object(_) => structural(child),
            Value::Array(items) => items.iter_mut().for_each(structural),
            _ => {}
        }
    }
    // `properties` is a map of names to schemas, not a schema: its keys were walked above
    // as children, which is harmless (they hold no keywords of their own).
}

/// What keeps `schema` from being structural, by JSON path.
pub fn structural_problems(schema: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk(schema, "", &mut out);
    out
}

fn walk(v: &Value, path: &str, out: &mut Vec<String>) {
    let Value::Object(m) = v else { return };
    let at = if path.is_empty() { "." } else { path };
    if m.contains_key("$ref") {
        out.push(format!("{at}: $ref"));
    }
    let preserves = m.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
        || m.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    if !m.contains_key("type") && !preserves {
        out.push(format!("{at}: no type"));
    }
    if m.contains_key("properties") && m.contains_key("additionalProperties") {
        out.push(format!("{at}: additionalProperties beside properties"));
    }
    for k in ["oneOf", "anyOf", "allOf", "not"] {
        if m.contains_key(k) {
            out.push(format!("{at}: {k}"));
        }
    }
    if let Some(f) = m.get("format").and_then(Value::as_str)
        && !FORMATS.contains(&f)
    {
        out.push(format!("{at}: format {f}"));
    }
    if let Some(Value::Object(props)) = m.get("properties") {
        for (name, p) in props {
            walk(p, &format!("{path}.{name}"), out);
        }
    }
    if let Some(items) = m.get("items") {
        walk(items, &format!("{path}[]"), out);
    }
    if let Some(extra @ Value::Object(_)) = m.get("additionalProperties") {
        walk(extra, &format!("{path}{{}}"), out);
    }
}

/// The four kinds.
pub fn kinds() -> Vec<Kind> {
    vec![
        Kind {
            kind: "Namespace",
            plural: "namespaces",
            singular: "namespace",
            short: "lockns",
            spec: schema_of::<NamespaceSpec>(),
            columns: &[("Region", ".spec.region", "string")],
        },
        Kind {
            kind: "LockClass",
            plural: "lockclasses",
            singular: "lockclass",
            short: "lockclass",
            spec: schema_of::<LockClassSpec>(),
            columns: &[
                ("Namespace", ".spec.namespace", "string"),
                ("Enforcement", ".spec.enforcement", "string"),
                ("TTL", ".spec.ttlSeconds", "integer"),
                ("Tier", ".spec.tier", "string"),
            ],
        },
        Kind {
            kind: "LockGrant",
            plural: "lockgrants",
            singular: "lockgrant",
            short: "lockgrant",
            spec: schema_of::<LockGrantSpec>(),
            columns: &[("SPIFFE ID", ".spec.spiffeId", "string")],
        },
        Kind {
            kind: "PauseTestResult",
            plural: "pausetestresults",
            singular: "pausetestresult",
            short: "pausetest",
            spec: schema_of::<PauseTestResultSpec>(),
            columns: &[
                ("Class", ".spec.class", "string"),
                ("Expires", ".spec.expires", "string"),
            ],
        },
    ]
}

/// The whole object's schema: apiVersion, kind, metadata and the spec.
pub fn object_schema(k: &Kind) -> Value {
    json!({
        "type": "object",
        "description": format!("A registry {} (ADR-24): reviewed, validated by the lock-webhook admission webhook.", k.kind),
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": k.spec,
        },
    })
}

/// The CustomResourceDefinition of one kind.
pub fn crd(k: &Kind) -> Value {
    let columns: Vec<Value> = k
        .columns
        .iter()
        .map(|(name, path, ty)| json!({"name": name, "jsonPath": path, "type": ty}))
        .collect();
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{}.{GROUP}", k.plural)},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": k.kind,
                "listKind": format!("{}List", k.kind),
                "plural": k.plural,
                "singular": k.singular,
                "shortNames": [k.short],
                "categories": ["lock-registry"],
            },
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": object_schema(k)},
                "additionalPrinterColumns": columns,
            }],
        },
    })
}

pub fn crds() -> Vec<Value> {
    kinds().iter().map(crd).collect()
}

/// The CRDs as the committed files hold them: `deploy/kubernetes/crds/<plural>.lock.dev.yaml`.
pub fn files() -> Vec<(String, String)> {
    kinds()
        .iter()
        .map(|k| {
            let text = serde_yaml_ng::to_string(&crd(k)).unwrap_or_default();
            (
                format!("{}.{GROUP}.yaml", k.plural),
                format!(
                    "# Generated by `lockctl registry crds --out deploy/kubernetes/crds` from the\n# registry's document types (lock-config); do not edit.\n{text}"
                ),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    /// The CRD's bounds on ttlSeconds are the validator's (registry::TTL_RANGE): the API
    /// server refuses what the registry would, and the schema page says it.
    #[test]
    fn the_ttl_bounds_in_the_crd_are_the_validators() {
        let class = super::kinds()
            .into_iter()
            .find(|k| k.kind == "LockClass")
            .unwrap();
        let schema = super::object_schema(&class);
        let ttl = &schema["properties"]["spec"]["properties"]["ttlSeconds"];
        let range = lock_config::registry::TTL_RANGE;
        assert_eq!(
            ttl["minimum"].as_u64(),
            Some(u64::from(*range.start())),
            "{ttl}"
        );
        assert_eq!(
            ttl["maximum"].as_u64(),
            Some(u64::from(*range.end())),
            "{ttl}"
        );
    }

    use super::*;

    #[test]
    fn every_generated_schema_is_structural() {
        for k in kinds() {
            let problems = structural_problems(&object_schema(&k));
            assert!(problems.is_empty(), "{}: {problems:?}", k.kind);
        }
    }

    #[test]
    fn the_class_schema_carries_the_fields_and_their_enums() {
        let k = kinds().into_iter().find(|k| k.kind == "LockClass").unwrap();
        let props = &k.spec["properties"];
        assert_eq!(
            props["enforcement"]["enum"],
            json!(["fenced", "advisory"]),
            "{props}"
        );
        assert_eq!(props["onQuorumLoss"]["enum"], json!(["closed", "open"]));
        assert_eq!(props["ttlSeconds"]["type"], "integer");
        assert_eq!(props["ttlSeconds"]["nullable"], true);
        let required: Vec<&str> = k.spec["required"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        for f in ["namespace", "prefixes", "purpose", "enforcement"] {
            assert!(required.contains(&f), "{f} required: {required:?}");
        }
        assert!(!required.contains(&"ttlSeconds"));
    }

    #[test]
    fn structural_check_table() {
        let cases: Vec<(&str, Value, Vec<&str>)> = vec![
            (
                "fine",
                json!({"type": "object", "properties": {"a": {"type": "string"}}}),
                vec![],
            ),
            (
                "no type",
                json!({"properties": {"a": {"type": "string"}}}),
                vec![".: no type"],
            ),
            (
                "a $ref below",
                json!({"type": "object", "properties": {"a": {"$ref": "#/x"}}}),
                vec![".a: $ref", ".a: no type"],
            ),
            (
                "closed object",
                json!({"type": "object", "properties": {}, "additionalProperties": false}),
                vec![".: additionalProperties beside properties"],
            ),
            (
                "anyOf in an item",
                json!({"type": "array", "items": {"type": "string", "anyOf": []}}),
                vec!["[]: anyOf"],
            ),
            (
                "unknown format",
                json!({"type": "integer", "format": "uint32"}),
                vec![".: format uint32"],
            ),
            (
                "preserve unknown fields needs no type",
                json!({"x-kubernetes-preserve-unknown-fields": true}),
                vec![],
            ),
        ];
        for (name, schema, want) in cases {
            assert_eq!(structural_problems(&schema), want, "{name}");
        }
    }
}
