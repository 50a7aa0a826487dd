//! The seal (ADR-03), on the epoch record `lock_store::epoch` writes and advances.
//!
//! Every grant compares `/sys/epoch` unchanged (its mod revision) in the same transaction,
//! and every response header's cluster ID is compared with the one the epoch was minted for:
//! a restored cluster has a new cluster ID, so it is sealed until `lockctl epoch advance`.

use crate::error::ArbiterError;
use crate::ops::bugs::{Bug, Bugs};
use crate::store::etcd::Etcd;
use crate::store::layout::{EPOCH_KEY, EpochRecord, SHARD_FENCE_KEY, decode};
use etcd_client::{Compare, CompareOp, KeyValue, ResponseHeader};
use lock_config::shards::ShardFence;
use std::sync::{Arc, RwLock};

/// The epoch as last read, with the mod revision grants compare against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Epoch {
    /// Shared: every store view of a request carries the epoch, and the record holds
    /// strings (issue 33: a clone per view allocated).
    pub record: Arc<EpochRecord>,
    pub mod_revision: i64,
    /// On an entity shard: its map fence (`/sys/shard-fence`), read with the record;
    /// every write that compares the record compares this too.
    pub fence: Option<Arc<ShardFence>>,
    pub fence_mod_revision: i64,
    /// The highest revision this arbiter had seen in this epoch when the operation began.
    /// A linearizable response to a request sent afterwards cannot be older; responses of
    /// concurrent requests may complete out of order, so the floor is taken per operation.
    pub floor: i64,
    /// Debug-only bug `seal-without-cluster-id`: the cluster-ID compare is skipped, so the
    /// restore drill can show it is what seals a freshly started arbiter.
    skip_cluster_id: bool,
}

impl Epoch {
    /// The compare that fences a write by this shard's map version (None off a shard).
    pub fn fence_compare(&self) -> Option<Compare> {
        self.fence.as_ref().map(|_| {
            Compare::mod_revision(SHARD_FENCE_KEY, CompareOp::Equal, self.fence_mod_revision)
        })
    }

    /// The key a failed write reads to tell whether the fence moved (None off a shard).
    pub fn fence_key(&self) -> Option<&'static str> {
        self.fence.as_ref().map(|_| SHARD_FENCE_KEY)
    }

    /// Whether a failure branch's read of the fence (`seen`, of [`Epoch::fence_key`])
    /// shows it unchanged. Off a shard there is no fence to move.
    pub fn fence_unchanged(&self, seen: Option<&KeyValue>) -> bool {
        self.fence.is_none() || seen.map(KeyValue::mod_revision) == Some(self.fence_mod_revision)
    }

    /// The seal: refuse to serve from a store whose cluster ID is not the epoch's.
    pub fn check_header(&self, header: Option<&ResponseHeader>) -> Result<(), ArbiterError> {
        if self.skip_cluster_id {
            return Ok(());
        }
        cluster_id_verdict(&self.record, header.map(ResponseHeader::cluster_id))
    }
}

#[cfg(test)]
impl Epoch {
    /// Epoch 3 as a read of its record at `mod_revision` makes it; on a shard, with its
    /// fence at `fence_mod_revision` (for tests that build transactions without etcd).
    pub(crate) fn for_tests(mod_revision: i64, fence_mod_revision: Option<i64>) -> Self {
        Self {
            record: Arc::new(EpochRecord {
                advanced_by: None,
                epoch: 3,
                cluster_id: EpochRecord::cluster_id_hex(0xcdf8_1819_4e3a_8c32),
            }),
            mod_revision,
            fence: fence_mod_revision.map(|_| {
                Arc::new(ShardFence {
                    name: "s1".to_owned(),
                    version: 1,
                    pending: None,
                })
            }),
            fence_mod_revision: fence_mod_revision.unwrap_or(0),
            floor: 0,
            skip_cluster_id: false,
        }
    }
}

/// The cluster-ID half of the seal, on plain data: `header_cluster` is the cluster ID of a
/// response header (None: the response had no header, which proves nothing: sealed).
pub fn cluster_id_verdict(
    record: &EpochRecord,
    header_cluster: Option<u64>,
) -> Result<(), ArbiterError> {
    // Compared as numbers: this runs on every etcd response, and formatting the header's
    // ID to compare strings allocated each time.
    let recorded = u64::from_str_radix(&record.cluster_id, 16).ok();
    if header_cluster.is_some() && header_cluster == recorded {
        Ok(())
    } else {
        let id = header_cluster.map(EpochRecord::cluster_id_hex);
        Err(ArbiterError::Sealed(format!(
            "store cluster ID {} differs from the epoch record's {}; an epoch advance is required",
            id.unwrap_or_default(),
            record.cluster_id
        )))
    }
}

/// The revision half: a store revision below `floor`, the highest this arbiter already saw
/// in the record's epoch, means the store went back in time (a restore that kept the
/// cluster ID).
pub fn revision_verdict(
    record: &EpochRecord,
    floor: i64,
    revision: i64,
) -> Result<(), ArbiterError> {
    if revision < floor {
        return Err(ArbiterError::Sealed(format!(
            "store revision {revision} is below {floor} already seen in epoch {}: restored without a new cluster ID? an epoch advance is required",
            record.epoch
        )));
    }
    Ok(())
}

/// Cached epoch; never held across an await.
///
/// Besides the cluster-ID seal, the cache keeps a second guard: the highest header revision
/// seen under the current epoch number. etcd revisions never go backwards within one
/// cluster's life, so a lower one means the store was restored without a new cluster ID (a
/// naive `etcdutl snapshot restore` with the original flags keeps it, DESIGN 8). This guard
/// lives in the arbiter's memory: it catches such a restore only while an arbiter that saw
/// the higher revisions is running. The epoch advance (a higher epoch) resets it.
#[derive(Default)]
pub struct EpochCache {
    current: RwLock<Option<Epoch>>,
    /// (epoch number, highest revision seen under it).
    high_water: std::sync::Mutex<(u16, i64)>,
    /// Deliberate bugs (debug builds only; see `bugs.rs`).
    bugs: Bugs,
}

impl EpochCache {
    pub fn new(bugs: Bugs) -> Self {
        Self {
            bugs,
            ..Self::default()
        }
    }

    /// The seal and the revision guard, on one response header.
    /// A failed check forgets the cached epoch, so the next request re-reads the record
    /// (and serves again once an epoch advance has bound it to the store).
    pub fn check(
        &self,
        epoch: &Epoch,
        header: Option<&ResponseHeader>,
    ) -> Result<(), ArbiterError> {
        let r = self.check_inner(epoch, header);
        if r.is_err() {
            self.set(None);
        }
        r
    }

    fn check_inner(
        &self,
        epoch: &Epoch,
        header: Option<&ResponseHeader>,
    ) -> Result<(), ArbiterError> {
        epoch.check_header(header)?;
        let revision = header.map_or(0, ResponseHeader::revision);
        revision_verdict(&epoch.record, epoch.floor, revision)?;
        if let Ok(mut hw) = self.high_water.lock() {
            if epoch.record.epoch > hw.0 {
                *hw = (epoch.record.epoch, revision);
            } else if epoch.record.epoch == hw.0 {
                hw.1 = hw.1.max(revision);
            }
        }
        Ok(())
    }

    fn get(&self) -> Option<Epoch> {
        self.current.read().ok().and_then(|g| g.clone())
    }

    fn set(&self, e: Option<Epoch>) {
        if let Ok(mut g) = self.current.write() {
            *g = e;
        }
    }

    /// The cached epoch (or a fresh read), with the revision floor as of now.
    pub async fn current(&self, store: &Etcd) -> Result<Epoch, ArbiterError> {
        match self.get() {
            Some(mut e) => {
                e.floor = self.floor(e.record.epoch);
                Ok(e)
            }
            None => self.refresh(store).await,
        }
    }

    /// The highest revision seen so far in `epoch` (0 if none).
    fn floor(&self, epoch: u16) -> i64 {
        self.high_water
            .lock()
            .map_or(0, |hw| if hw.0 == epoch { hw.1 } else { 0 })
    }

    /// Re-reads the epoch record and the shard fence and checks the seal on the read
    /// itself.
    pub async fn refresh(&self, store: &Etcd) -> Result<Epoch, ArbiterError> {
        // Taken before the read: the read's revision may not be below it.
        let floors = self.high_water.lock().map_or((0, 0), |hw| *hw);
        // Two reads, not one Txn: the record and the fence are compared each by its own mod
        // revision, so they need not be read at one revision (a fence that moved between
        // the reads fails the next compare, which re-reads both).
        let resp = store.get(EPOCH_KEY).await?;
        let fence_resp = store.get(SHARD_FENCE_KEY).await?;
        let fence = fence_resp.kvs().first().and_then(|kv| {
            decode::<ShardFence>(kv.value()).map(|f| (Arc::new(f), kv.mod_revision()))
        });
        let epoch = resp.kvs().first().and_then(|kv| {
            decode::<EpochRecord>(kv.value())
                .map(Arc::new)
                .map(|record| Epoch {
                    floor: if floors.0 == record.epoch {
                        floors.1
                    } else {
                        0
                    },
                    record,
                    mod_revision: kv.mod_revision(),
                    fence: fence.as_ref().map(|(f, _)| f.clone()),
                    fence_mod_revision: fence.as_ref().map_or(0, |(_, r)| *r),
                    skip_cluster_id: self.bugs.has(Bug::SealWithoutClusterId),
                })
        });
        self.set(epoch.clone());
        let epoch = epoch.ok_or_else(|| {
            ArbiterError::Sealed("no epoch record: run `lockctl epoch init`".to_owned())
        })?;
        self.check(&epoch, resp.header())?;
        Ok(epoch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> EpochRecord {
        EpochRecord {
            advanced_by: None,
            epoch: 3,
            cluster_id: EpochRecord::cluster_id_hex(0xcdf8_1819_4e3a_8c32),
        }
    }

    #[test]
    fn cluster_id_table() {
        let cases: [(Option<u64>, bool); 4] = [
            (Some(0xcdf8_1819_4e3a_8c32), true),
            (Some(0xcdf8_1819_4e3a_8c33), false), // a restored cluster's new ID
            (Some(0), false),
            (None, false), // no header: nothing proves it is the same store
        ];
        for (header, serves) in cases {
            let r = cluster_id_verdict(&record(), header);
            assert_eq!(r.is_ok(), serves, "{header:?}");
            if let Err(e) = r {
                assert!(matches!(e, ArbiterError::Sealed(_)), "{e:?}");
            }
        }
    }

    #[test]
    fn revision_floor_table() {
        for (floor, revision, serves) in [
            (0, 1, true),     // a fresh arbiter has no floor
            (100, 100, true), // the same revision again (a read after a write)
            (100, 250, true),
            (100, 99, false), // the store went back: restored with the same ID
            (100, 0, false),
        ] {
            assert_eq!(
                revision_verdict(&record(), floor, revision).is_ok(),
                serves,
                "floor {floor}, revision {revision}"
            );
        }
    }
}
