//! The tailer's Prometheus metrics, served at `/metrics` on its admin listener. One tailer
//! per process; the only labels are a hold's class and how it ended, both from fixed sets
//! (the registry's classes, the audit's kinds), never a key or an identity (ADR-22).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::LazyLock;

/// A hold's class and how it ended (`release`, `handoff`, `expiry`, `closed-with-session`,
/// `revoked-by-advance`, `force-release`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HoldEndLabel {
    pub class: String,
    pub kind: &'static str,
}

/// A class, alone (the longest hold's label).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabel {
    pub class: String,
}

pub struct Metrics {
    registry: Registry,
    /// The age of the oldest hold of each class now, by the elected tailer's scan
    /// (`longest.rs`); a class with no hold has no series.
    pub longest_hold: Family<ClassLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// Holds ended, by class and how: expiries (a holder that never released) per class
    /// reach the owning team's alerts. A failover's replay may count a row again.
    pub hold_ends: Family<HoldEndLabel, Counter>,
    /// Rows newly stored (a replayed row already present is not counted).
    pub rows: Counter,
    /// Gap rows written: revisions compacted before the tailer read them.
    pub gaps: Counter,
    /// Force releases executed (their `/sys/force/` records), as read: a failover may
    /// count one again (its replay from the checkpoint), never miss one.
    pub force_releases: Counter,
    /// 1 while this tailer holds the election.
    pub leader: Gauge,
    /// The revision up to which every row is stored.
    pub checkpoint: Gauge,
    /// etcd's head revision minus the checkpoint.
    pub lag: Gauge,
    /// 1 while the lag is past half the compaction window: act before a gap.
    pub compaction_risk: Gauge,
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("lock_audit");
        let m = Self {
            registry: Registry::default(),
            hold_ends: Family::default(),
            longest_hold: Family::default(),
            rows: Counter::default(),
            gaps: Counter::default(),
            force_releases: Counter::default(),
            leader: Gauge::default(),
            checkpoint: Gauge::default(),
            lag: Gauge::default(),
            compaction_risk: Gauge::default(),
        };
        registry.register("rows", "Audit rows stored", m.rows.clone());
        registry.register(
            "hold_ends",
            "Holds ended, by class and how (expiry: the holder never released)",
            m.hold_ends.clone(),
        );
        registry.register(
            "longest_hold_seconds",
            "Age of the oldest hold of each class (wall clock), from the elected tailer's scan",
            m.longest_hold.clone(),
        );
        registry.register(
            "gaps",
            "Gap rows: revisions compacted before they were read",
            m.gaps.clone(),
        );
        registry.register(
            "force_releases",
            "Force releases executed (two-person, ADR-20)",
            m.force_releases.clone(),
        );
        registry.register(
            "leader",
            "1 while this tailer holds the election",
            m.leader.clone(),
        );
        registry.register(
            "checkpoint_revision",
            "Revision up to which every row is stored",
            m.checkpoint.clone(),
        );
        registry.register(
            "lag_revisions",
            "etcd head revision minus the checkpoint",
            m.lag.clone(),
        );
        registry.register(
            "compaction_risk",
            "1 while the lag is past half the compaction window",
            m.compaction_risk.clone(),
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
