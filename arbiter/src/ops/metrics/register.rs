//! Every family of [`Metrics`] created and registered under its exposition name and help
//! text (what dashboards and alerts read), with the histograms' buckets.

use super::{
    ClassInfoLabel, ClassLabel, Histograms, Metrics, OperationLabel, ReasonLabel, SettledLabel,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::sync::RwLock;

/// Latencies from 100 µs to about 26 s (18 buckets, ×2).
fn latency() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 18))
}

/// Waits from 1 ms to about 262 s (19 buckets, ×2): an Acquire may wait up to 300 s.
fn wait() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 19))
}

/// Queue lengths 1 to 1024 (11 buckets, ×2): a queue longer than that is a line, not a
/// lock, and counts in +Inf.
fn queue_lengths() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 11))
}

impl Metrics {
    pub(super) fn new() -> Self {
        let mut registry = Registry::with_prefix("lock_arbiter");
        let grants = Family::<ClassLabel, Counter>::default();
        let releases = Family::<ClassLabel, Counter>::default();
        let handoffs = Family::<ClassLabel, Counter>::default();
        let refusals = Family::<ReasonLabel, Counter>::default();
        let acquire_seconds = Histograms::<ClassLabel>::new_with_constructor(wait);
        let request_seconds = Histograms::<OperationLabel>::new_with_constructor(latency);
        let etcd_seconds = Histograms::<OperationLabel>::new_with_constructor(latency);
        let queue_depth = Gauge::default();
        let queue_length_on_join = Histograms::<ClassLabel>::new_with_constructor(queue_lengths);
        let class_hold_bound_seconds = Family::<ClassLabel, Gauge>::default();
        let sessions_kept = Gauge::default();
        let observe_streams = Gauge::default();
        let keepalives = Counter::default();
        let keepalive_failures = Counter::default();
        let batch_size = Histogram::new(exponential_buckets(1.0, 2.0, 9));
        let sealed = Gauge::default();
        let epoch = Gauge::default();
        let serving = Gauge::default();
        let registry_version = Gauge::default();
        let registry_refused_version = Gauge::default();
        let registry_reloads_refused = Counter::default();
        let settlements = Family::<SettledLabel, Counter>::default();
        let class_info = Family::<ClassInfoLabel, Gauge>::default();
        registry.register(
            "class_info",
            "1 per class served: its namespace, tier and owning team (join on class)",
            class_info.clone(),
        );
        registry.register("grants", "Grants returned, by class", grants.clone());
        registry.register(
            "releases",
            "Releases that ended a hold, by class",
            releases.clone(),
        );
        registry.register(
            "handoffs",
            "Releases that granted the queue's head in the same transaction, by class",
            handoffs.clone(),
        );
        registry.register("refusals", "Refusals answered, by reason", refusals.clone());
        registry.register(
            "acquire_seconds",
            "Granted Acquires' latency, waiting included, by class",
            acquire_seconds.clone(),
        );
        registry.register(
            "request_seconds",
            "lock.v1 calls' latency by operation and outcome",
            request_seconds.clone(),
        );
        registry.register(
            "etcd_request_seconds",
            "etcd calls' latency by operation and outcome",
            etcd_seconds.clone(),
        );
        registry.register(
            "queue_depth",
            "Waiters queued at this arbiter",
            queue_depth.clone(),
        );
        registry.register(
            "queue_length_on_join",
            "The key's queue length as a waiter joined it (itself included), by class",
            queue_length_on_join.clone(),
        );
        registry.register(
            "class_hold_bound_seconds",
            "Each class's maxHoldSeconds, where it declares one (LockHeldOverBound)",
            class_hold_bound_seconds.clone(),
        );
        registry.register(
            "sessions_kept",
            "Sessions renewed through this arbiter's KeepAlive streams",
            sessions_kept.clone(),
        );
        registry.register(
            "observe_streams",
            "Observe streams this arbiter serves",
            observe_streams.clone(),
        );
        registry.register(
            "keepalives",
            "Session renewals answered",
            keepalives.clone(),
        );
        registry.register(
            "keepalive_failures",
            "Session renewals refused (expired or not the caller's)",
            keepalive_failures.clone(),
        );
        registry.register(
            "batch_size",
            "Transactions per group commit",
            batch_size.clone(),
        );
        registry.register("sealed", "1 while the store is sealed", sealed.clone());
        registry.register("epoch", "The epoch in the epoch record", epoch.clone());
        registry.register(
            "serving",
            "1 while the health service reports SERVING",
            serving.clone(),
        );
        registry.register(
            "registry_version",
            "The version of the registry served (48-bit content hash)",
            registry_version.clone(),
        );
        registry.register(
            "registry_refused_version",
            "The version of the registry a reload refused (0: none)",
            registry_refused_version.clone(),
        );
        registry.register(
            "registry_reloads_refused",
            "Registry reloads refused as invalid",
            registry_reloads_refused.clone(),
        );
        registry.register(
            "grant_settlements",
            "Grant attempts whose answer was lost, by how they were settled (committed, not_committed, session_gone, in_doubt)",
            settlements.clone(),
        );
        Self {
            registry,
            grants,
            releases,
            handoffs,
            refusals,
            acquire_seconds,
            request_seconds,
            etcd_seconds,
            queue_depth,
            queue_length_on_join,
            class_hold_bound_seconds,
            sessions_kept,
            observe_streams,
            keepalives,
            keepalive_failures,
            batch_size,
            sealed,
            epoch,
            serving,
            registry_version,
            registry_refused_version,
            registry_reloads_refused,
            settlements,
            class_info,
            classes: RwLock::new(HashMap::new()),
        }
    }
}
