//! etcd reached: one bounded connection per cluster, its credential, and etcd's own users.
//!
//! | module       | owns                                                                   |
//! |--------------|------------------------------------------------------------------------|
//! | `etcd`       | [`Etcd`](etcd::Etcd): every call bounded (NO_QUORUM, never a hang)     |
//! | `renewals`   | one LeaseKeepAlive stream for every session a connection renews        |
//! | `etcd_tls`   | TLS to etcd with a client certificate; plaintext only to loopback      |
//! | `etcd_roles` | etcd's users and roles, `lockctl roles`                                |
//!
//! May import: `records`, `error`. Nothing here checks the seal: that is the arbiter's, on
//! every response its request paths see.

pub mod etcd;
pub mod etcd_roles;
pub mod etcd_tls;
pub mod renewals;
