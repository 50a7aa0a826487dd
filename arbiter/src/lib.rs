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
pub use store::calls::connect_etcd;

// What the `arbiter` binary and the harness (lock-integration, lock-gate, lock-pause-test)
// use of the service. The store as the tools read it (the connection, the key layout,
// epochs, the shard map, logging, the admin listener) is `lock_store`'s.
pub use cluster::clusters;
pub use lock::{Asked, sessions, shared};
pub use ops::{admin, logging, metrics};
pub use serve::{engine, observers, peer_tls, proto, registry_reload, server, service};
pub use store::batch;
