//! What the holds a read found are shown with, read at the same revision and bounded by
//! them: per key, its durable waiters, shared holds and a marked writer; per session, its
//! record and its lease's TTL left.

use super::{
    Etcd, QUEUE_PREFIX, ReadError, SHARED_PREFIX, SessionRecord, TXN_OPS, decode, session_key,
};
use crate::view::{Seen, SessionSeen};
use etcd_client::{GetOptions, Txn, TxnOp, TxnOpResponse};
use std::collections::BTreeSet;

/// Per key of the page: durable waiters, shared holds and whether a writer is marked,
/// counted at the page's revision in transactions of at most [`TXN_OPS`] reads.
pub(super) async fn counts(etcd: &Etcd, seen: &mut Seen, revision: i64) -> Result<(), ReadError> {
    let count = |prefix: String| {
        TxnOp::get(
            prefix,
            Some(
                GetOptions::new()
                    .with_prefix()
                    .with_count_only()
                    .with_revision(revision),
            ),
        )
    };
    let keys: BTreeSet<&String> = seen
        .holds
        .iter()
        .chain(&seen.shared_holds)
        .map(|(k, _)| k)
        .collect();
    let keys: Vec<String> = keys.into_iter().cloned().collect();
    for chunk in keys.chunks(TXN_OPS / 3) {
        let ops: Vec<TxnOp> = chunk
            .iter()
            .flat_map(|k| {
                [
                    count(format!("{QUEUE_PREFIX}{k}//")),
                    count(format!("{SHARED_PREFIX}{k}//s/")),
                    count(format!("{SHARED_PREFIX}{k}//w/")),
                ]
            })
            .collect();
        let resp = etcd.txn(Txn::new().and_then(ops)).await?;
        let got: Vec<u64> = resp
            .op_responses()
            .iter()
            .map(|r| match r {
                TxnOpResponse::Get(g) => u64::try_from(g.count()).unwrap_or(0),
                _ => 0,
            })
            .collect();
        for (k, c) in chunk.iter().zip(got.chunks(3)) {
            if let [queued, shared, writers] = c {
                if *queued > 0 {
                    seen.durable_waiters.insert(k.clone(), *queued);
                }
                if *shared > 0 || *writers > 0 {
                    seen.shared.insert(k.clone(), (*shared, *writers > 0));
                }
            }
        }
    }
    Ok(())
}

/// The sessions the page's holds name: their records at the page's revision, and their
/// leases' remaining TTL now (one call per distinct session: at most one per key).
pub(super) async fn sessions(etcd: &Etcd, seen: &mut Seen, revision: i64) -> Result<(), ReadError> {
    let leases: BTreeSet<String> = seen
        .holds
        .iter()
        .chain(&seen.shared_holds)
        .map(|(_, h)| h.session.clone())
        .collect();
    let leases: Vec<(String, i64)> = leases
        .into_iter()
        .filter_map(|hex| i64::from_str_radix(&hex, 16).ok().map(|id| (hex, id)))
        .collect();
    for chunk in leases.chunks(TXN_OPS) {
        let ops: Vec<TxnOp> = chunk
            .iter()
            .map(|(_, id)| {
                TxnOp::get(
                    session_key(*id),
                    Some(GetOptions::new().with_revision(revision)),
                )
            })
            .collect();
        let resp = etcd.txn(Txn::new().and_then(ops)).await?;
        for ((hex, _), r) in chunk.iter().zip(resp.op_responses()) {
            let record = match r {
                TxnOpResponse::Get(g) => g
                    .kvs()
                    .first()
                    .and_then(|kv| decode::<SessionRecord>(kv.value())),
                _ => None,
            };
            seen.sessions.insert(
                hex.clone(),
                SessionSeen {
                    record,
                    ttl_left_s: None,
                },
            );
        }
    }
    let mut lease = etcd.lease();
    for (hex, id) in &leases {
        let ttl = etcd.bounded(lease.time_to_live(*id, None)).await?.ttl();
        if let Some(s) = seen.sessions.get_mut(hex) {
            // etcd answers -1 for a lease that is gone.
            s.ttl_left_s = (ttl >= 0).then_some(ttl);
        }
    }
    Ok(())
}
