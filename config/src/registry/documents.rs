//! Document shapes. Unknown fields are errors: a misspelt safety field must not silently
//! fall back to a default.

use serde::{Deserialize, Serialize};

pub const API_VERSION: &str = "lock.dev/v1alpha1";

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Metadata {
    pub name: String,
}

/// One parsed document, tagged by `kind`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(tag = "kind", deny_unknown_fields)]
pub enum Document {
    Namespace {
        #[serde(rename = "apiVersion")]
        api_version: String,
        metadata: Metadata,
        spec: NamespaceSpec,
    },
    LockClass {
        #[serde(rename = "apiVersion")]
        api_version: String,
        metadata: Metadata,
        spec: LockClassSpec,
    },
    LockGrant {
        #[serde(rename = "apiVersion")]
        api_version: String,
        metadata: Metadata,
        spec: LockGrantSpec,
    },
    PauseTestResult {
        #[serde(rename = "apiVersion")]
        api_version: String,
        metadata: Metadata,
        spec: PauseTestResultSpec,
    },
}

impl Document {
    pub fn kind(&self) -> &'static str {
        match self {
            Document::Namespace { .. } => "Namespace",
            Document::LockClass { .. } => "LockClass",
            Document::LockGrant { .. } => "LockGrant",
            Document::PauseTestResult { .. } => "PauseTestResult",
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Document::Namespace { metadata, .. }
            | Document::LockClass { metadata, .. }
            | Document::LockGrant { metadata, .. }
            | Document::PauseTestResult { metadata, .. } => &metadata.name,
        }
    }

    pub fn api_version(&self) -> &str {
        match self {
            Document::Namespace { api_version, .. }
            | Document::LockClass { api_version, .. }
            | Document::LockGrant { api_version, .. }
            | Document::PauseTestResult { api_version, .. } => api_version,
        }
    }
}

/// A tenant namespace and the region it is homed in (ADR-08).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NamespaceSpec {
    pub region: String,
    /// The team paged for this namespace's classes (ADR-22): the `owner` label alerts carry
    /// and Alertmanager routes on (`lock_arbiter_class_info`). A label value: lower-case
    /// letters, digits and `-`, at most 63.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// Whether `owner` can be a label value routed on: a DNS-label-like name.
pub fn valid_owner(owner: &str) -> bool {
    !owner.is_empty()
        && owner.len() <= 63
        && !owner.starts_with('-')
        && !owner.ends_with('-')
        && owner
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum Purpose {
    Correctness,
    Efficiency,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum Enforcement {
    Fenced,
    Advisory,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum QuorumPosture {
    #[default]
    Closed,
    Open,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum Fairness {
    #[default]
    Memory,
    Durable,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum Tier {
    Coord,
    #[default]
    Entity,
}

/// A lock class (ADR-01, 04, 07, 11, 14): what the keys under its prefixes are for and how
/// they behave. A key's class is the longest matching class prefix.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LockClassSpec {
    pub namespace: String,
    pub prefixes: Vec<String>,
    pub purpose: Purpose,
    pub enforcement: Enforcement,
    #[serde(default)]
    pub risk_owner: Option<String>,
    /// `YYYY-MM-DD`.
    #[serde(default)]
    pub waiver_expires: Option<String>,
    /// The session TTL in seconds: 5..=300 (registry::TTL_RANGE), 15 when unset, at least
    /// 30 for an advisory correctness class.
    #[serde(default)]
    #[cfg_attr(feature = "schema", schemars(range(min = 5, max = 300)))]
    pub ttl_seconds: Option<u32>,
    /// The longest a hold of this class is expected to last: a hold older than
    /// this is flagged `held-long` by the explorer and raises `LockHeldOverBound`. Unset:
    /// no bound (an election's leader may hold for days), only the six-hour `LockHeldLong`.
    /// At least the class's TTL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_hold_seconds: Option<u32>,
    /// Lock-delay (Chubby's, Consul's): after a hold of this class ends without a release
    /// (its session expired or was closed holding it, a force release, an epoch advance),
    /// the key is not granted again for this many seconds, so a paused or late holder has
    /// time to die or have its in-flight writes land first. Advisory classes only, `0` to
    /// the class's TTL; unset or 0: none. A mitigation, not exclusion: see the class page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_delay_seconds: Option<u32>,
    /// The resource this class's tokens are checked by, as its PauseTestResult names it
    /// (e.g. `postgres://ledger-db/ledger`). Required for a fenced class (ADR-01, 17):
    /// fenced means this resource.
    #[serde(default)]
    pub resource: Option<String>,
    /// That resource's schema-version label, as its PauseTestResult names it. Required for
    /// a fenced class: a result counts only for the version it ran against, so a changed
    /// write path (a new version) needs a new pause test.
    #[serde(default)]
    pub schema_version: Option<String>,
    /// `closed` (the default): no grant and no renewal while etcd has no quorum. `open`
    /// (ADR-04, efficiency classes only) is not built and is refused by validation.
    #[serde(default)]
    pub on_quorum_loss: QuorumPosture,
    #[serde(default)]
    pub fairness: Fairness,
    /// Reader–writer holds: keys of this class may be held `SHARED` by many
    /// sessions at once, or `EXCLUSIVE` by one, excluding every shared hold. A queued
    /// exclusive waiter stops new shared grants, so writers are not starved. Needs
    /// `fairness: memory`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared: bool,
    /// A semaphore: up to this many sessions hold a key of the class at once, each on its
    /// own numbered permit with its own token (`HOLD_MODE_PERMIT`). 2..=64
    /// (registry::MAX_PERMITS); unset: an exclusive lock. Needs `fairness: memory`, not
    /// `shared`, no `lockDelaySeconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 2, max = 64)))]
    pub permits: Option<u32>,
    /// Required (ADR-07: routing is decided once, by the owner, in review): `coord` for
    /// the few long-held, highly available locks such as leader election; `entity` for the
    /// many short, high-churn locks on business entities (sharded clusters).
    pub tier: Tier,
}

/// Per-identity rate budget at the edge (token bucket).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RateBudget {
    pub per_second: u32,
    pub burst: u32,
}

impl RateBudget {
    /// The one rule for a budget (the registry and the filter config both check it): a
    /// zero rate or burst would refuse every request, which is never what was meant.
    pub fn is_valid(&self) -> bool {
        self.per_second > 0 && self.burst > 0
    }

    pub const RULE: &'static str = "perSecond and burst must be > 0";
}

/// Which key prefixes one SPIFFE ID (exact match) may lock (ADR-19).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LockGrantSpec {
    pub spiffe_id: String,
    pub prefixes: Vec<String>,
    /// Budget for this identity's keyed calls (OpenSession, Acquire, Release, Hold,
    /// Inspect, and the session calls).
    #[serde(default)]
    pub rate: Option<RateBudget>,
    /// Budget for its ValidateToken calls, a bucket of their own (ADR-16: reading grants
    /// back must not starve taking them, nor the reverse). Unset: the same numbers as
    /// `rate`, still a separate bucket.
    #[serde(default)]
    pub validate_rate: Option<RateBudget>,
}

/// Evidence that the pause test passed for a class against a resource (ADR-17).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PauseTestResultSpec {
    pub class: String,
    pub resource: String,
    pub schema_version: String,
    /// `YYYY-MM-DD`.
    pub passed_at: String,
    /// `YYYY-MM-DD`; at most one year after `passed_at`.
    pub expires: String,
}
