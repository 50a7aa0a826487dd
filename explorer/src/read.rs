//! The read model's reads (I/O at the rim): one page of a namespace's held keys, and the
//! namespaces that hold any, from the store the arbiters wrote. Every read is bounded: a
//! page is at most [`MAX_PAGE`] keys, and what is read for them (their sessions, their
//! queue and shared-hold counts) is bounded by the page.
//!
//! What the store cannot say: the waiters of a `fairness: memory` class live in the
//! arbiters' memory, not in etcd, so only durable waiters (`/q/`) and shared holds (`/r/`)
//! are counted here.
//!
//! | module       | owns                                                                   |
//! |--------------|------------------------------------------------------------------------|
//! | `cursor`     | where a page starts: a namespace's exclusive run, then its shared run  |
//! | `page`       | one page of a namespace's holds, read from a cursor                    |
//! | `one_key`    | everything held on one key                                             |
//! | `session`    | what one session holds and waits for (the keys on its lease)           |
//! | `namespaces` | the namespaces that hold any key, and one namespace's counts           |
//! | `detail`     | what a page's holds are shown with: per-key counts, their sessions     |
//! | `range`      | one bounded range read under a prefix, and a prefix's range end        |
//!
//! The store's key layout and connection are imported here once for every read below: one
//! place to change when they leave lock-arbiter (issue 51).

mod cursor;
mod detail;
mod namespaces;
mod one_key;
mod page;
mod range;
mod session;

pub use cursor::Cursor;
use lock_store::layout::{
    HOLDER_PREFIX, Holder, QUEUE_PREFIX, SHARED_PREFIX, SessionRecord, decode, session_key,
};
use lock_store::{Etcd, StoreError};
pub use namespaces::{held_count, namespaces};
pub use one_key::one_key;
pub use page::{Page, page};
pub use session::{SESSION_KEYS, session};

/// Most keys one page holds.
pub const MAX_PAGE: usize = 500;
/// Most operations in one read transaction (etcd's `--max-txn-ops` default is 128).
const TXN_OPS: usize = 120;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("a page holds 1 to {MAX_PAGE} keys, not {0}")]
    PageSize(usize),
    #[error("not a namespace: {0:?} (one path segment, no '/')")]
    Namespace(String),
    #[error(
        "not a cursor of this namespace: {0:?} (give what the last page printed after --after)"
    )]
    Cursor(String),
    #[error("not a lock key: {0:?}")]
    Key(String),
    #[error("not a session: {0:?} (its lease in hex)")]
    Session(String),
}
