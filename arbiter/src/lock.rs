//! The lock itself: sessions, the grant and its wait, release, sets and shared holds. Each
//! module decides with etcd transactions through the store's seal; none knows the wire.
//!
//! | module            | owns                                                                      |
//! |-------------------|---------------------------------------------------------------------------|
//! | `sessions`        | sessions: an etcd lease bound to its identity, the binding cached         |
//! | `grant`           | the grant Txn; `grant/settle`: a lost answer settled                      |
//! | `grant/verdict`   | the grant's pure verdict on what its Txn read back, and the token         |
//! | `wait`            | waiting for a held key (a folder: its own table of contents in `wait.rs`) |
//! | `release`         | the release Txn, and the handoff to a waiting head in the same Txn        |
//! | `release/verdict` | what a release's and a handoff's Txn answered (pure)                      |
//! | `set`             | AcquireAll and ReleaseAll: a set of keys in one Txn, and its wait         |
//! | `set/verdict`     | a set's grant verdict, and which keys its release ends (pure)             |
//! | `shared`          | shared holds (reader–writer): their grant and its wait                    |
//! | `shared/verdict`  | a shared class's grant verdict, for either mode (pure)                    |
//! | `shared/release`  | a shared hold's release; Inspect's and ValidateToken's reads              |
//! | `permit`          | semaphores (`permits: N`): a permit's grant Txn; the permits' reads       |
//! | `permit/verdict`  | a permit grant's verdict: own, leak, the lowest free permit, or full      |
//!
//! Inside, in this order, each module imports only those above it: `sessions`, `grant`,
//! `permit`, `wait`, then `release`, `set` and `shared`.
//! May import: `store`, `error`, `ops`. Never `cluster` or `serve` (the engine in `serve`
//! picks the cluster and calls in here).

/// The hold a caller asks for (the wire's `HoldMode`): the key's one holder, one of its
/// readers (a `shared: true` class), or one of its permits (a `permits: N` class).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Asked {
    #[default]
    Exclusive,
    Shared,
    Permit,
}

pub(crate) mod grant;
pub(crate) mod permit;
pub(crate) mod release;
pub mod sessions;
pub(crate) mod set;
pub mod shared;
pub(crate) mod wait;
