//! Which set to write (pure): the objects of the four kinds as the reflectors hold them, in,
//! one of [`Decision`] out. No I/O here; `run.rs` supplies the view, the folder's current
//! text and the date, and carries the decision out.
//!
//! The set is judged by the registry's one validation (`Registry::load`), on the text that
//! would be written — so what the folder receives is exactly what was judged, and the
//! arbiters, `grants push` and the webhook judge the same bytes again the same way.

use crate::admission::KINDS;
use lock_config::registry::{API_VERSION, Date, Registry, RegistryError, Source};
use serde_json::{Value, json};

/// The folder's one file (the arbiters read every `*.yaml` in it, sorted).
pub const FILE: &str = "registry.yaml";

/// One object of a registry kind as the API server holds it. Its kind comes from the watch
/// it arrived on (list items carry no `kind`), its `spec` as stored (pruned to the CRD's
/// schema); every other field — server metadata, `status` — is not the registry's.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    pub kind: String,
    pub name: String,
    pub spec: Option<Value>,
}

/// What the reflectors hold now.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    /// The namespace watched (named in the file's header).
    pub namespace: String,
    /// Every kind has been listed once: before that the view is partial, and a partial set
    /// (classes without their namespaces, no grants yet) must never replace a whole one.
    pub synced: bool,
    pub objects: Vec<Object>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Not every kind listed yet: nothing to judge.
    Wait,
    /// The folder already holds this set.
    Unchanged,
    /// A valid set that differs from the folder's: write this text as [`FILE`].
    Write(String),
    /// Keep the folder as it is (the last good set), for this reason.
    Refuse(Refusal),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No object of any kind: an arbiter refuses an empty registry at start, and in a
    /// running cluster it is far likelier a wrong `--namespace` or RBAC than an intent.
    Empty,
    /// The registry's validation refused the set: each problem as `Kind/name: field: problem`.
    Invalid(Vec<String>),
}

impl Refusal {
    /// The metric's and the log's `reason` label.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Empty => "empty",
            Refusal::Invalid(_) => "invalid",
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Empty => write!(f, "no registry objects in the namespace"),
            Refusal::Invalid(problems) => {
                write!(f, "{} problem(s): {}", problems.len(), problems.join("; "))
            }
        }
    }
}

/// The folder's text for `view`: a header, then one document per object, ordered by kind
/// (as [`KINDS`]) and name, so the same set always gives the same bytes (the arbiters'
/// content version changes only when the set does).
pub fn render(view: &View) -> String {
    let mut objects: Vec<&Object> = view.objects.iter().collect();
    let rank = |k: &str| KINDS.iter().position(|x| *x == k).unwrap_or(KINDS.len());
    objects.sort_by(|a, b| {
        (rank(&a.kind), a.kind.as_str(), a.name.as_str()).cmp(&(
            rank(&b.kind),
            b.kind.as_str(),
            b.name.as_str(),
        ))
    });
    let mut out = format!(
        "# Written by lock-registry-sync from the lock.dev resources in namespace {}.\n\
         # Do not edit: the next change in the cluster replaces this file.\n",
        view.namespace
    );
    for o in objects {
        let mut doc = json!({
            "apiVersion": API_VERSION,
            "kind": o.kind,
            "metadata": {"name": o.name},
        });
        if let Some(spec) = &o.spec {
            doc["spec"] = spec.clone();
        }
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(&doc).unwrap_or_default());
    }
    out
}

/// Decides what to do with `view`, the folder holding `on_disk` (None: no file yet), on
/// `today` (pause-test results and waivers expire).
pub fn decide(view: &View, on_disk: Option<&str>, today: Date) -> Decision {
    if !view.synced {
        return Decision::Wait;
    }
    if view.objects.is_empty() {
        return Decision::Refuse(Refusal::Empty);
    }
    let text = render(view);
    let source = Source {
        name: format!("namespace {}", view.namespace),
        text: text.clone(),
    };
    if let Err(errors) = Registry::load(&[source], today) {
        let problems = errors
            .0
            .into_iter()
            .map(
                |RegistryError {
                     document,
                     field,
                     problem,
                     ..
                 }| format!("{document}: {field}: {problem}"),
            )
            .collect();
        return Decision::Refuse(Refusal::Invalid(problems));
    }
    if on_disk == Some(text.as_str()) {
        Decision::Unchanged
    } else {
        Decision::Write(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(kind: &str, name: &str, spec: Value) -> Object {
        Object {
            kind: kind.into(),
            name: name.into(),
            spec: Some(spec),
        }
    }

    fn pay() -> Object {
        obj("Namespace", "pay", json!({"region": "local"}))
    }

    fn ledger() -> Object {
        obj(
            "LockClass",
            "pay-ledger",
            json!({"namespace": "pay", "prefixes": ["pay/ledger"], "purpose": "efficiency", "tier": "entity",
                   "enforcement": "advisory", "ttlSeconds": 30}),
        )
    }

    fn grant(name: &str, prefix: &str) -> Object {
        obj(
            "LockGrant",
            name,
            json!({"spiffeId": format!("spiffe://dev.lock.local/ns/pay/sa/{name}"),
                   "prefixes": [prefix]}),
        )
    }

    fn view(synced: bool, objects: Vec<Object>) -> View {
        View {
            namespace: "lock-registry".into(),
            synced,
            objects,
        }
    }

    #[derive(Debug)]
    enum Want {
        Wait,
        Unchanged,
        Write,
        Empty,
        /// Refused as invalid, a problem naming this.
        Invalid(&'static str),
    }

    #[test]
    fn decision_table() {
        let today = Date::parse("2026-12-07").unwrap();
        let good = vec![pay(), ledger(), grant("ledger", "pay/ledger")];
        let good_text = render(&view(true, good.clone()));
        let cases: Vec<(&str, View, Option<&str>, Want)> = vec![
            (
                "a kind not listed yet: a partial view is never judged",
                view(false, good.clone()),
                None,
                Want::Wait,
            ),
            (
                "not synced, even with the folder empty",
                view(false, vec![]),
                None,
                Want::Wait,
            ),
            (
                "a valid set, no file yet",
                view(true, good.clone()),
                None,
                Want::Write,
            ),
            (
                "a valid set the folder already holds",
                view(true, good.clone()),
                Some(&good_text),
                Want::Unchanged,
            ),
            (
                "a grant added",
                view(
                    true,
                    [good.clone(), vec![grant("batch", "pay/batch")]].concat(),
                ),
                Some(&good_text),
                Want::Write,
            ),
            (
                "a grant deleted",
                view(true, vec![pay(), ledger()]),
                Some(&good_text),
                Want::Write,
            ),
            (
                "no objects at all (wrong namespace? RBAC?)",
                view(true, vec![]),
                Some(&good_text),
                Want::Empty,
            ),
            (
                "a grant outside every namespace",
                view(true, [good.clone(), vec![grant("x", "nowhere/x")]].concat()),
                Some(&good_text),
                Want::Invalid("nowhere"),
            ),
            (
                "a class whose namespace was deleted",
                view(true, vec![ledger()]),
                Some(&good_text),
                Want::Invalid("pay"),
            ),
            (
                "a TTL the validation refuses",
                view(
                    true,
                    vec![
                        pay(),
                        obj(
                            "LockClass",
                            "pay-ledger",
                            json!({"namespace": "pay", "prefixes": ["pay/ledger"],
                                   "purpose": "efficiency", "tier": "entity", "enforcement": "advisory",
                                   "ttlSeconds": 3}),
                        ),
                    ],
                ),
                Some(&good_text),
                Want::Invalid("5..=300"),
            ),
            (
                "a fenced class without a pause-test result",
                view(
                    true,
                    vec![
                        pay(),
                        obj(
                            "LockClass",
                            "pay-jobs",
                            json!({"namespace": "pay", "prefixes": ["pay/jobs"],
                                   "purpose": "correctness", "tier": "entity", "enforcement": "fenced",
                                   "resource": "pg/jobs", "schemaVersion": "1"}),
                        ),
                    ],
                ),
                None,
                Want::Invalid("PauseTestResult"),
            ),
            (
                "an object without a spec",
                view(
                    true,
                    vec![
                        pay(),
                        Object {
                            kind: "LockGrant".into(),
                            name: "bare".into(),
                            spec: None,
                        },
                    ],
                ),
                None,
                Want::Invalid("LockGrant/bare"),
            ),
        ];
        for (name, v, on_disk, want) in cases {
            let got = decide(&v, on_disk, today);
            let ok = match (&want, &got) {
                (Want::Wait, Decision::Wait)
                | (Want::Unchanged, Decision::Unchanged)
                | (Want::Write, Decision::Write(_))
                | (Want::Empty, Decision::Refuse(Refusal::Empty)) => true,
                (Want::Invalid(needle), Decision::Refuse(Refusal::Invalid(problems))) => {
                    problems.iter().any(|p| p.contains(needle))
                }
                _ => false,
            };
            assert!(ok, "{name}: want {want:?}, got {got:?}");
        }
    }

    #[test]
    fn the_written_text_is_what_the_arbiters_load() {
        let today = Date::parse("2026-12-07").unwrap();
        let v = view(true, vec![grant("ledger", "pay/ledger"), ledger(), pay()]);
        let Decision::Write(text) = decide(&v, None, today) else {
            panic!("a valid set is written");
        };
        let reg = Registry::load(
            &[Source {
                name: FILE.into(),
                text: text.clone(),
            }],
            today,
        )
        .unwrap();
        assert_eq!(reg.grants().count(), 1);
        assert_eq!(reg.classes().count(), 1);
        // Order-independent: the same set in another order gives the same bytes.
        let mut shuffled = v.clone();
        shuffled.objects.reverse();
        assert_eq!(render(&shuffled), text);
        // Kinds in the registry's order, then names.
        let kinds: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("kind: "))
            .collect();
        assert_eq!(kinds, ["Namespace", "LockClass", "LockGrant"]);
    }
}
