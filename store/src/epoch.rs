//! The epoch record's operations (ADR-03): its first write, the advance, and which epoch an
//! advance moves to. The seal every response passes (the record's cluster ID and the
//! revision floor) is the arbiter's: it runs on request paths.
//!
//! | module    | owns                                                                      |
//! |-----------|---------------------------------------------------------------------------|
//! | this file | `lockctl epoch init`, and an advance as one call                          |
//! | `advance` | the advance's plan and its one Txn, which lock-admin extends              |
//! | `next`    | which epoch an advance moves to (pure): E+1, or the coord's allocator     |
//!
//! May import: `connection`, `records`, `error`.

use crate::connection::etcd::Etcd;
use crate::error::{Contended, Malformed, Record, StoreError};
use crate::records::layout::{AdvancedBy, EPOCH_KEY, EpochRecord, decode, encode};
use etcd_client::{Compare, CompareOp, Txn, TxnOp};

pub mod advance;
pub mod next;

/// `lockctl epoch init`: creates epoch `first` (1 on a lone cluster; allocated from the
/// coord cluster when there are several) bound to the current cluster ID, if absent.
/// Returns the record now in the store and whether this call created it. Writes
/// `/sys/epoch`: with etcd's roles, root's (a bootstrap step beside `roles apply`).
pub async fn init_with(store: &Etcd, first: u16) -> Result<(EpochRecord, bool), StoreError> {
    // The cluster ID comes from the header of a read; the Txn's own header confirms it.
    let probe = store.get(EPOCH_KEY).await?;
    if let Some(kv) = probe.kvs().first() {
        let rec = decode::<EpochRecord>(kv.value())
            .ok_or(StoreError::Undecodable(Record::EpochRecord))?;
        return Ok((rec, false));
    }
    let cluster = probe
        .header()
        .map(|h| EpochRecord::cluster_id_hex(h.cluster_id()))
        .ok_or(StoreError::Malformed(Malformed::NoHeader))?;
    let record = EpochRecord {
        epoch: first,
        cluster_id: cluster.clone(),
        advanced_by: None,
    };
    let txn = Txn::new()
        .when(vec![Compare::create_revision(
            EPOCH_KEY,
            CompareOp::Equal,
            0,
        )])
        .and_then(vec![TxnOp::put(EPOCH_KEY, encode(&record), None)]);
    let resp = store.txn(txn).await?;
    let committed_on = resp
        .header()
        .map(|h| EpochRecord::cluster_id_hex(h.cluster_id()));
    if committed_on.as_deref() != Some(cluster.as_str()) {
        return Err(StoreError::Contended(Contended::ClusterIdAtInit));
    }
    if !resp.succeeded() {
        // Someone else initialised it concurrently: report theirs.
        return Box::pin(init_with(store, first)).await;
    }
    Ok((record, true))
}

/// An epoch advance, one transaction (ADR-03): compares the epoch record is still epoch
/// `from` (unchanged since read), puts epoch `next` bound to the cluster ID the store
/// reports now, and deletes every hold (`/l/`) and durable waiter (`/q/`). `next` is
/// `from + 1` on a lone cluster (None), or allocated from the coord cluster
/// ([`next::source`] decides which).
pub async fn advance(
    store: &Etcd,
    from: u16,
    next: Option<u16>,
    by: Option<AdvancedBy>,
) -> Result<EpochRecord, StoreError> {
    let plan = advance::plan(store, from, next, by).await?;
    advance::run(store, &plan, Vec::new(), Vec::new()).await
}
