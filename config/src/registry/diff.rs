//! What a registry change does (ADR-24, 11): identities gaining and losing prefixes,
//! namespaces moving region, classes appearing, going, or changing what their keys
//! guarantee. Pure: two validated registries in, a list of changes out, each marked when it
//! weakens a guarantee or widens access, so a review (or CI) can stop on those.

use super::{Enforcement, QuorumPosture, RateBudget, Registry, ResolvedClass};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    GrantAdded {
        identity: String,
        prefix: String,
    },
    GrantRemoved {
        identity: String,
        prefix: String,
    },
    RateChanged {
        identity: String,
        /// `rate`, or `validateRate` (ValidateToken's own budget).
        budget: &'static str,
        from: Option<RateBudget>,
        to: Option<RateBudget>,
    },
    NamespaceAdded {
        name: String,
        region: String,
    },
    NamespaceRemoved {
        name: String,
        region: String,
    },
    NamespaceMoved {
        name: String,
        from: String,
        to: String,
    },
    /// The team paged for a namespace's alerts (`owner`; "" for none).
    NamespaceOwnerChanged {
        name: String,
        from: String,
        to: String,
    },
    ClassAdded {
        name: String,
        ttl_seconds: u32,
        /// `fairness: durable` (ADR-14): its waiters cost consensus writes (`Change::cost`).
        durable: bool,
    },
    ClassRemoved {
        name: String,
        ttl_seconds: u32,
    },
    /// One field of a class, shown as text (`enforcement`, `onQuorumLoss`, `ttlSeconds`,
    /// `tier`, `fairness`, `purpose`, `namespace`, `prefixes`).
    ClassChanged {
        name: String,
        field: &'static str,
        from: String,
        to: String,
        /// The class's effective TTL before and after (its renewal cost and liveness bound).
        ttl: (u32, u32),
    },
}

impl Change {
    /// Whether the change widens who may lock what, or weakens what a class guarantees: a
    /// new prefix for an identity, fenced to advisory, closed to open on quorum loss, a
    /// correctness class turned efficiency, a shorter TTL (more false expiries), a
    /// namespace moved (its keys' tokens come from another region's store).
    pub fn risky(&self) -> bool {
        match self {
            Change::GrantAdded { .. } | Change::NamespaceMoved { .. } => true,
            Change::ClassChanged {
                field, from, to, ..
            } => match *field {
                "enforcement" => from == "fenced" && to == "advisory",
                "onQuorumLoss" => from == "closed" && to == "open",
                "purpose" => from == "correctness" && to == "efficiency",
                "ttlSeconds" => to.parse::<u32>().ok() < from.parse::<u32>().ok(),
                "prefixes" | "namespace" => true,
                _ => false,
            },
            _ => false,
        }
    }

    /// The consensus cost a change adds or takes away, beyond the grant's own writes, as a
    /// line for the reviewer: durable fairness (ADR-14) writes each waiter's queue entry to
    /// etcd and deletes it on grant or give-up, two writes per waiter. Shown for a class
    /// added durable, and for one changed memory -> durable or back.
    pub fn cost(&self) -> Option<String> {
        const MORE: &str =
            "+2 etcd writes per waiter (durable fairness: the queue entry written and deleted)";
        const LESS: &str =
            "-2 etcd writes per waiter (memory fairness: no queue entry written and deleted)";
        match self {
            Change::ClassAdded {
                name,
                durable: true,
                ..
            } => Some(format!("{name}: {MORE}")),
            Change::ClassChanged {
                name,
                field: "fairness",
                from,
                to,
                ..
            } => match (from.as_str(), to.as_str()) {
                ("memory", "durable") => Some(format!("{name}: {MORE}")),
                ("durable", "memory") => Some(format!("{name}: {LESS}")),
                _ => None,
            },
            _ => None,
        }
    }
}

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

/// Keepalives per second for `sessions` sessions of a class with `ttl` (one every TTL/3,
/// ADR-10, 11).
pub fn keepalives_per_second(sessions: u64, ttl: u32) -> f64 {
    sessions as f64 * 3.0 / f64::from(ttl.max(1))
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rate = |r: &Option<RateBudget>| match r {
            Some(r) => format!("{}/s burst {}", r.per_second, r.burst),
            None => "default".into(),
        };
        match self {
            Change::GrantAdded { identity, prefix } => {
                write!(f, "+ grant     {identity} may lock {prefix}")
            }
            Change::GrantRemoved { identity, prefix } => {
                write!(f, "- grant     {identity} may no longer lock {prefix}")
            }
            Change::RateChanged {
                identity,
                budget: "rate",
                from,
                to,
            } => write!(f, "~ rate      {identity}: {} -> {}", rate(from), rate(to)),
            Change::RateChanged {
                identity,
                budget,
                from,
                to,
            } => write!(
                f,
                "~ rate      {identity} ({budget}): {} -> {}",
                rate(from),
                rate(to)
            ),
            Change::NamespaceAdded { name, region } => write!(f, "+ namespace {name} in {region}"),
            Change::NamespaceRemoved { name, region } => {
                write!(f, "- namespace {name} (was in {region})")
            }
            Change::NamespaceMoved { name, from, to } => {
                write!(f, "~ namespace {name}: region {from} -> {to}")
            }
            Change::NamespaceOwnerChanged { name, from, to } => {
                let shown = |o: &str| {
                    if o.is_empty() {
                        "(none)".to_owned()
                    } else {
                        o.to_owned()
                    }
                };
                write!(
                    f,
                    "~ namespace {name}: owner {} -> {}",
                    shown(from),
                    shown(to)
                )
            }
            Change::ClassAdded {
                name, ttl_seconds, ..
            } => {
                write!(f, "+ class     {name} (ttl {ttl_seconds}s)")
            }
            Change::ClassRemoved { name, ttl_seconds } => {
                write!(f, "- class     {name} (was ttl {ttl_seconds}s)")
            }
            Change::ClassChanged {
                name,
                field,
                from,
                to,
                ..
            } => {
                write!(f, "~ class     {name}: {field} {from} -> {to}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{Date, Source};

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
}
