//! The grant transaction itself, built without I/O (so a test can list what it compares):
//! compare the epoch record (and a shard's fence) unchanged, the key absent, the session
//! bound, the attempt's fence absent (and, with a lock-delay, the marker absent; durable,
//! the queue place there) -> put the holder record on the session lease (and the marker;
//! delete the place); else read back what the verdict needs.

use super::holder_record;
use crate::lock::grant::QueuePlace;
use crate::lock::sessions::Session;
use crate::ops::bugs::{Bug, Bugs};
use crate::store::TxnBuilder;
use crate::store::epoch::Epoch;
use crate::store::layout::{
    DelayMarker, EPOCH_KEY, delay_key, encode, holder_key, lease_hex, session_key,
};
use crate::store::txn::KeyRead;
use etcd_client::{Compare, CompareOp};
use lock_config::LockKey;
use lock_config::registry::ResolvedClass;

/// What one grant attempt asks for.
pub(super) struct Ask<'a> {
    pub epoch: &'a Epoch,
    pub session: &'a Session,
    pub key: &'a LockKey,
    pub class: &'a ResolvedClass<'a>,
    /// A durable waiter's place, consumed by the grant.
    pub queued: Option<&'a QueuePlace>,
    /// The attempt's own fence `/x/<session>/<nonce>`, compared absent (None: durable, or
    /// the injected bug).
    pub fence: Option<&'a str>,
}

/// What a refused grant reads back, by what it reads.
pub(super) struct GrantReads {
    pub holder: KeyRead,
    pub epoch: KeyRead,
    pub session: KeyRead,
    /// A shard's map fence.
    pub fence: Option<KeyRead>,
    /// The key's lock-delay marker (a class with a delay).
    pub delay: Option<KeyRead>,
}

/// The grant transaction `ask` makes, and the handles of what it reads back.
pub(super) fn grant_txn(bugs: &Bugs, ask: &Ask<'_>) -> (TxnBuilder, GrantReads) {
    let hkey = holder_key(ask.key);
    let skey = session_key(ask.session.lease);
    let mut t = TxnBuilder::new();
    if !bugs.has(Bug::GrantWithoutEpochCompare) {
        t.when(
            "epoch",
            Compare::mod_revision(EPOCH_KEY, CompareOp::Equal, ask.epoch.mod_revision),
        );
    }
    t.when(
        "holder-absent",
        Compare::create_revision(hkey.as_str(), CompareOp::Equal, 0),
    )
    .when(
        "session",
        Compare::create_revision(skey.as_str(), CompareOp::Equal, ask.session.create_revision),
    );
    // On a shard, the map fence beside the epoch record (ADR-09).
    if !bugs.has(Bug::ShardFenceOff) {
        t.when_some("shard-fence", ask.epoch.fence_compare());
    }
    if let Some(x) = ask.fence {
        t.when(
            "attempt-fence-absent",
            Compare::create_revision(x, CompareOp::Equal, 0),
        );
    }
    let record = encode(&holder_record(ask.session, ask.class));
    t.put(&hkey, record, Some(ask.session.lease));
    // Lock-delay: no grant while the key's marker exists; the grant puts one, on no
    // lease, so an end without a release leaves it behind (`delay.rs`).
    let dkey = ask.class.lock_delay_seconds().map(|_| delay_key(ask.key));
    if let Some(d) = &dkey {
        t.when(
            "delay-absent",
            Compare::create_revision(d.as_str(), CompareOp::Equal, 0),
        );
        let marker = encode(&DelayMarker {
            session: lease_hex(ask.session.lease),
            delay_from_ms: None,
        });
        t.put(d, marker, None);
    }
    if let Some(q) = ask.queued {
        t.when(
            "queue-place",
            Compare::create_revision(q.key.as_str(), CompareOp::Equal, q.create_revision),
        );
        t.delete(&q.key);
    }
    let reads = GrantReads {
        holder: t.read(&hkey),
        epoch: t.read(EPOCH_KEY),
        session: t.read(&skey),
        fence: ask.epoch.fence_key().map(|k| t.read(k)),
        delay: dkey.as_deref().map(|d| t.read(d)),
    };
    (t, reads)
}
