//! The epoch record and the seal (ADR-03).
//!
//! Every grant compares `/sys/epoch` unchanged (its mod revision) in the same transaction,
//! and every response header's cluster ID is compared with the one the epoch was minted for:
//! a restored cluster has a new cluster ID, so it is sealed until `lockctl epoch advance`.

use crate::error::ArbiterError;
use crate::layout::{EPOCH_KEY, EpochRecord, decode, encode};
use crate::store::Store;
use etcd_client::{Compare, CompareOp, ResponseHeader, Txn, TxnOp};
use std::sync::RwLock;

/// The epoch as last read, with the mod revision grants compare against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Epoch {
    pub record: EpochRecord,
    pub mod_revision: i64,
}

impl Epoch {
    /// The seal: refuse to serve from a store whose cluster ID is not the epoch's.
    pub fn check_header(&self, header: Option<&ResponseHeader>) -> Result<(), ArbiterError> {
        let id = header.map(|h| EpochRecord::cluster_id_hex(h.cluster_id()));
        if id.as_deref() == Some(self.record.cluster_id.as_str()) {
            Ok(())
        } else {
            Err(ArbiterError::Sealed(format!(
                "store cluster ID {} differs from the epoch record's {}; an epoch advance is required",
                id.unwrap_or_default(),
                self.record.cluster_id
            )))
        }
    }
}

/// Cached epoch; never held across an await.
#[derive(Default)]
pub struct EpochCache {
    current: RwLock<Option<Epoch>>,
}

impl EpochCache {
    pub fn get(&self) -> Option<Epoch> {
        self.current.read().ok().and_then(|g| g.clone())
    }

    fn set(&self, e: Option<Epoch>) {
        if let Ok(mut g) = self.current.write() {
            *g = e;
        }
    }

    /// The cached epoch, or a fresh read if none is cached.
    pub async fn current(&self, store: &Store) -> Result<Epoch, ArbiterError> {
        match self.get() {
            Some(e) => Ok(e),
            None => self.refresh(store).await,
        }
    }

    /// Re-reads the epoch record and checks the seal on the read itself.
    pub async fn refresh(&self, store: &Store) -> Result<Epoch, ArbiterError> {
        let resp = store.get(EPOCH_KEY).await?;
        let epoch = resp.kvs().first().and_then(|kv| {
            decode::<EpochRecord>(kv.value()).map(|record| Epoch {
                record,
                mod_revision: kv.mod_revision(),
            })
        });
        self.set(epoch.clone());
        let epoch = epoch.ok_or_else(|| {
            ArbiterError::Sealed("no epoch record: run `lockctl epoch init`".to_owned())
        })?;
        epoch.check_header(resp.header())?;
        Ok(epoch)
    }
}

/// `lockctl epoch init`: creates epoch 1 bound to the current cluster ID, if absent.
/// Returns the record now in the store and whether this call created it.
pub async fn init(store: &Store) -> Result<(EpochRecord, bool), ArbiterError> {
    // The cluster ID comes from the header of a read; the Txn's own header confirms it.
    let probe = store.get(EPOCH_KEY).await?;
    if let Some(kv) = probe.kvs().first() {
        let rec = decode::<EpochRecord>(kv.value())
            .ok_or_else(|| ArbiterError::Store("epoch record is not decodable".into()))?;
        return Ok((rec, false));
    }
    let cluster = probe
        .header()
        .map(|h| EpochRecord::cluster_id_hex(h.cluster_id()))
        .ok_or_else(|| ArbiterError::Store("response without header".into()))?;
    let record = EpochRecord {
        epoch: 1,
        cluster_id: cluster.clone(),
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
        return Err(ArbiterError::Store(
            "cluster ID changed between read and write".into(),
        ));
    }
    if !resp.succeeded() {
        // Someone else initialised it concurrently: report theirs.
        return Box::pin(init(store)).await;
    }
    Ok((record, true))
}
