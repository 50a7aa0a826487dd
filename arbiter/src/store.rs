//! The store as request paths see it: etcd behind the seal (ADR-03).
//!
//! [`Store::sealed`] returns a [`Sealed`] view bound to the epoch as of now. Every response
//! it hands back has passed the seal on its header (the cluster ID the epoch was minted for,
//! and the revision floor this arbiter has seen), so no call site can forget the check:
//! grants, releases, reads, session calls, durable queue reads, watches and keepalives all
//! come through here. A failed check is SEALED and makes the next call re-read the epoch
//! record.

use crate::batch::{Answer, Batcher};
use crate::bugs::Bugs;
use crate::epoch::{Epoch, EpochCache};
use crate::error::ArbiterError;
use crate::etcd::{Etcd, LeaseGrant};
use crate::watch_hub::WatchHub;
use etcd_client::{
    Compare, CompareOp, GetOptions, GetResponse, LeaseKeepAliveResponse, ResponseHeader, Txn,
    TxnOp, TxnResponse, WatchOptions, WatchStream,
};
use std::sync::{Arc, OnceLock};

#[derive(Clone)]
pub struct Store {
    etcd: Etcd,
    epochs: Arc<EpochCache>,
    /// Group commit of grant and release transactions, started on first use (inside the
    /// runtime).
    batcher: Arc<OnceLock<Batcher>>,
    /// The one watch stream of every waiting queue head, started on first use.
    watch_hub: Arc<OnceLock<WatchHub>>,
    bugs: Bugs,
}

impl Store {
    pub fn new(etcd: Etcd, bugs: Bugs) -> Self {
        Self {
            etcd,
            epochs: Arc::new(EpochCache::new(bugs.clone())),
            batcher: Arc::new(OnceLock::new()),
            watch_hub: Arc::new(OnceLock::new()),
            bugs,
        }
    }

    /// The group-commit sender (started on first use).
    pub fn batcher(&self) -> &Batcher {
        self.batcher
            .get_or_init(|| Batcher::start(self.etcd.clone(), self.bugs.clone()))
    }

    /// The queue heads' shared watch stream (started on first use).
    pub fn watch_hub(&self) -> &WatchHub {
        self.watch_hub.get_or_init(|| WatchHub::start(self.clone()))
    }

    /// The store under the current epoch (cached, or read and checked now).
    pub async fn sealed(&self) -> Result<Sealed, ArbiterError> {
        let epoch = self.epochs.current(&self.etcd).await?;
        Ok(self.view(epoch))
    }

    /// As [`Store::sealed`], re-reading the epoch record first: after the record was seen
    /// to move, or after a SEALED answer that an epoch advance may have cured.
    pub async fn resealed(&self) -> Result<Sealed, ArbiterError> {
        let epoch = self.epochs.refresh(&self.etcd).await?;
        Ok(self.view(epoch))
    }

    fn view(&self, epoch: Epoch) -> Sealed {
        Sealed {
            etcd: self.etcd.clone(),
            batcher: self.batcher().clone(),
            store: self.clone(),
            epoch,
        }
    }

    /// The seal for a stream's response (keepalive, watch): the cluster ID only, since a
    /// stream's header may come from a member behind a linearizable read's revision. A
    /// mismatch re-reads the record once (it may predate an epoch advance) before refusing.
    async fn check_stream(&self, header: Option<&ResponseHeader>) -> Result<(), ArbiterError> {
        let epoch = self.epochs.current(&self.etcd).await?;
        if epoch.check_header(header).is_ok() {
            return Ok(());
        }
        self.epochs.refresh(&self.etcd).await?.check_header(header)
    }
}

/// The store under one epoch: each response checked before it is returned.
#[derive(Clone)]
pub struct Sealed {
    etcd: Etcd,
    batcher: Batcher,
    /// The store this view came from (its epoch cache, for the checks).
    store: Store,
    epoch: Epoch,
}

impl Sealed {
    pub fn epoch(&self) -> &Epoch {
        &self.epoch
    }

    fn check(&self, header: Option<&ResponseHeader>) -> Result<(), ArbiterError> {
        self.store.epochs.check(&self.epoch, header)
    }

    pub async fn txn(&self, txn: Txn) -> Result<TxnResponse, ArbiterError> {
        let resp = self.etcd.txn(txn).await?;
        self.check(resp.header())?;
        Ok(resp)
    }

    /// A transaction that writes `created_key` when it succeeds (creates it, or overwrites
    /// it in a handoff). Should the header then
    /// fail the seal (the compares cannot see a restore: the restored epoch record is the
    /// same), the key this transaction created is taken back, exactly that version, and the
    /// answer is SEALED: whatever it granted is never handed out.
    pub async fn txn_creating(
        &self,
        txn: Txn,
        created_key: &str,
    ) -> Result<TxnResponse, ArbiterError> {
        let resp = self.etcd.txn(txn).await?;
        if let Err(sealed) = self.check(resp.header()) {
            if resp.succeeded() {
                self.withdraw(created_key, resp.header()).await;
            }
            return Err(sealed);
        }
        Ok(resp)
    }

    /// A grant or release transaction that writes `writes` (about `bytes` of keys and
    /// values), sent in the next group commit (`batch.rs`); its answer passes the seal like
    /// any other.
    pub async fn txn_batched(
        &self,
        txn: Txn,
        writes: Vec<String>,
        bytes: usize,
    ) -> Result<Answer, ArbiterError> {
        let answer = self.batcher.txn(txn, writes, bytes).await?;
        self.check(answer.header())?;
        Ok(answer)
    }

    /// [`Sealed::txn_creating`], sent in the next group commit. `writes` includes
    /// `created_key`.
    pub async fn txn_creating_batched(
        &self,
        txn: Txn,
        created_key: &str,
        writes: Vec<String>,
        bytes: usize,
    ) -> Result<Answer, ArbiterError> {
        let answer = self.batcher.txn(txn, writes, bytes).await?;
        if let Err(sealed) = self.check(answer.header()) {
            if answer.succeeded() {
                self.withdraw(created_key, answer.header()).await;
            }
            return Err(sealed);
        }
        Ok(answer)
    }

    /// Takes back the version of `key` a transaction wrote on a sealed store.
    async fn withdraw(&self, key: &str, header: Option<&ResponseHeader>) {
        let revision = header.map_or(0, ResponseHeader::revision);
        let undo = Txn::new()
            .when(vec![Compare::mod_revision(key, CompareOp::Equal, revision)])
            .and_then(vec![TxnOp::delete(key, None)]);
        if let Err(e) = self.etcd.txn(undo).await {
            tracing::warn!(error = %e, "could not withdraw a write made on a sealed store");
        }
    }

    /// A linearizable read of one key.
    pub async fn get(&self, key: &str) -> Result<GetResponse, ArbiterError> {
        self.range(key, None).await
    }

    pub async fn range(
        &self,
        key: &str,
        options: Option<GetOptions>,
    ) -> Result<GetResponse, ArbiterError> {
        let resp = self.etcd.range(key, options).await?;
        self.check(resp.header())?;
        Ok(resp)
    }

    /// Deletes one key (a waiter leaving its place); the outcome is checked like any other.
    pub async fn delete(&self, key: &str) -> Result<(), ArbiterError> {
        let mut kv = self.etcd.kv();
        let resp = self.etcd.bounded(kv.delete(key, None)).await?;
        self.check(resp.header())
    }

    /// A lease with exactly `id` (None: the id is taken). A lease granted by a store that
    /// fails the seal is revoked again before SEALED is answered.
    pub async fn grant_lease(
        &self,
        ttl_seconds: u32,
        id: i64,
    ) -> Result<Option<i64>, ArbiterError> {
        match self.etcd.grant_lease(ttl_seconds, id).await? {
            LeaseGrant::IdTaken => Ok(None),
            LeaseGrant::Granted(r) => {
                if let Err(sealed) = self.check(r.header()) {
                    let _ = self.etcd.revoke(r.id()).await;
                    return Err(sealed);
                }
                Ok(Some(r.id()))
            }
        }
    }

    /// Revokes a lease. Ok(false): etcd has no such lease. The answer's header is checked
    /// like any other (a revoke on a store that fails the seal is SEALED, though what it
    /// removed is gone either way).
    pub async fn revoke(&self, lease: i64) -> Result<bool, ArbiterError> {
        match self.etcd.revoke(lease).await? {
            Some(r) => self.check(r.header()).map(|()| true),
            None => Ok(false),
        }
    }

    /// Opens a watch stream with its first watch. One stream carries every queue head's
    /// watch (`watch_hub.rs`), so it is not wrapped: the hub checks each response against
    /// this view's epoch (`Epoch::check_header`) before acting on it.
    pub async fn watch_stream(
        &self,
        key: &str,
        options: WatchOptions,
    ) -> Result<WatchStream, ArbiterError> {
        let mut watches = self.etcd.watch_client();
        self.etcd.bounded(watches.watch(key, Some(options))).await
    }

    /// Renews `lease` once on the arbiter's shared keepalive stream (`renewals.rs`); the
    /// answer's header has passed the seal.
    pub async fn renew(&self, lease: i64) -> Result<LeaseKeepAliveResponse, ArbiterError> {
        let resp = self.etcd.renewals().renew(lease).await?;
        self.store.check_stream(resp.header()).await?;
        Ok(resp)
    }
}
