//! The arbiter: the only component with an etcd write credential for grants (ADR-18).
//! It owns the grant and release transactions, sessions and the epoch seal, and serves
//! `lock.v1` behind Envoy.
//!
//! The code is in folders by what it does; each folder's root file (`serve.rs`, …) is its
//! table of contents. Top to bottom, a folder imports only folders below it, never one
//! above (`lock` and `cluster` do not import each other):
//!
//! | folder     | owns                                                                   |
//! |------------|------------------------------------------------------------------------|
//! | `serve/`   | lock.v1 on the wire: listener, service, streams, and the engine façade |
//! | `lock/`    | the lock itself: sessions, grant, its waits (`lock/wait/`), release,   |
//! |            | sets, shared holds (`lock.rs` gives the order inside)                  |
//! | `cluster/` | more than one etcd cluster: a request's route by tier and shard, moves |
//! | `store/`   | etcd behind the seal: connection, group commit, epoch, layout, streams |
//! | `error`    | `ArbiterError` and its one mapping to statuses; why a wait ended       |
//! | `ops/`     | operating the process: metrics, admin listener, logs, traces, drain    |

pub(crate) mod serve;

pub(crate) mod lock;

pub(crate) mod cluster;

pub(crate) mod store;

pub(crate) mod error;

pub(crate) mod ops;

pub use error::ArbiterError;
pub use serve::engine::Engine;
pub use store::etcd::Etcd;

// The crate's public surface for the workspace's tools (lockctl, lock-audit, lock-admin,
// lock-kube, lock-explorer, the harness and its tests) and the `arbiter` binary, at the
// paths they have always used, until issue 51 item 2 moves what the tools need into a
// crate of their own.
pub use cluster::{clusters, rehome};
pub use lock::{Asked, sessions, shared};
pub use ops::{admin, bugs, https, logging, metrics, registry_files};
pub use serve::{engine, observers, peer_tls, proto, registry_reload, server, service};
pub use store::{batch, epoch, etcd_roles, etcd_tls, hold_end, layout, shard_map};
