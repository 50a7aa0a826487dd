//! The store as request paths see it: etcd behind the seal (ADR-03).
//!
//! [`Store::sealed`] returns a [`Sealed`] view bound to the epoch as of now. Every response
//! it hands back has passed the seal on its header (the cluster ID the epoch was minted for,
//! and the revision floor this arbiter has seen), so no call site can forget the check:
//! grants, releases, reads, session calls, durable queue reads, watches and keepalives all
//! come through here. A failed check is SEALED and makes the next call re-read the epoch
//! record.

use crate::bugs::Bugs;
use crate::epoch::{Epoch, EpochCache};
use crate::error::ArbiterError;
use crate::etcd::{Etcd, LeaseGrant};
use etcd_client::{
    Compare, CompareOp, GetOptions, GetResponse, LeaseKeepAliveResponse, LeaseKeepAliveStream,
    LeaseKeeper, ResponseHeader, Txn, TxnOp, TxnResponse, WatchOptions, WatchResponse, WatchStream,
};
use std::sync::Arc;

#[derive(Clone)]
pub struct Store {
    etcd: Etcd,
    epochs: Arc<EpochCache>,
}

impl Store {
    pub fn new(etcd: Etcd, bugs: Bugs) -> Self {
        Self {
            etcd,
            epochs: Arc::new(EpochCache::new(bugs)),
        }
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
            epochs: self.epochs.clone(),
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
    epochs: Arc<EpochCache>,
    epoch: Epoch,
}

impl Sealed {
    pub fn epoch(&self) -> &Epoch {
        &self.epoch
    }

    fn check(&self, header: Option<&ResponseHeader>) -> Result<(), ArbiterError> {
        self.epochs.check(&self.epoch, header)
    }

    pub async fn txn(&self, txn: Txn) -> Result<TxnResponse, ArbiterError> {
        let resp = self.etcd.txn(txn).await?;
        self.check(resp.header())?;
        Ok(resp)
    }

    /// A transaction that creates `created_key` when it succeeds. Should the header then
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
                let revision = resp.header().map_or(0, ResponseHeader::revision);
                let undo = Txn::new()
                    .when(vec![Compare::create_revision(
                        created_key,
                        CompareOp::Equal,
                        revision,
                    )])
                    .and_then(vec![TxnOp::delete(created_key, None)]);
                if let Err(e) = self.etcd.txn(undo).await {
                    tracing::warn!(error = %e, "could not withdraw a write made on a sealed store");
                }
            }
            return Err(sealed);
        }
        Ok(resp)
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

    /// Opens a watch; each response it yields has passed the cluster-ID seal.
    pub async fn watch(
        &self,
        key: &str,
        options: WatchOptions,
    ) -> Result<SealedWatch, ArbiterError> {
        let mut watches = self.etcd.watch_client();
        let stream = self.etcd.bounded(watches.watch(key, Some(options))).await?;
        Ok(SealedWatch {
            stream,
            epoch: self.epoch.clone(),
        })
    }

    /// Opens an etcd keepalive stream for `lease`; each renewal it returns has passed the
    /// cluster-ID seal.
    pub async fn keep_alive(&self, lease: i64) -> Result<SealedKeeper, ArbiterError> {
        let mut leases = self.etcd.lease();
        let (keeper, stream) = self.etcd.bounded(leases.keep_alive(lease)).await?;
        Ok(SealedKeeper {
            store: Store {
                etcd: self.etcd.clone(),
                epochs: self.epochs.clone(),
            },
            keeper,
            stream,
        })
    }
}

/// A watch whose responses are checked against the epoch it was opened under.
pub struct SealedWatch {
    stream: WatchStream,
    epoch: Epoch,
}

impl SealedWatch {
    /// The next response; None when the stream ended. A response from another cluster is
    /// SEALED (a watch only wakes a waiter; the grant that follows is checked in full).
    pub async fn next(&mut self) -> Result<Option<WatchResponse>, ArbiterError> {
        let Some(resp) = self.stream.message().await? else {
            return Ok(None);
        };
        self.epoch.check_header(resp.header())?;
        Ok(Some(resp))
    }
}

/// One lease's etcd keepalive stream.
pub struct SealedKeeper {
    store: Store,
    keeper: LeaseKeeper,
    stream: LeaseKeepAliveStream,
}

impl SealedKeeper {
    /// One renewal, bounded; the answer's header has passed the seal.
    pub async fn renew(&mut self) -> Result<LeaseKeepAliveResponse, ArbiterError> {
        let etcd = &self.store.etcd;
        etcd.bounded(self.keeper.keep_alive()).await?;
        let resp = etcd
            .bounded(self.stream.message())
            .await?
            .ok_or(ArbiterError::NoQuorum)?;
        self.store.check_stream(resp.header()).await?;
        Ok(resp)
    }
}
