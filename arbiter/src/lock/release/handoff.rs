//! The handoff's transaction (issue 18), built without I/O so a test can list what it
//! compares: one write that ends the releaser's grant and makes the head's.

use super::{HandoffAt, Head, now_ms};
use crate::ops::bugs::{Bug, Bugs};
use crate::store::TxnBuilder;
use crate::store::epoch::Epoch;
use crate::store::layout::{
    DelayMarker, EPOCH_KEY, Holder, delay_key, encode, lease_hex, permits_prefix, session_key,
};
use crate::store::txn::{KeyRead, RangeRead};
use etcd_client::{Compare, CompareOp};

/// What a refused handoff reads back, by what it reads.
pub(super) struct HandoffReads {
    pub epoch: KeyRead,
    pub head_session: KeyRead,
    /// A durable head's queue entry.
    pub entry: Option<KeyRead>,
    /// A shard's map fence.
    pub fence: Option<KeyRead>,
    /// A permit's handoff: every permit of the key (does the head hold one already?).
    pub permits: Option<RangeRead>,
}

/// The handoff transaction (no I/O, so a test can list what it compares): while the
/// releaser's grant is the record (`at`), the epoch unchanged and the head's session bound
/// (a durable head's entry there), put the head's record on its lease (`delay`: and its
/// lock-delay marker; durable: delete its entry); else read back what the verdict needs.
pub(super) fn handoff_txn(
    bugs: &Bugs,
    epoch: &Epoch,
    at: HandoffAt<'_>,
    delay: bool,
    head: &Head,
) -> (TxnBuilder, HandoffReads) {
    let head_session = session_key(head.lease);
    let mut t = TxnBuilder::new();
    t.when(
        "epoch",
        Compare::mod_revision(EPOCH_KEY, CompareOp::Equal, epoch.mod_revision),
    )
    .when_some("shard-fence", epoch.fence_compare());
    if !bugs.has(Bug::HandoffWithoutHolderCompare) {
        t.when(
            "token",
            Compare::mod_revision(at.hkey, CompareOp::Equal, at.revision),
        )
        .when("lease", Compare::lease(at.hkey, CompareOp::Equal, at.lease));
    }
    t.when(
        "head-session",
        Compare::create_revision(
            head_session.as_str(),
            CompareOp::Equal,
            head.session_create_revision,
        ),
    );
    let holder = Holder {
        acquired_at_ms: now_ms(),
        ..head.holder.clone()
    };
    t.put(at.hkey, encode(&holder), Some(head.lease));
    let prefix = at.permit.map(|_| permits_prefix(at.key));
    if let Some(prefix) = &prefix {
        // A grant of a permit: no other grant of the key in the same batch (`permit.rs`),
        // and none to a head that holds a permit of the key already (its own attempt
        // may have got one while its offer stood): a session holds at most one.
        t.claim(prefix.clone());
        t.when(
            "head-holds-no-permit",
            Compare::lease(prefix.as_str(), CompareOp::NotEqual, head.lease).with_prefix(),
        );
    }
    if delay {
        // The head's hold gets its marker, as its own grant would have put it.
        let marker = encode(&DelayMarker {
            session: lease_hex(head.lease),
            delay_from_ms: None,
        });
        t.put(&delay_key(at.key), marker, None);
    }
    if let Some(entry) = &head.entry {
        t.when(
            "head-place",
            Compare::create_revision(entry.key.as_str(), CompareOp::Equal, entry.create_revision),
        );
        t.delete(&entry.key);
    }
    let reads = HandoffReads {
        epoch: t.read(EPOCH_KEY),
        head_session: t.read(&head_session),
        entry: head.entry.as_ref().map(|e| t.read(&e.key)),
        fence: epoch.fence_key().map(|k| t.read(k)),
        permits: prefix.as_deref().map(|p| t.read_prefix(p)),
    };
    (t, reads)
}
