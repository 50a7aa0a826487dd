//! The lock itself: sessions, the grant and its wait, release, sets and shared holds. Each
//! module decides with etcd transactions through the store's seal; none knows the wire.
//!
//! | module     | owns                                                                      |
//! |------------|---------------------------------------------------------------------------|
//! | `sessions` | sessions: an etcd lease bound to its identity, the binding cached         |
//! | `grant`    | the grant Txn and its pure verdict; `grant/settle`: a lost answer settled |
//! | `wait`     | waiting for a held key (a folder: its own table of contents in `wait.rs`) |
//! | `release`  | the release Txn, and the handoff to a waiting head in the same Txn        |
//! | `set`      | AcquireAll and ReleaseAll: a set of keys in one Txn, and its wait         |
//! | `shared`   | shared holds (reader–writer): their grant, release and wait               |
//!
//! Inside, in this order, each module imports only those above it: `sessions`, `grant`,
//! `wait`, then `release`, `set` and `shared`.
//! May import: `store`, `error`, `ops`. Never `cluster` or `serve` (the engine in `serve`
//! picks the cluster and calls in here).

pub(crate) mod grant;
pub(crate) mod release;
pub mod sessions;
pub(crate) mod set;
pub mod shared;
pub(crate) mod wait;
