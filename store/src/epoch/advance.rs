//! The compare-and-advance transaction (ADR-03), split into a plan (what the store says
//! now) and a run (one Txn), so lock-admin can put its approval's own compare and delete
//! into the same transaction: the advance and the request's end commit together, so an
//! approved request runs once.

use crate::connection::etcd::Etcd;
use crate::error::{Absent, Contended, EpochRefused, Malformed, Record, StoreError};
use crate::records::layout::{
    AdvancedBy, EPOCH_KEY, EpochRecord, HOLDER_PREFIX, PERMIT_PREFIX, QUEUE_PREFIX, SHARED_PREFIX,
    decode, encode,
};
use etcd_client::{Compare, CompareOp, DeleteOptions, Txn, TxnOp};

/// An advance ready to run: the record as read (its mod revision), and the new one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub from: u16,
    pub mod_revision: i64,
    /// The cluster ID the store reported when read: the new record is bound to it.
    pub cluster_id: String,
    pub record: EpochRecord,
}

/// Whether the store, at `current`, may advance from `from` to `next`.
pub fn verdict(current: u16, from: u16, next: u16) -> Result<(), EpochRefused> {
    if current != from {
        return Err(EpochRefused::NotAt { current, from });
    }
    if next <= from || next > lock_config::token::MAX_EPOCH {
        return Err(EpochRefused::NotAnAdvance { from, next });
    }
    Ok(())
}

/// Reads the epoch record and plans the advance from `from` to `next` (`from + 1` when
/// None).
pub async fn plan(
    store: &Etcd,
    from: u16,
    next: Option<u16>,
    by: Option<AdvancedBy>,
) -> Result<Plan, StoreError> {
    let next = match next {
        Some(n) => n,
        None => from
            .checked_add(1)
            .filter(|e| *e <= lock_config::token::MAX_EPOCH)
            .ok_or(StoreError::Epoch(EpochRefused::Exhausted))?,
    };
    let resp = store.get(EPOCH_KEY).await?;
    let kv = resp
        .kvs()
        .first()
        .ok_or(StoreError::Absent(Absent::EpochRecord))?;
    let current =
        decode::<EpochRecord>(kv.value()).ok_or(StoreError::Undecodable(Record::EpochRecord))?;
    verdict(current.epoch, from, next).map_err(StoreError::Epoch)?;
    let cluster_id = resp
        .header()
        .map(|h| EpochRecord::cluster_id_hex(h.cluster_id()))
        .ok_or(StoreError::Malformed(Malformed::NoHeader))?;
    Ok(Plan {
        from,
        mod_revision: kv.mod_revision(),
        record: EpochRecord {
            epoch: next,
            cluster_id: cluster_id.clone(),
            advanced_by: by,
        },
        cluster_id,
    })
}

/// The transaction: the caller's compares beside the record's, its ops beside the put and
/// the prefix deletes: every hold (exclusive, shared, and a semaphore's permits) and every
/// waiter (durable queue entries, waiting writers' marks) of the old epoch. Lock-delay
/// markers stay: an advance ends holds without a release, which is what they delay.
pub fn txn(plan: &Plan, mut compares: Vec<Compare>, mut ops: Vec<TxnOp>) -> Txn {
    compares.insert(
        0,
        Compare::mod_revision(EPOCH_KEY, CompareOp::Equal, plan.mod_revision),
    );
    ops.splice(
        0..0,
        [
            TxnOp::put(EPOCH_KEY, encode(&plan.record), None),
            TxnOp::delete(HOLDER_PREFIX, Some(DeleteOptions::new().with_prefix())),
            TxnOp::delete(QUEUE_PREFIX, Some(DeleteOptions::new().with_prefix())),
            TxnOp::delete(SHARED_PREFIX, Some(DeleteOptions::new().with_prefix())),
            TxnOp::delete(PERMIT_PREFIX, Some(DeleteOptions::new().with_prefix())),
        ],
    );
    Txn::new().when(compares).and_then(ops)
}

/// Runs the planned advance with the caller's extra compares and ops. Fails, having
/// written nothing, when anything compared moved since the plan was read.
pub async fn run(
    store: &Etcd,
    plan: &Plan,
    compares: Vec<Compare>,
    ops: Vec<TxnOp>,
) -> Result<EpochRecord, StoreError> {
    let done = store.txn(txn(plan, compares, ops)).await?;
    if done
        .header()
        .map(|h| EpochRecord::cluster_id_hex(h.cluster_id()))
        .as_deref()
        != Some(plan.cluster_id.as_str())
    {
        return Err(StoreError::Contended(Contended::ClusterIdAtAdvance));
    }
    if !done.succeeded() {
        return Err(StoreError::Contended(Contended::EpochRecord));
    }
    Ok(plan.record.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_table() {
        let max = lock_config::token::MAX_EPOCH;
        for (current, from, next, ok) in [
            (3, 3, 4, true),
            (3, 3, 9, true),   // a shard's epoch allocated from the coord cluster
            (4, 3, 5, false),  // someone advanced first: nothing twice
            (3, 3, 3, false),  // not an advance
            (3, 3, 2, false),  // backwards
            (3, 3, max, true), // the last epoch there is
            (3, 3, max + 1, false),
        ] {
            assert_eq!(
                verdict(current, from, next).is_ok(),
                ok,
                "at {current}, {from} -> {next}"
            );
        }
    }
}
