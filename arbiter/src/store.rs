//! etcd as the arbiter uses it: one connection per cluster, every response behind the seal
//! (ADR-03), and the streams shared by all requests. What the workspace's tools read too
//! (the connection, the key layout, epochs, the shard map) is `lock_store`'s, named here
//! at the paths the arbiter's files use.
//!
//! | module        | owns                                                                        |
//! |---------------|-----------------------------------------------------------------------------|
//! | `sealed`      | [`Store`], etcd as request paths see it: every response passes the seal     |
//! | `epoch`       | the seal's checks on the epoch record (its writes: `lock_store::epoch`)     |
//! | `txn`         | a transaction built by named compares and read handles; its typed answer    |
//! | `batch`       | group commit of grant and release Txns on distinct keys                     |
//! | `watch_hub`   | one etcd watch stream for every waiting queue head and every Observe        |
//! | `calls`       | every etcd call's span and latency, told by the connection                  |
//!
//! From `lock_store`: `etcd` (the bounded connection and its renewals), `etcd_tls`,
//! `layout` (the key layout and records), `hold_end`, `shard_map`.
//!
//! May import: `error`, `ops`. Never `cluster`, `lock` or `serve`: the store knows keys
//! and records, not who waits for them (a watch hub's answer carries `error::Ended`, the
//! plain reason a wait ended, not the wait).

pub mod batch;
pub(crate) mod calls;
pub(crate) mod epoch;
pub(crate) mod sealed;
pub(crate) mod txn;
pub(crate) mod watch_hub;

pub(crate) use lock_store::{etcd, etcd_tls, hold_end, layout, shard_map};

pub(crate) use sealed::{Sealed, ShardRole, Store};
pub(crate) use txn::TxnBuilder;
