//! The registry (ADR-11, 14, 19, 24; DESIGN 5): reviewed YAML documents shaped like the
//! Kubernetes resources they become. Parse, then validate every cross-document rule in one
//! function, then freeze into an immutable [`Registry`].

mod date;
pub mod diff;
mod documents;
mod errors;
pub mod resource;
mod validate;

pub use date::Date;
pub use documents::{
    API_VERSION, Document, Enforcement, Fairness, LockClassSpec, LockGrantSpec, NamespaceSpec,
    PauseTestResultSpec, Purpose, QuorumPosture, RateBudget, Tier,
};
pub use errors::{RegistryError, RegistryErrors};
pub use validate::{Registry, ResolvedClass};

/// Default session TTL of a class that does not set one (ADR-11).
pub const DEFAULT_TTL_SECONDS: u32 = 15;
/// Allowed TTL range for every class.
pub const TTL_RANGE: std::ops::RangeInclusive<u32> = 5..=300;
/// Advisory classes may not go below this: a false expiry there can produce a duplicate write.
pub const ADVISORY_TTL_FLOOR: u32 = 30;
/// The most permits a semaphore class may have: each acquire reads every permit of the key
/// back in its transaction, so N is kept small.
pub const MAX_PERMITS: u32 = 64;

/// One input file: its name (for error messages) and its text.
#[derive(Debug, Clone)]
pub struct Source {
    pub name: String,
    pub text: String,
}

/// The version of a registry an arbiter serves: the texts of its sources in their order
/// (file names sorted), hashed as [`crate::ecds::config_version`] hashes (48 bits). Where
/// the folder lives does not change it; an edit of any document does.
pub fn sources_version(sources: &[Source]) -> u64 {
    let mut all = Vec::new();
    for s in sources {
        all.extend_from_slice(s.text.as_bytes());
        all.push(0);
    }
    crate::ecds::config_version(&all)
}
