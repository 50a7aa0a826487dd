//! The first waiter of a durable key, as a release that hands the key on reads it
//! (`release.rs`): its `/q/` entry and its session's identity, for the holder record.

use super::queue_prefix;
use crate::error::ArbiterError;
use crate::lock::grant::QueuePlace;
use crate::store::Sealed;
use crate::store::layout::{SessionRecord, decode, session_key};
use etcd_client::{GetOptions, SortOrder, SortTarget};
use lock_config::LockKey;

/// The first waiter of a durable key, as a release that hands the key on sees it.
#[derive(Debug, Clone)]
pub struct FirstWaiter {
    /// Its `/q/` entry: the handoff compares it still there and deletes it.
    pub entry: QueuePlace,
    pub lease: i64,
    /// Its session record's create revision and identity (for the holder record).
    pub session_create_revision: i64,
    pub spiffe_id: String,
    pub instance: Option<String>,
}

/// The key's first durable waiter, if any, with its session; None when nobody waits or the
/// first waiter's session record is gone (its entry goes with its lease).
pub async fn first_waiter(
    sealed: &Sealed,
    key: &LockKey,
) -> Result<Option<FirstWaiter>, ArbiterError> {
    let opts = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1);
    let resp = sealed.range(&queue_prefix(key), Some(opts)).await?;
    let Some(kv) = resp.kvs().first() else {
        return Ok(None);
    };
    let (entry, lease) = (
        QueuePlace {
            key: String::from_utf8_lossy(kv.key()).into_owned(),
            create_revision: kv.create_revision(),
        },
        kv.lease(),
    );
    let resp = sealed.get(&session_key(lease)).await?;
    let Some(s) = resp.kvs().first() else {
        return Ok(None);
    };
    let Some(record) = decode::<SessionRecord>(s.value()) else {
        return Ok(None);
    };
    Ok(Some(FirstWaiter {
        entry,
        lease,
        session_create_revision: s.create_revision(),
        spiffe_id: record.spiffe_id,
        instance: record.instance,
    }))
}
