//! The lock service's etcd store as every crate reads it: the arbiter, and the tools beside
//! it (lockctl, lock-audit, lock-admin, lock-kube, lock-explorer), which link this crate,
//! never the service.
//!
//! The code is in folders by what it does; each folder's root file is its table of
//! contents. Top to bottom, a folder imports only folders below it:
//!
//! | folder        | owns                                                                    |
//! |---------------|-------------------------------------------------------------------------|
//! | `shards/`     | the shard map's I/O and `lockctl shards`' move of keys between clusters |
//! | `epoch`       | the epoch record's operations: init, the advance's Txn, the next epoch  |
//! | `connection/` | etcd reached: the bounded connection, its renewals, TLS, users and roles |
//! | `records/`    | the key layout and record encodings, why a hold ended (pure)            |
//! | `error`       | [`StoreError`]: every cause a store operation fails with                |
//! | `ops/`        | what the service's binaries share: logs, HTTPS, the admin listener, the |
//! |               | registry folder, the release gate's deliberate bugs                     |
//!
//! Nothing here knows a lock request, a wait or the wire: the arbiter's seal, grants and
//! queues build on this crate, and map [`StoreError`] to statuses in one place of their own.

pub(crate) mod shards;

pub mod epoch;

pub(crate) mod connection;

pub(crate) mod records;

pub(crate) mod error;

pub(crate) mod ops;

pub use connection::etcd::Etcd;
pub use error::{
    Absent, ConnectError, Contended, EpochRefused, Malformed, MapError, MoveRefused, Record,
    StoreError, Task,
};

pub use connection::{etcd, etcd_roles, etcd_tls, renewals};
pub use ops::{admin, bugs, https, logging, registry_files};
pub use records::{hold_end, layout};
pub use shards::{rehome, shard_map};
