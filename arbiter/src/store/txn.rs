//! Transactions as the lock paths write them (issue 51): a [`TxnBuilder`] takes each
//! compare by name, each write by key, and each read as a handle, and its [`TxnAnswer`]
//! is read by those handles. No caller counts positions in a branch, so a read added
//! anywhere cannot shift the others, and a conditional read (the shard fence, a delay
//! marker) is simply a handle that may be absent.
//!
//! The builder also knows what the group commit (`batch.rs`) needs: the keys its success
//! branch writes (`writes`, the one-write-per-key rule) and the request's size
//! ([`TxnBuilder::bytes`], its encoded length: the one place a budget is reckoned).

use etcd_client::proto::PbTxnRequest;
use etcd_client::{
    Compare, GetOptions, KeyValue, PutOptions, ResponseHeader, Txn, TxnOp, TxnOpResponse,
    TxnResponse,
};

/// What one member adds to a batch around its own encoding: the outer transaction's
/// `RequestOp` (a tag and a length) holding its `request_txn` field (a tag and a length).
/// Each tag is one byte (field numbers below 16) and each length a varint of at most five
/// bytes (below 4 GiB).
const MEMBER_FRAMING: usize = 2 * (1 + 5);

/// Which branch a read runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Branch {
    /// The success branch (`and_then`), also the only one of a transaction with no compares.
    Then,
    /// The failure branch (`or_else`).
    Else,
}

/// Where a read sits: its branch and its place there, known only to this module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    branch: Branch,
    at: usize,
}

/// A read of one key: [`TxnAnswer::kv`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRead(Slot);

/// A read of every key under a prefix: [`TxnAnswer::kvs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeRead(Slot);

/// A count of the keys under a prefix: [`TxnAnswer::count`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountRead(Slot);

/// One transaction under construction. Compares, writes and reads go into etcd's request
/// in the order they are added, each branch on its own.
#[derive(Debug, Clone, Default)]
pub struct TxnBuilder {
    compares: Vec<Compare>,
    /// What each compare guards, in the same order (tests name them).
    names: Vec<&'static str>,
    then: Vec<TxnOp>,
    otherwise: Vec<TxnOp>,
    /// The keys the success branch writes, and any key it stands for (`claim`).
    writes: Vec<String>,
}

impl TxnBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// A compare every success needs; `name` says what it guards.
    pub fn when(&mut self, name: &'static str, compare: Compare) -> &mut Self {
        self.compares.push(compare);
        self.names.push(name);
        self
    }

    /// [`TxnBuilder::when`], for a compare only some stores need (a shard's fence).
    pub fn when_some(&mut self, name: &'static str, compare: Option<Compare>) -> &mut Self {
        if let Some(c) = compare {
            self.when(name, c);
        }
        self
    }

    /// Puts `value` at `key` on success (on `lease`, or none).
    pub fn put(&mut self, key: &str, value: impl Into<Vec<u8>>, lease: Option<i64>) -> &mut Self {
        let options = lease.map(|l| PutOptions::new().with_lease(l));
        self.then.push(TxnOp::put(key, value, options));
        self.writes.push(key.to_owned());
        self
    }

    /// Deletes `key` on success.
    pub fn delete(&mut self, key: &str) -> &mut Self {
        self.then.push(TxnOp::delete(key, None));
        self.writes.push(key.to_owned());
        self
    }

    /// Counts `key` among the writes for the batch's one-write-per-key rule without writing
    /// it: a prefix that stands for every key under it (a semaphore's permits).
    pub fn claim(&mut self, key: String) -> &mut Self {
        self.writes.push(key);
        self
    }

    /// Reads `key` when a compare fails.
    pub fn read(&mut self, key: &str) -> KeyRead {
        KeyRead(self.push(Branch::Else, TxnOp::get(key, None)))
    }

    /// Reads every key under `prefix` when a compare fails.
    pub fn read_prefix(&mut self, prefix: &str) -> RangeRead {
        let options = GetOptions::new().with_prefix();
        RangeRead(self.push(Branch::Else, TxnOp::get(prefix, Some(options))))
    }

    /// Reads the first key under `prefix` when a compare fails.
    pub fn read_first(&mut self, prefix: &str) -> KeyRead {
        let options = GetOptions::new().with_prefix().with_limit(1);
        KeyRead(self.push(Branch::Else, TxnOp::get(prefix, Some(options))))
    }

    /// Reads `key` on success (after the writes added so far), or in a transaction with
    /// no compares (a read of several keys at one revision).
    pub fn then_read(&mut self, key: &str) -> KeyRead {
        KeyRead(self.push(Branch::Then, TxnOp::get(key, None)))
    }

    /// Counts the keys under `prefix` on success (after the writes added so far).
    pub fn then_count(&mut self, prefix: &str) -> CountRead {
        let options = GetOptions::new().with_prefix().with_count_only();
        CountRead(self.push(Branch::Then, TxnOp::get(prefix, Some(options))))
    }

    fn push(&mut self, branch: Branch, op: TxnOp) -> Slot {
        let ops = match branch {
            Branch::Then => &mut self.then,
            Branch::Else => &mut self.otherwise,
        };
        ops.push(op);
        Slot {
            branch,
            at: ops.len() - 1,
        }
    }

    /// The names of the compares, in order.
    pub fn compare_names(&self) -> &[&'static str] {
        &self.names
    }

    /// The keys the success branch writes (with any it claims), in the order added.
    pub fn writes(&self) -> &[String] {
        &self.writes
    }

    /// What this transaction costs a batch: its encoded length plus a member's framing, so
    /// the sum over a batch bounds the outer request's size from above.
    pub fn bytes(&self) -> usize {
        prost::Message::encoded_len(&PbTxnRequest::from(self.txn())) + MEMBER_FRAMING
    }

    /// The request etcd gets.
    fn txn(&self) -> Txn {
        self.clone().into_parts().0
    }

    /// The request etcd gets, and the keys it writes.
    pub(crate) fn into_parts(self) -> (Txn, Vec<String>) {
        let txn = Txn::new()
            .when(self.compares)
            .and_then(self.then)
            .or_else(self.otherwise);
        (txn, self.writes)
    }
}

/// A transaction's answer, alone or as a member of a batch: read by the handles its
/// builder gave out.
#[derive(Debug, Clone)]
pub struct TxnAnswer {
    header: Option<ResponseHeader>,
    succeeded: bool,
    ops: Vec<TxnOpResponse>,
}

impl TxnAnswer {
    pub(crate) fn new(
        header: Option<ResponseHeader>,
        succeeded: bool,
        ops: Vec<TxnOpResponse>,
    ) -> Self {
        Self {
            header,
            succeeded,
            ops,
        }
    }

    pub fn header(&self) -> Option<&ResponseHeader> {
        self.header.as_ref()
    }

    /// Whether every compare held (the success branch ran).
    pub fn succeeded(&self) -> bool {
        self.succeeded
    }

    /// The revision of the header (the commit's, if it wrote), if there is a header.
    pub fn revision(&self) -> Option<i64> {
        self.header.as_ref().map(ResponseHeader::revision)
    }

    /// The key `read` found (None: absent, or its branch did not run).
    pub fn kv(&self, read: KeyRead) -> Option<&KeyValue> {
        self.kvs_at(read.0).first()
    }

    /// The keys `read` found (empty: none, or its branch did not run).
    pub fn kvs(&self, read: RangeRead) -> &[KeyValue] {
        self.kvs_at(read.0)
    }

    /// The count `read` made (None: its branch did not run).
    pub fn count(&self, read: CountRead) -> Option<i64> {
        self.get(read.0).map(etcd_client::GetResponse::count)
    }

    fn kvs_at(&self, slot: Slot) -> &[KeyValue] {
        self.get(slot).map_or(&[], etcd_client::GetResponse::kvs)
    }

    fn get(&self, slot: Slot) -> Option<&etcd_client::GetResponse> {
        let ran = match slot.branch {
            Branch::Then => self.succeeded,
            Branch::Else => !self.succeeded,
        };
        match self.ops.get(slot.at) {
            Some(TxnOpResponse::Get(g)) if ran => Some(g),
            _ => None,
        }
    }
}

impl From<&TxnResponse> for TxnAnswer {
    fn from(resp: &TxnResponse) -> Self {
        Self::new(
            resp.header().cloned(),
            resp.succeeded(),
            resp.op_responses(),
        )
    }
}

#[cfg(test)]
mod tests;
