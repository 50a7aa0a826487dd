//! The arbiter's Prometheus metrics (`prometheus-client`), served on its admin listener at
//! `/metrics` (`admin.rs`).
//!
//! Labels are the lock class, the refusal reason and the operation (with its outcome) only:
//! all three come from fixed sets (the registry's classes, the contract's reasons, the code's
//! operations), so the number of series does not grow with traffic. A class's namespace,
//! tier and owning team are one info series per class (`class_info`), joined in queries
//! (`* on (class) group_left (namespace, tier, owner)`): every other series keeps its
//! cardinality, and alerts carry the owner Alertmanager routes on. Never a key, an
//! identity, a session or a token (ADR-22): a key in a label would be both a leak and a
//! cardinality bomb.

use lock_config::Reason;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::sync::{LazyLock, RwLock};
use std::time::Duration;

mod register;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabel {
    pub class: String,
}

/// A class as the registry places it: all four from the registry, never from traffic.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassInfoLabel {
    pub class: String,
    pub namespace: String,
    pub tier: &'static str,
    /// The namespace's `owner`, "" when it names none.
    pub owner: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

/// The outcomes of [`Metrics::settled`].
pub const SETTLED_OUTCOMES: [&str; 4] = ["committed", "not_committed", "session_gone", "in_doubt"];

/// How a grant attempt whose answer was lost was settled (`grant/settle.rs`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SettledLabel {
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabel {
    pub operation: &'static str,
    pub outcome: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

pub struct Metrics {
    registry: Registry,
    /// Grants returned to callers, by class.
    pub grants: Family<ClassLabel, Counter>,
    /// Releases that ended a hold, by class.
    pub releases: Family<ClassLabel, Counter>,
    /// Releases that handed the key to the head of its queue in the same transaction.
    pub handoffs: Family<ClassLabel, Counter>,
    /// Refusals the arbiter answered, by the contract's reason.
    pub refusals: Family<ReasonLabel, Counter>,
    /// How long a granted Acquire took, waiting included, by class.
    pub acquire_seconds: Histograms<ClassLabel>,
    /// Each lock.v1 call's latency by operation and outcome (`ok` or the reason).
    pub request_seconds: Histograms<OperationLabel>,
    /// Each etcd call's latency by operation (`txn`, `get`, `range`, `lease_grant`,
    /// `lease_revoke`) and outcome (`ok`, `error`).
    pub etcd_seconds: Histograms<OperationLabel>,
    /// Waiters queued at this arbiter now (memory and durable classes).
    pub queue_depth: Gauge,
    /// The length of the key's queue as a waiter joined it, itself included, by class:
    /// its quantiles are the queue depth a caller of the class meets (issue 36).
    pub queue_length_on_join: Histograms<ClassLabel>,
    /// Each class's `maxHoldSeconds`, for the classes that declare one: what
    /// `LockHeldOverBound` holds the audit's oldest hold against.
    pub class_hold_bound_seconds: Family<ClassLabel, Gauge>,
    /// Sessions renewed through this arbiter's KeepAlive streams now.
    pub sessions_kept: Gauge,
    /// Observe streams served now (against `--max-observers`).
    pub observe_streams: Gauge,
    /// Session renewals answered.
    pub keepalives: Counter,
    /// Keepalive renewals refused (the session had expired or was not the caller's).
    pub keepalive_failures: Counter,
    /// Transactions per group commit (batch.rs).
    pub batch_size: Histogram,
    /// 1 while the store is sealed (no epoch record, or another cluster's).
    pub sealed: Gauge,
    /// The epoch this arbiter last saw in the epoch record.
    pub epoch: Gauge,
    /// 1 while the health service reports SERVING.
    pub serving: Gauge,
    /// The version of the registry this arbiter serves (`lock_config::registry::
    /// sources_version`, 48 bits): `lockctl registry status` compares it with the folder's.
    pub registry_version: Gauge,
    /// The version of the last registry a reload refused (0: none since the last good one).
    pub registry_refused_version: Gauge,
    /// Reloads refused because the new registry was invalid.
    pub registry_reloads_refused: Counter,
    /// Grant attempts whose answer was lost, by how they were settled: `committed` (the
    /// holder was this session's), `not_committed` (fenced before it could), `session_gone`,
    /// `in_doubt` (no settlement could be made: answered NO_QUORUM, may still commit).
    pub settlements: Family<SettledLabel, Counter>,
    /// 1 per class of the registry served, labelled with its namespace, tier and owner.
    pub class_info: Family<ClassInfoLabel, Gauge>,
    /// Each class's handles into the families above, found by name without building a
    /// label (an allocation) on the grant path.
    classes: RwLock<HashMap<String, ClassMetrics>>,
}

/// One class's series (handles into `Metrics`' families).
#[derive(Clone)]
pub struct ClassMetrics {
    pub grants: Counter,
    pub releases: Counter,
    pub handoffs: Counter,
    pub acquire_seconds: Histogram,
    pub queue_length_on_join: Histogram,
}

pub static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

impl Metrics {
    /// The exposition text (OpenMetrics, which Prometheus scrapes).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Creates every series this arbiter can have, at zero: one per class of the registry
    /// and per reason. Dashboards then show 0 rather than "no data", `rate()` works from
    /// the first scrape, and the series set is fixed from the start.
    pub fn declare<'a>(&self, classes: impl Iterator<Item = &'a str>) {
        for class in classes {
            self.insert_class(class);
        }
        for reason in Reason::all() {
            let _ = self.refusals.get_or_create(&ReasonLabel {
                reason: reason.as_str(),
            });
        }
        for outcome in SETTLED_OUTCOMES {
            let _ = self.settlements.get_or_create(&SettledLabel { outcome });
        }
    }

    fn insert_class(&self, class: &str) -> ClassMetrics {
        let label = self.class(class);
        let m = ClassMetrics {
            grants: self.grants.get_or_create(&label).clone(),
            releases: self.releases.get_or_create(&label).clone(),
            handoffs: self.handoffs.get_or_create(&label).clone(),
            acquire_seconds: self.acquire_seconds.get_or_create(&label).clone(),
            queue_length_on_join: self.queue_length_on_join.get_or_create(&label).clone(),
        };
        if let Ok(mut map) = self.classes.write() {
            map.insert(class.to_owned(), m.clone());
        }
        m
    }

    /// The registry's classes as `class_info` series, replacing the last registry's (a
    /// reload that drops a class drops its info series; its counters stay, as counters do).
    pub fn describe(&self, registry: &lock_config::registry::Registry) {
        let owners: HashMap<&str, &str> = registry
            .namespaces()
            .map(|(name, spec)| (name, spec.owner.as_deref().unwrap_or("")))
            .collect();
        self.class_info.clear();
        self.class_hold_bound_seconds.clear();
        for c in registry.classes() {
            if let Some(bound) = c.spec.max_hold_seconds {
                self.class_hold_bound_seconds
                    .get_or_create(&self.class(c.name))
                    .set(i64::from(bound));
            }
            let label = ClassInfoLabel {
                class: c.name.to_owned(),
                namespace: c.spec.namespace.clone(),
                tier: match c.spec.tier {
                    lock_config::registry::Tier::Coord => "coord",
                    lock_config::registry::Tier::Entity => "entity",
                },
                owner: owners
                    .get(c.spec.namespace.as_str())
                    .copied()
                    .unwrap_or("")
                    .to_owned(),
            };
            self.class_info.get_or_create(&label).set(1);
        }
    }

    /// Runs `f` on `class`'s series (declared at start; a class first seen later is added).
    pub fn with_class(&self, class: &str, f: impl FnOnce(&ClassMetrics)) {
        if let Ok(map) = self.classes.read()
            && let Some(m) = map.get(class)
        {
            f(m);
            return;
        }
        f(&self.insert_class(class));
    }

    pub fn class(&self, class: &str) -> ClassLabel {
        ClassLabel {
            class: class.to_owned(),
        }
    }

    /// A lost grant answer settled (or not): `outcome` as [`Metrics::settlements`] names.
    pub fn settled(&self, outcome: &'static str) {
        self.settlements
            .get_or_create(&SettledLabel { outcome })
            .inc();
    }

    pub fn refused(&self, reason: Reason) {
        self.refusals
            .get_or_create(&ReasonLabel {
                reason: reason.as_str(),
            })
            .inc();
    }

    pub fn request(&self, operation: &'static str, outcome: Result<(), Reason>, took: Duration) {
        let outcome = match outcome {
            Ok(()) => "ok",
            Err(r) => r.as_str(),
        };
        self.request_seconds
            .get_or_create(&OperationLabel { operation, outcome })
            .observe(took.as_secs_f64());
    }

    pub fn etcd(&self, operation: &'static str, ok: bool, took: Duration) {
        let outcome = if ok { "ok" } else { "error" };
        self.etcd_seconds
            .get_or_create(&OperationLabel { operation, outcome })
            .observe(took.as_secs_f64());
    }
}

/// Adds one to a gauge for as long as it lives (a queued waiter, a kept session).
pub struct GaugeGuard(&'static Gauge);

impl GaugeGuard {
    pub fn new(gauge: &'static Gauge) -> Self {
        gauge.inc();
        Self(gauge)
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests;
