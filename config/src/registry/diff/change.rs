//! One change a registry push makes: what changed, whether it widens access or weakens a
//! guarantee (`risky`), the consensus cost it adds (`cost`), and the line a review reads.

use crate::registry::RateBudget;
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
