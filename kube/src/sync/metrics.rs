//! lock-registry-sync's Prometheus metrics, at `/metrics` on its admin listener. No label
//! carries an object's content: only the kind and the refusal's reason, from fixed sets.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::LazyLock;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

pub struct Metrics {
    registry: Registry,
    /// Sets written to the folder.
    pub writes: Counter,
    /// Sets refused (the folder kept the last good set), by reason: `invalid`, `empty`.
    pub refusals: Family<ReasonLabel, Counter>,
    /// 1 while the cluster's current set is refused: the folder is behind the cluster.
    pub refused: Gauge,
    /// The content version of the set in the folder, as the arbiters compute it
    /// (`lock_arbiter_registry_version` equals it once they have reloaded).
    pub version: Gauge,
    /// Objects held per kind.
    pub objects: Family<KindLabel, Gauge>,
    /// Watch errors (the watch retries with backoff), per kind.
    pub watch_errors: Family<KindLabel, Counter>,
    /// Reads or writes of the folder that failed (the folder keeps what it held).
    pub write_errors: Counter,
    /// 1 once every kind has been listed.
    pub synced: Gauge,
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("lock_registry_sync");
        let m = Self {
            registry: Registry::default(),
            writes: Counter::default(),
            refusals: Family::default(),
            refused: Gauge::default(),
            version: Gauge::default(),
            objects: Family::default(),
            watch_errors: Family::default(),
            write_errors: Counter::default(),
            synced: Gauge::default(),
        };
        registry.register(
            "writes",
            "Registry sets written to the folder",
            m.writes.clone(),
        );
        registry.register(
            "refusals",
            "Registry sets refused (the folder kept the last good set), by reason",
            m.refusals.clone(),
        );
        registry.register(
            "refused",
            "1 while the cluster's current set is refused",
            m.refused.clone(),
        );
        registry.register(
            "version",
            "Content version of the set in the folder (as lock_arbiter_registry_version)",
            m.version.clone(),
        );
        registry.register(
            "objects",
            "Registry objects held, per kind",
            m.objects.clone(),
        );
        registry.register(
            "watch_errors",
            "Watch errors per kind (retried with backoff)",
            m.watch_errors.clone(),
        );
        registry.register(
            "write_errors",
            "Failed reads or writes of the folder",
            m.write_errors.clone(),
        );
        registry.register(
            "synced",
            "1 once every kind has been listed",
            m.synced.clone(),
        );
        Self { registry, ..m }
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

pub static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);
