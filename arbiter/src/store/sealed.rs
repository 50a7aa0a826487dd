//! The store as request paths see it: etcd behind the seal (ADR-03).
//!
//! [`Store::sealed`] returns a [`Sealed`] view bound to the epoch as of now. Every response
//! it hands back has passed the seal on its header (the cluster ID the epoch was minted for,
//! and the revision floor this arbiter has seen), so no call site can forget the check:
//! grants, releases, reads, session calls, durable queue reads, watches and keepalives all
//! come through here. A failed check is SEALED and makes the next call re-read the epoch
//! record.

use crate::error::ArbiterError;
use crate::ops::bugs::{Bug, Bugs};
use crate::store::batch::Batcher;
use crate::store::epoch::{Epoch, EpochCache};
use crate::store::etcd::{Etcd, LeaseGrant};
use crate::store::shard_map::DocCache;
use crate::store::txn::{TxnAnswer, TxnBuilder};
use crate::store::watch_hub::{StreamSource, WatchHub};
use etcd_client::{
    Compare, CompareOp, GetOptions, GetResponse, LeaseKeepAliveResponse, ResponseHeader, Txn,
    TxnOp, WatchOptions, WatchStream,
};
use lock_config::LockKey;
use lock_config::shards::{Placement, ShardsDoc, placement};
use std::sync::{Arc, OnceLock};

#[derive(Clone)]
pub struct Store {
    etcd: Etcd,
    epochs: Arc<EpochCache>,
    /// Group commit of grant and release transactions, started on first use (inside the
    /// runtime).
    batcher: Arc<OnceLock<Batcher>>,
    /// The one watch stream of every waiting queue head and every Observe, started on
    /// first use.
    watch_hub: Arc<OnceLock<WatchHub>>,
    bugs: Bugs,
    /// With several clusters: the tag of this cluster's session ids (`sessions.rs`).
    tag: Option<u8>,
    /// On an entity shard: which one, and the shard map document (`admit`).
    shard: Option<Arc<ShardRole>>,
}

/// An entity shard's part in the map.
pub struct ShardRole {
    pub name: String,
    pub doc: Arc<DocCache>,
}

impl ShardRole {
    /// The placement of `key` by the fence in `sealed`'s epoch record and `doc`.
    fn decide(
        &self,
        sealed: &Sealed,
        key: &LockKey,
        doc: Option<&ShardsDoc>,
    ) -> Result<Placement, ArbiterError> {
        let fence = sealed.epoch().fence.as_deref().ok_or_else(|| {
            ArbiterError::Sealed(format!(
                "shard {} has no map fence (/sys/shard-fence): run `lockctl shards init`",
                self.name
            ))
        })?;
        if fence.name != self.name {
            return Err(ArbiterError::Sealed(format!(
                "the cluster configured as shard {} carries shard {}'s fence",
                self.name, fence.name
            )));
        }
        Ok(doc.map_or(Placement::StaleDoc, |d| placement(d, fence, key.as_str())))
    }
}

impl Store {
    pub fn new(etcd: Etcd, bugs: Bugs) -> Self {
        Self {
            etcd,
            epochs: Arc::new(EpochCache::new(bugs.clone())),
            batcher: Arc::new(OnceLock::new()),
            watch_hub: Arc::new(OnceLock::new()),
            bugs,
            tag: None,
            shard: None,
        }
    }

    /// One of several clusters: its session ids carry `tag`; on an entity shard, grants
    /// are admitted by the shard's own fence (`admit`).
    pub fn for_cluster(etcd: Etcd, bugs: Bugs, tag: u8, shard: Option<ShardRole>) -> Self {
        Self {
            tag: Some(tag),
            shard: shard.map(Arc::new),
            ..Self::new(etcd, bugs)
        }
    }

    /// The tag of this cluster's session ids (None: the only cluster).
    pub fn lease_tag(&self) -> Option<u8> {
        self.tag
    }

    /// May `key` be granted here? Returns the view to grant under. On an entity shard the
    /// epoch record carries the map version the shard serves (its fence), and the grant
    /// transaction compares that record unchanged: a grant admitted here was made under
    /// that map, whatever any arbiter's copy of the document says. A refusal is checked
    /// once more against a fresh document and a fresh record (the cached record may
    /// predate the move's last step, and no transaction would run to notice). Elsewhere:
    /// the key's session must be opened where the map homes it. Moving, or a document
    /// that cannot catch up: MOVING.
    pub async fn admit(&self, sealed: Sealed, key: &LockKey) -> Result<Sealed, ArbiterError> {
        let Some(role) = &self.shard else {
            return Ok(sealed);
        };
        if self.bugs.has(Bug::ShardFenceOff) {
            return Ok(sealed);
        }
        let verdict = role.decide(&sealed, key, role.doc.get().as_deref())?;
        if verdict == Placement::Here {
            return Ok(sealed);
        }
        let doc = role.doc.refresh().await?;
        let sealed = self.resealed().await?;
        match role.decide(&sealed, key, doc.as_deref())? {
            Placement::Here => Ok(sealed),
            Placement::Elsewhere(cluster) => Err(ArbiterError::WrongSessionPlace { cluster }),
            Placement::Moving | Placement::StaleDoc => Err(ArbiterError::Moving),
        }
    }

    /// [`Store::admit`] on the view at hand, without re-reading anything: may a release
    /// hand `key` on here (a handoff is a grant)? When unsure, no: the release is plain.
    pub fn admits(&self, sealed: &Sealed, key: &LockKey) -> bool {
        match &self.shard {
            None => true,
            Some(_) if self.bugs.has(Bug::ShardFenceOff) => true,
            Some(role) => {
                role.decide(sealed, key, role.doc.get().as_deref()).ok() == Some(Placement::Here)
            }
        }
    }

    /// The bugs injected into this process (debug builds only).
    pub fn bugs(&self) -> &Bugs {
        &self.bugs
    }

    /// The group-commit sender (started on first use).
    pub fn batcher(&self) -> &Batcher {
        self.batcher
            .get_or_init(|| Batcher::start(self.etcd.clone(), self.bugs.clone()))
    }

    /// The one watch stream shared by queue heads and Observe streams (started on first
    /// use).
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

/// The watch hub's stream opens under the epoch current when it opens: a response from
/// another cluster breaks it, the heads' grants answer SEALED and the Observes resume.
impl StreamSource for Store {
    async fn open(
        &self,
        key: &str,
        options: WatchOptions,
    ) -> Result<(Epoch, WatchStream), ArbiterError> {
        let sealed = self.sealed().await?;
        let stream = sealed.watch_stream(key, options).await?;
        Ok((sealed.epoch().clone(), stream))
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

    pub async fn txn(&self, txn: TxnBuilder) -> Result<TxnAnswer, ArbiterError> {
        let (txn, _) = txn.into_parts();
        let resp = TxnAnswer::from(&self.etcd.txn(txn).await?);
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
        txn: TxnBuilder,
        created_key: &str,
    ) -> Result<TxnAnswer, ArbiterError> {
        self.txn_creating_all(txn, std::slice::from_ref(&created_key))
            .await
    }

    /// [`Sealed::txn_creating`] for a transaction that creates several keys (a set's
    /// grant): on a sealed store each is taken back, exactly that version.
    pub async fn txn_creating_all(
        &self,
        txn: TxnBuilder,
        created_keys: &[impl AsRef<str>],
    ) -> Result<TxnAnswer, ArbiterError> {
        let (txn, _) = txn.into_parts();
        let resp = TxnAnswer::from(&self.etcd.txn(txn).await?);
        if let Err(sealed) = self.check(resp.header()) {
            if resp.succeeded() {
                for key in created_keys {
                    self.withdraw(key.as_ref(), resp.header()).await;
                }
            }
            return Err(sealed);
        }
        Ok(resp)
    }

    /// A grant or release transaction, sent in the next group commit (`batch.rs`) with the
    /// keys it writes and its size as the builder reckons them; its answer passes the seal
    /// like any other.
    pub async fn txn_batched(&self, txn: TxnBuilder) -> Result<TxnAnswer, ArbiterError> {
        let bytes = txn.bytes();
        let (txn, writes) = txn.into_parts();
        let answer = self.batcher.txn(txn, writes, bytes).await?;
        self.check(answer.header())?;
        Ok(answer)
    }

    /// [`Sealed::txn_creating`], sent in the next group commit. The builder's writes
    /// include `created_key`.
    pub async fn txn_creating_batched(
        &self,
        txn: TxnBuilder,
        created_key: &str,
    ) -> Result<TxnAnswer, ArbiterError> {
        let bytes = txn.bytes();
        let (txn, writes) = txn.into_parts();
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
    /// and every Observe's watch (`watch_hub.rs`), so it is not wrapped: the hub checks
    /// each response against this view's epoch (`Epoch::check_header`) before acting on it.
    pub async fn watch_stream(
        &self,
        key: &str,
        options: WatchOptions,
    ) -> Result<WatchStream, ArbiterError> {
        let mut watches = self.etcd.watch_client();
        Ok(self.etcd.bounded(watches.watch(key, Some(options))).await?)
    }

    /// Renews `lease` once on the arbiter's shared keepalive stream (`renewals.rs`); the
    /// answer's header has passed the seal.
    pub async fn renew(&self, lease: i64) -> Result<LeaseKeepAliveResponse, ArbiterError> {
        let resp = self.etcd.renewals().renew(lease).await?;
        self.store.check_stream(resp.header()).await?;
        Ok(resp)
    }
}
