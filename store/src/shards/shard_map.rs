//! The shard map's I/O (ADR-07, 09): the document on the coord cluster, its cached copy in
//! every arbiter (kept by a watch, re-read on demand), each shard's fence at
//! `/sys/shard-fence`, and epoch numbers allocated from the coord cluster. The decisions are
//! pure, in `lock_config::shards` ([`placement`](lock_config::shards::placement)) and, for
//! epochs, `epoch::next`.

use crate::connection::etcd::Etcd;
use crate::epoch::next::{self, Coord, Estate};
use crate::error::{Contended, EpochRefused, MapError, Record, StoreError};
use crate::records::layout::{
    EPOCH_ALLOCATOR_KEY, EPOCH_KEY, EpochAllocator, EpochRecord, SHARD_FENCE_KEY, SHARDS_KEY,
    decode, encode,
};
use arc_swap::ArcSwapOption;
use etcd_client::{Compare, CompareOp, EventType, Txn, TxnOp, WatchOptions};
use lock_config::shards::{ShardFence, ShardsDoc};
use std::sync::Arc;
use std::time::Duration;

/// Bounded retries of a compare-and-put that lost to a concurrent writer.
const CAS_ATTEMPTS: usize = 8;

/// The document and the mod revision it was read at (None: no document).
pub async fn read_doc(coord: &Etcd) -> Result<Option<(ShardsDoc, i64)>, StoreError> {
    let resp = coord.get(SHARDS_KEY).await?;
    let Some(kv) = resp.kvs().first() else {
        return Ok(None);
    };
    let doc = serde_json::from_slice::<ShardsDoc>(kv.value())
        .map_err(|e| StoreError::Undecodable(Record::ShardMap(e)))?;
    Ok(Some((doc, kv.mod_revision())))
}

/// Writes `doc` if the document is still at `expected` (0: absent). Ok(false): it moved.
pub async fn write_doc(coord: &Etcd, doc: &ShardsDoc, expected: i64) -> Result<bool, StoreError> {
    doc.current
        .validate()
        .map_err(|e| StoreError::Map(MapError::Invalid(e)))?;
    if let Some(p) = &doc.pending {
        p.validate()
            .map_err(|e| StoreError::Map(MapError::InvalidNext(e)))?;
    }
    let txn = Txn::new()
        .when(vec![Compare::mod_revision(
            SHARDS_KEY,
            CompareOp::Equal,
            expected,
        )])
        .and_then(vec![TxnOp::put(SHARDS_KEY, encode(doc), None)]);
    Ok(coord.txn(txn).await?.succeeded())
}

/// A fresh epoch number above every one handed out so far and above `at_least`
/// ([`next::above`]): a shard's first epoch, a move's advance, break-glass.
pub async fn allocate_epoch(coord: &Etcd, at_least: u16) -> Result<u16, StoreError> {
    allocate_with(coord, |last| {
        next::above(last.unwrap_or(0), at_least).ok_or(())
    })
    .await?
    .map_err(|()| StoreError::Epoch(EpochRefused::Exhausted))
}

/// The epoch of lock-admin's two-person advance from `from` ([`next::allocation`]): as
/// [`allocate_epoch`], but refused, with nothing written, when the allocator stands below
/// `from`. Outer error: the store; inner: the refusal.
pub async fn allocate_for_advance(
    coord: &Etcd,
    from: u16,
) -> Result<Result<u16, next::Refused>, StoreError> {
    allocate_with(coord, |last| next::allocation(last, from)).await
}

/// The allocator's compare-and-put, retried while it loses to a concurrent allocation:
/// `step` decides the epoch from the allocator's last (None: no record yet); a refusal
/// writes nothing. Every epoch it returns is in the store before any cluster uses it, so
/// an advance that then fails leaves a gap, never a number handed out twice.
async fn allocate_with<E>(
    coord: &Etcd,
    step: impl Fn(Option<u16>) -> Result<u16, E>,
) -> Result<Result<u16, E>, StoreError> {
    for _ in 0..CAS_ATTEMPTS {
        let resp = coord.get(EPOCH_ALLOCATOR_KEY).await?;
        let (last, revision) = match resp.kvs().first() {
            Some(kv) => (
                Some(
                    decode::<EpochAllocator>(kv.value())
                        .ok_or(StoreError::Undecodable(Record::EpochAllocator))?
                        .last,
                ),
                kv.mod_revision(),
            ),
            None => (None, 0),
        };
        let next = match step(last) {
            Ok(n) => n,
            Err(refused) => return Ok(Err(refused)),
        };
        let txn = Txn::new()
            .when(vec![Compare::mod_revision(
                EPOCH_ALLOCATOR_KEY,
                CompareOp::Equal,
                revision,
            )])
            .and_then(vec![TxnOp::put(
                EPOCH_ALLOCATOR_KEY,
                encode(&EpochAllocator { last: next }),
                None,
            )]);
        if coord.txn(txn).await?.succeeded() {
            return Ok(Ok(next));
        }
    }
    Err(StoreError::Contended(Contended::EpochAllocator))
}

/// What [`next::source`] decides on, read: whether `cluster` is an entity shard (its
/// fence), and what the coord cluster holds (its map, its allocator). The coord cluster is
/// `coord` when given, else `cluster` itself when it holds the map or the allocator.
pub async fn read_estate(cluster: &Etcd, coord: Option<&Etcd>) -> Result<Estate, StoreError> {
    let shard = read_fence(cluster).await?.map(|(f, _)| f.name);
    let coord = match coord {
        Some(c) => Some(read_coord(c).await?),
        None => Some(read_coord(cluster).await?).filter(|c| c.map || c.allocator.is_some()),
    };
    Ok(Estate { shard, coord })
}

async fn read_coord(coord: &Etcd) -> Result<Coord, StoreError> {
    let map = coord.get(SHARDS_KEY).await?.count() > 0;
    let resp = coord.get(EPOCH_ALLOCATOR_KEY).await?;
    let allocator = match resp.kvs().first() {
        Some(kv) => Some(
            decode::<EpochAllocator>(kv.value())
                .ok_or(StoreError::Undecodable(Record::EpochAllocator))?
                .last,
        ),
        None => None,
    };
    Ok(Coord { map, allocator })
}

/// A shard's epoch record (and its mod revision).
pub async fn read_epoch(shard: &Etcd) -> Result<Option<(EpochRecord, i64)>, StoreError> {
    let resp = shard.get(EPOCH_KEY).await?;
    Ok(resp
        .kvs()
        .first()
        .and_then(|kv| decode::<EpochRecord>(kv.value()).map(|r| (r, kv.mod_revision()))))
}

/// Whether this credential may write `/sys/epoch` on `etcd`, asked without writing: a Txn
/// whose compare never holds, with the put in its success branch. etcd checks a Txn's
/// permissions on both branches before evaluating it, so an operator's certificate is
/// refused here exactly as its advance would be.
pub async fn may_write_epoch(etcd: &Etcd) -> Result<bool, StoreError> {
    let probe = Txn::new()
        .when(vec![Compare::mod_revision(EPOCH_KEY, CompareOp::Less, 0)])
        .and_then(vec![TxnOp::put(EPOCH_KEY, "", None)]);
    match etcd.kv().txn(probe).await {
        Ok(_) => Ok(true),
        Err(etcd_client::Error::GRpcStatus(s)) if s.code() == tonic::Code::PermissionDenied => {
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

/// A shard's map fence (and its mod revision; 0: none).
pub async fn read_fence(shard: &Etcd) -> Result<Option<(ShardFence, i64)>, StoreError> {
    let resp = shard.get(SHARD_FENCE_KEY).await?;
    match resp.kvs().first() {
        None => Ok(None),
        Some(kv) => decode::<ShardFence>(kv.value())
            .map(|f| Some((f, kv.mod_revision())))
            .ok_or(StoreError::Undecodable(Record::ShardFence)),
    }
}

/// Writes a shard's fence. Every grant, handoff and release on that shard compares it, so
/// from this write on no arbiter writes there under an older view of the map. Refused
/// when the cluster already carries another shard's fence.
pub async fn write_fence(shard: &Etcd, fence: ShardFence) -> Result<ShardFence, StoreError> {
    for _ in 0..CAS_ATTEMPTS {
        let revision = match read_fence(shard).await? {
            Some((f, _)) if f.name != fence.name => {
                return Err(StoreError::Map(MapError::WrongShard {
                    given: fence.name,
                    is: f.name,
                }));
            }
            Some((_, rev)) => rev,
            None => 0,
        };
        let txn = Txn::new()
            .when(vec![Compare::mod_revision(
                SHARD_FENCE_KEY,
                CompareOp::Equal,
                revision,
            )])
            .and_then(vec![TxnOp::put(SHARD_FENCE_KEY, encode(&fence), None)]);
        if shard.txn(txn).await?.succeeded() {
            return Ok(fence);
        }
    }
    Err(StoreError::Contended(Contended::ShardFence(fence.name)))
}

/// The document as this arbiter last saw it: kept by a watch on the coord cluster and
/// re-read whenever a shard's fence names a version it does not have. The fence, not this
/// copy, is what makes a grant safe; the copy only has to catch up.
pub struct DocCache {
    coord: Etcd,
    doc: ArcSwapOption<ShardsDoc>,
    /// Debug-only bug `shard-fence-off`: the watch's news is dropped (an arbiter cut off
    /// from the coord cluster), so only the fence could tell it the map moved.
    frozen: bool,
}

impl DocCache {
    pub async fn load(coord: Etcd, frozen: bool) -> Result<Arc<Self>, StoreError> {
        let doc = read_doc(&coord).await?.map(|(d, _)| Arc::new(d));
        Ok(Arc::new(Self {
            coord,
            doc: ArcSwapOption::new(doc),
            frozen,
        }))
    }

    pub fn get(&self) -> Option<Arc<ShardsDoc>> {
        self.doc.load_full()
    }

    /// A linearizable re-read (after a fence named a version this copy lacks).
    pub async fn refresh(&self) -> Result<Option<Arc<ShardsDoc>>, StoreError> {
        if self.frozen {
            return Ok(self.get());
        }
        let doc = read_doc(&self.coord).await?.map(|(d, _)| Arc::new(d));
        self.doc.store(doc.clone());
        Ok(doc)
    }

    /// Keeps the copy current from a watch on the coord cluster; reconnects (bounded
    /// back-off) when the stream ends, re-reading the document each time so nothing
    /// written while it was down is missed.
    pub async fn watch(self: Arc<Self>) {
        let mut backoff = Duration::from_millis(100);
        loop {
            if let Err(e) = self.watch_once().await {
                tracing::warn!(error = %e, "shard map watch ended; reconnecting");
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }

    async fn watch_once(&self) -> Result<(), StoreError> {
        let mut watches = self.coord.watch_client();
        let mut stream = watches
            .watch(SHARDS_KEY, Some(WatchOptions::new()))
            .await
            .map_err(StoreError::from)?;
        self.refresh().await?;
        while let Some(resp) = stream.message().await.map_err(StoreError::from)? {
            if self.frozen {
                continue;
            }
            for event in resp.events() {
                let doc = match (event.event_type(), event.kv()) {
                    (EventType::Put, Some(kv)) => serde_json::from_slice::<ShardsDoc>(kv.value())
                        .ok()
                        .map(Arc::new),
                    _ => None,
                };
                tracing::info!(
                    version = doc.as_ref().map(|d| d.current.version),
                    pending = doc
                        .as_ref()
                        .and_then(|d| d.pending.as_ref().map(|p| p.version)),
                    "shard map changed"
                );
                self.doc.store(doc);
            }
        }
        Ok(())
    }
}
