//! etcd as the arbiter uses it: one connection per cluster, every response behind the seal
//! (ADR-03), the key layout, and the streams shared by all requests.
//!
//! | module        | owns                                                                        |
//! |---------------|-----------------------------------------------------------------------------|
//! | `sealed`      | [`Store`], etcd as request paths see it: every response passes the seal     |
//! | `epoch`       | the epoch record and the seal's checks; `epoch/advance`: the advance's Txn  |
//! | `etcd`        | the raw connection, every call bounded (NO_QUORUM, never a hang)            |
//! | `batch`       | group commit of grant and release Txns on distinct keys                     |
//! | `layout`      | the key layout and record encodings (pure)                                  |
//! | `hold_end`    | why a hold ended, read at its delete (pure; shared with the audit trail)    |
//! | `shard_map`   | the shard map's I/O: its document, watch, each shard's fence, epoch numbers |
//! | `watch_hub`   | one etcd watch stream for every waiting queue head                          |
//! | `observe_hub` | one etcd watch stream for every Observe (to merge with `watch_hub`)         |
//! | `renewals`    | one LeaseKeepAlive stream for every session the arbiter renews              |
//! | `etcd_tls`    | TLS to etcd with a client certificate; plaintext only to loopback           |
//! | `etcd_roles`  | etcd's users and roles, `lockctl roles`                                     |
//!
//! May import: `error`, `ops`. Never `cluster`, `lock` or `serve`: the store knows keys
//! and records, not who waits for them (a watch hub's answer carries `error::Ended`, the
//! plain reason a wait ended, not the wait).

pub mod batch;
pub mod epoch;
pub(crate) mod etcd;
pub mod etcd_roles;
pub mod etcd_tls;
pub mod hold_end;
pub mod layout;
pub(crate) mod observe_hub;
pub(crate) mod renewals;
pub(crate) mod sealed;
pub mod shard_map;
pub(crate) mod watch_hub;

pub(crate) use sealed::{Sealed, ShardRole, Store};
