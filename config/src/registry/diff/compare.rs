//! The changes between two registries (or the live filter configuration and a new one),
//! grouped: grants, namespaces, classes. A class is compared field by field, as text.

use super::Change;
use crate::registry::{Enforcement, QuorumPosture, RateBudget, Registry, ResolvedClass};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

fn word<T: fmt::Debug>(v: T) -> String {
    let s = format!("{v:?}");
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => s,
    }
}

fn class_fields(c: &ResolvedClass<'_>) -> Vec<(&'static str, String)> {
    let mut prefixes = c.spec.prefixes.clone();
    prefixes.sort();
    vec![
        ("namespace", c.spec.namespace.clone()),
        ("prefixes", prefixes.join(",")),
        ("purpose", word(c.spec.purpose)),
        (
            "enforcement",
            match c.spec.enforcement {
                Enforcement::Fenced => "fenced".into(),
                Enforcement::Advisory => "advisory".into(),
            },
        ),
        ("ttlSeconds", c.ttl_seconds.to_string()),
        (
            "maxHoldSeconds",
            c.spec
                .max_hold_seconds
                .map_or_else(|| "none".to_owned(), |b| b.to_string()),
        ),
        (
            "onQuorumLoss",
            match c.spec.on_quorum_loss {
                QuorumPosture::Closed => "closed".into(),
                QuorumPosture::Open => "open".into(),
            },
        ),
        (
            "permits",
            c.spec
                .permits
                .map_or_else(|| "none".to_owned(), |n| n.to_string()),
        ),
        (
            "lockDelaySeconds",
            c.spec.lock_delay_seconds.unwrap_or(0).to_string(),
        ),
        ("fairness", word(c.spec.fairness)),
        ("shared", c.spec.shared.to_string()),
        ("tier", word(c.spec.tier)),
        // What the class's fence evidence is about (ADR-17): validation decides whether a
        // change still has its PauseTestResult; the diff shows that it changed.
        (
            "resource",
            c.spec.resource.clone().unwrap_or_else(|| "-".into()),
        ),
        (
            "schemaVersion",
            c.spec.schema_version.clone().unwrap_or_else(|| "-".into()),
        ),
    ]
}

/// Identity -> (prefixes, rate, validateRate).
type Grants = BTreeMap<String, (BTreeSet<String>, Option<RateBudget>, Option<RateBudget>)>;
/// A class's effective TTL and its fields as text.
type ClassFields = (u32, Vec<(&'static str, String)>);

fn grant_changes(before: &Grants, after: &Grants, out: &mut Vec<Change>) {
    let empty = (BTreeSet::new(), None, None);
    let ids: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    for id in ids {
        let (b, a) = (
            before.get(id).unwrap_or(&empty),
            after.get(id).unwrap_or(&empty),
        );
        for p in a.0.difference(&b.0) {
            out.push(Change::GrantAdded {
                identity: id.clone(),
                prefix: p.clone(),
            });
        }
        for p in b.0.difference(&a.0) {
            out.push(Change::GrantRemoved {
                identity: id.clone(),
                prefix: p.clone(),
            });
        }
        let both = !(a.0.is_empty() || b.0.is_empty());
        for (budget, from, to) in [("rate", b.1, a.1), ("validateRate", b.2, a.2)] {
            if from != to && both {
                out.push(Change::RateChanged {
                    identity: id.clone(),
                    budget,
                    from,
                    to,
                });
            }
        }
    }
}

fn namespace_changes(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
    out: &mut Vec<Change>,
) {
    for (name, region) in after {
        match before.get(name) {
            None => out.push(Change::NamespaceAdded {
                name: name.clone(),
                region: region.clone(),
            }),
            Some(from) if from != region => out.push(Change::NamespaceMoved {
                name: name.clone(),
                from: from.clone(),
                to: region.clone(),
            }),
            Some(_) => {}
        }
    }
    for (name, region) in before {
        if !after.contains_key(name) {
            out.push(Change::NamespaceRemoved {
                name: name.clone(),
                region: region.clone(),
            });
        }
    }
}

/// What a push changes at the edge: the grants and namespaces of the live filter
/// configuration against the new one (`lockctl grants push` prints it).
pub fn diff_filter(old: &crate::FilterConfig, new: &crate::FilterConfig) -> Vec<Change> {
    let grants = |c: &crate::FilterConfig| -> Grants {
        let mut m = Grants::new();
        for g in &c.grants {
            let e = m.entry(g.spiffe_id.clone()).or_default();
            e.0.extend(g.prefixes.iter().cloned());
            e.1 = e.1.or(g.rate);
            e.2 = e.2.or(g.validate_rate);
        }
        m
    };
    let mut out = Vec::new();
    grant_changes(&grants(old), &grants(new), &mut out);
    namespace_changes(&old.namespaces, &new.namespaces, &mut out);
    out
}

/// The changes from `old` to `new`, grouped: grants, namespaces, classes; each sorted.
pub fn diff(old: &Registry, new: &Registry) -> Vec<Change> {
    let mut out = Vec::new();
    let grants = |r: &Registry| -> Grants {
        r.grants()
            .map(|(id, g)| {
                (
                    id.to_string(),
                    (
                        g.prefixes.iter().map(|p| p.to_string()).collect(),
                        g.rate,
                        g.validate_rate,
                    ),
                )
            })
            .collect()
    };
    grant_changes(&grants(old), &grants(new), &mut out);
    let spaces = |r: &Registry| -> BTreeMap<String, String> {
        r.namespaces()
            .map(|(n, s)| (n.to_owned(), s.region.clone()))
            .collect()
    };
    namespace_changes(&spaces(old), &spaces(new), &mut out);
    let owner = |r: &Registry, name: &str| -> Option<String> {
        r.namespaces()
            .find(|(n, _)| *n == name)
            .map(|(_, s)| s.owner.clone().unwrap_or_default())
    };
    for (name, _) in new.namespaces() {
        if let (Some(from), Some(to)) = (owner(old, name), owner(new, name))
            && from != to
        {
            out.push(Change::NamespaceOwnerChanged {
                name: name.to_owned(),
                from,
                to,
            });
        }
    }
    let classes = |r: &Registry| -> BTreeMap<String, ClassFields> {
        r.classes()
            .map(|c| (c.name.to_owned(), (c.ttl_seconds, class_fields(&c))))
            .collect()
    };
    let (before, after) = (classes(old), classes(new));
    for (name, (ttl, fields)) in &after {
        let Some((old_ttl, old_fields)) = before.get(name) else {
            out.push(Change::ClassAdded {
                name: name.clone(),
                ttl_seconds: *ttl,
                durable: fields
                    .iter()
                    .any(|(f, v)| *f == "fairness" && v == "durable"),
            });
            continue;
        };
        for ((field, from), (_, to)) in old_fields.iter().zip(fields) {
            if from != to {
                out.push(Change::ClassChanged {
                    name: name.clone(),
                    field,
                    from: from.clone(),
                    to: to.clone(),
                    ttl: (*old_ttl, *ttl),
                });
            }
        }
    }
    for (name, (ttl, _)) in &before {
        if !after.contains_key(name) {
            out.push(Change::ClassRemoved {
                name: name.clone(),
                ttl_seconds: *ttl,
            });
        }
    }
    out
}
