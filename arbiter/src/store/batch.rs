//! Group commit (issue 18): grant and release transactions on distinct keys that arrive
//! while one is in flight go out together in the next transaction, each as a nested
//! sub-transaction (`RequestOp.request_txn`, etcd ≥ 3.3) decided by its own compares.
//!
//! No timer: a caller alone is sent at once; callers that arrive during a round trip share
//! the next one, so the batch size follows the load. One batch is in flight at a time. A
//! batch is bounded in members and bytes and writes each key at most once (etcd refuses a
//! transaction that puts or deletes one key twice, even in two sub-transactions); a member
//! that would repeat a key waits for the next batch. Members of one batch commit at one
//! revision: tokens stay strictly increasing per key, since one key is written once.
//!
//! Every member gets its own sub-result with the batch's header; the seal is checked by
//! each caller on that header, as for a transaction of its own. A batch whose outcome is
//! unknown (timeout, lost connection) is unknown for every member, which then takes its
//! own read-back path. A batch refused as a whole for any other reason is retried member
//! by member, so one malformed member cannot fail the others.

use crate::ops::bugs::{Bug, Bugs};
use crate::store::etcd::Etcd;
use crate::store::txn::TxnAnswer;
use etcd_client::{Txn, TxnOp, TxnOpResponse, TxnResponse};
use lock_store::{Malformed, StoreError, Task};
use std::collections::{HashSet, VecDeque};
use tokio::sync::{mpsc, oneshot};

/// Members per batch (etcd's default `--max-txn-ops` is 128 operations per branch; each
/// member is one operation of the outer transaction).
pub const MAX_MEMBERS: usize = 64;
/// Bytes per batch (the sum of its members' [`TxnBuilder::bytes`], an upper bound of the
/// encoded request), well below etcd's 1.5 MiB request limit.
///
/// [`TxnBuilder::bytes`]: crate::store::txn::TxnBuilder::bytes
pub const MAX_BYTES: usize = 256 * 1024;

/// What a caller hands in: its transaction, the keys it writes, and its size.
struct Member {
    txn: Txn,
    writes: Vec<String>,
    bytes: usize,
    reply: oneshot::Sender<Result<TxnAnswer, StoreError>>,
}

#[derive(Clone)]
pub struct Batcher {
    tx: mpsc::UnboundedSender<Member>,
}

impl Batcher {
    /// Starts the sender task (inside a Tokio runtime).
    pub fn start(etcd: Etcd, bugs: Bugs) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(etcd, rx, bugs));
        Self { tx }
    }

    /// Sends `txn` (which writes `writes`, `bytes` long with its framing) in the next batch.
    pub(crate) async fn txn(
        &self,
        txn: Txn,
        writes: Vec<String>,
        bytes: usize,
    ) -> Result<TxnAnswer, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Member {
                txn,
                writes,
                bytes,
                reply,
            })
            .map_err(|_| StoreError::Stopped(Task::Batch))?;
        answer.await.map_err(|_| StoreError::Stopped(Task::Batch))?
    }
}

/// Whether `m` can join a batch that already writes `keys` with `bytes` and `members`.
fn fits(keys: &HashSet<String>, bytes: usize, members: usize, m: &Member) -> bool {
    members < MAX_MEMBERS
        && (members == 0 || bytes + m.bytes <= MAX_BYTES)
        && m.writes.iter().all(|k| !keys.contains(k))
}

async fn run(etcd: Etcd, mut rx: mpsc::UnboundedReceiver<Member>, bugs: Bugs) {
    // Members that could not join the last batch (a key already in it), oldest first.
    let mut waiting: VecDeque<Member> = VecDeque::new();
    loop {
        if waiting.is_empty() {
            match rx.recv().await {
                Some(m) => waiting.push_back(m),
                None => return,
            }
        }
        while let Ok(m) = rx.try_recv() {
            waiting.push_back(m);
        }
        let mut batch = Vec::new();
        let mut keys = HashSet::new();
        let mut bytes = 0;
        let mut later = VecDeque::new();
        while let Some(m) = waiting.pop_front() {
            if fits(&keys, bytes, batch.len(), &m) {
                keys.extend(m.writes.iter().cloned());
                bytes += m.bytes;
                batch.push(m);
            } else {
                later.push_back(m);
            }
        }
        waiting = later;
        send(&etcd, batch, &bugs).await;
    }
}

async fn send(etcd: &Etcd, mut batch: Vec<Member>, bugs: &Bugs) {
    if !batch.is_empty() {
        crate::ops::metrics::METRICS
            .batch_size
            .observe(batch.len() as f64);
    }
    if batch.len() == 1 {
        if let Some(m) = batch.pop() {
            let answer = etcd.txn(m.txn).await.map(|r| TxnAnswer::from(&r));
            let _ = m.reply.send(answer);
        }
        return;
    }
    let (txns, replies): (Vec<Txn>, Vec<_>) = batch.into_iter().map(|m| (m.txn, m.reply)).unzip();
    let outer = Txn::new().and_then(txns.iter().cloned().map(TxnOp::txn).collect::<Vec<_>>());
    match etcd.txn(outer).await {
        Ok(resp) => {
            let mut answers = split(&resp);
            if bugs.has(Bug::BatchCrossAnswer) && answers.len() > 1 {
                answers.rotate_left(1);
            }
            if answers.len() != replies.len() {
                for reply in replies {
                    let _ = reply.send(Err(StoreError::Malformed(Malformed::BatchAnswers)));
                }
                return;
            }
            for (reply, answer) in replies.into_iter().zip(answers) {
                let _ = reply.send(Ok(answer));
            }
        }
        // Unknown for every member: each reads back on its own.
        Err(e @ (StoreError::NoQuorum | StoreError::Full)) => {
            for reply in replies {
                let _ = reply.send(Err(same(&e)));
            }
        }
        // Refused as a whole (not expected): each member alone, so one cannot fail all.
        Err(_) => {
            for (txn, reply) in txns.into_iter().zip(replies) {
                let answer = etcd.txn(txn).await.map(|r| TxnAnswer::from(&r));
                let _ = reply.send(answer);
            }
        }
    }
}

/// The members' answers from the outer response: each sub-transaction's own result, with
/// the batch's header (its revision is every committed member's).
fn split(resp: &TxnResponse) -> Vec<TxnAnswer> {
    let header = resp.header().cloned();
    resp.op_responses()
        .into_iter()
        .filter_map(|op| match op {
            TxnOpResponse::Txn(sub) => Some(TxnAnswer::new(
                header.clone(),
                sub.succeeded(),
                sub.op_responses(),
            )),
            _ => None,
        })
        .collect()
}

fn same(e: &StoreError) -> StoreError {
    match e {
        StoreError::Full => StoreError::Full,
        _ => StoreError::NoQuorum,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(writes: &[&str], bytes: usize) -> Member {
        let (reply, _) = oneshot::channel();
        Member {
            txn: Txn::new(),
            writes: writes.iter().map(|s| (*s).to_owned()).collect(),
            bytes,
            reply,
        }
    }

    #[test]
    fn fits_table() {
        let keys: HashSet<String> = ["/l/a".to_owned()].into();
        let cases = [
            // (batch keys, bytes so far, members so far, member, fits)
            (HashSet::new(), 0, 0, member(&["/l/a"], 10), true),
            (keys.clone(), 10, 1, member(&["/l/b"], 10), true),
            (keys.clone(), 10, 1, member(&["/l/a"], 10), false), // a key twice
            (keys.clone(), 10, 1, member(&["/l/b", "/l/a"], 10), false),
            (keys.clone(), 10, MAX_MEMBERS, member(&["/l/b"], 10), false),
            (keys.clone(), MAX_BYTES - 5, 1, member(&["/l/b"], 10), false),
            // A member larger than the byte bound still goes, alone.
            (HashSet::new(), 0, 0, member(&["/l/b"], MAX_BYTES * 2), true),
        ];
        for (i, (keys, bytes, members, m, want)) in cases.into_iter().enumerate() {
            assert_eq!(fits(&keys, bytes, members, &m), want, "case {i}");
        }
    }
}
