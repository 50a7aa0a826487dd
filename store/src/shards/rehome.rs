//! Operator procedures on the shard map (ADR-09), run by `lockctl shards`: set up the map,
//! and change it — add a shard, pin a namespace, drain a shard — by one move protocol:
//!
//! 1. the document gets the next map as `pending`;
//! 2. every shard's fence names (current, pending): from this write on, no grant of a key
//!    whose home differs between the two maps commits anywhere (every grant transaction
//!    compares the fence's record; arbiters answer MOVING, retryable);
//! 3. wait until no hold of a moving key remains on its old shard (released or expired),
//!    or give up (the fences and the document are put back: nothing moved);
//! 4. each shard that receives keys gets an epoch above every shard it receives from
//!    (epochs are allocated from the coord cluster, so a new shard's already is; an older
//!    one needs an advance, which ends its holds like any advance: only when asked);
//! 5. every fence names the new map alone, then the document does: grants resume.
//!
//! Tokens never go back for a moved key (its new shard's epoch is higher than its old
//! one's) and no two clusters hold it at once (its old shard has no hold and grants none
//! from step 2; its new shard grants none before step 5).

use crate::connection::etcd::Etcd;
use crate::epoch;
use crate::error::{Absent, Contended, MapError, MoveRefused, StoreError};
use crate::records::layout::AdvancedBy;
use crate::records::layout::HOLDER_PREFIX;
use crate::shards::shard_map::{
    allocate_epoch, may_write_epoch, read_doc, read_epoch, read_fence, write_doc, write_fence,
};
use etcd_client::GetOptions;
use lock_config::shards::moves::receivers;
use lock_config::shards::{Shard, ShardFence, ShardMap, ShardsDoc};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A connection to a shard by its map entry (the caller's credential).
pub trait Connect {
    fn connect(
        &self,
        shard: &Shard,
    ) -> impl std::future::Future<Output = Result<Etcd, StoreError>> + Send;
}

/// How a change of map may proceed.
#[derive(Debug, Clone)]
pub struct MoveOptions {
    /// How long to wait for holds of moving keys to end before giving up.
    pub wait: Duration,
    /// Advance the epoch of a receiving shard whose epoch is not above its sources'
    /// (ends that shard's holds). Without it such a move is refused before it starts.
    pub advance_destinations: bool,
}

/// What a change did.
#[derive(Debug, Clone, Default)]
pub struct MoveReport {
    pub from_version: u64,
    pub to_version: u64,
    /// Holds of moving keys seen at the start of the drain (each ended before the flip).
    pub holds_waited_for: usize,
    pub drained_in: Duration,
    /// Shards whose epoch was advanced, with (from, to).
    pub advanced: BTreeMap<String, (u16, u16)>,
    /// The whole move, from the pending map's write to the flip.
    pub took: Duration,
}

/// `lockctl shards init`: the coord cluster's epoch allocator, each shard's epoch record
/// (a fresh epoch from the allocator) with its fence, and the document at `map`'s
/// version. Idempotent: an existing document must equal `map`.
pub async fn init(
    coord: &Etcd,
    map: &ShardMap,
    connect: &impl Connect,
) -> Result<ShardsDoc, StoreError> {
    map.validate()
        .map_err(|e| StoreError::Map(MapError::Invalid(e)))?;
    if let Some((doc, _)) = read_doc(coord).await? {
        if doc.current == *map && doc.pending.is_none() {
            return Ok(doc);
        }
        return Err(StoreError::Move(MoveRefused::MapExists {
            version: doc.current.version,
        }));
    }
    // The coord cluster's own epoch (it may have served alone until now) bounds the
    // allocator from below: no shard may start at or under it.
    let coord_epoch = match read_epoch(coord).await? {
        Some((r, _)) => r.epoch,
        None => {
            let first = allocate_epoch(coord, 0).await?;
            epoch::init_with(coord, first).await?.0.epoch
        }
    };
    let mut floor = coord_epoch;
    for shard in &map.shards {
        let etcd = connect.connect(shard).await?;
        floor = floor.max(start_shard(coord, &etcd, shard, map.version, floor).await?);
    }
    let doc = ShardsDoc {
        current: map.clone(),
        pending: None,
    };
    if !write_doc(coord, &doc, 0).await? {
        return Err(StoreError::Contended(Contended::ShardMapWritten));
    }
    Ok(doc)
}

/// Gives a shard its fence and its epoch record (a fresh epoch above `floor`), whichever
/// it lacks. Returns its epoch. Creating an epoch record writes `/sys/epoch`: root's, with
/// etcd's roles (callers probe first with [`may_write_epoch`]).
async fn start_shard(
    coord: &Etcd,
    etcd: &Etcd,
    shard: &Shard,
    version: u64,
    floor: u16,
) -> Result<u16, StoreError> {
    match read_fence(etcd).await? {
        Some((f, _)) if f.name != shard.name => {
            return Err(StoreError::Map(MapError::WrongShard {
                given: shard.name.clone(),
                is: f.name,
            }));
        }
        Some(_) => {}
        None => {
            write_fence(
                etcd,
                ShardFence {
                    name: shard.name.clone(),
                    version,
                    pending: None,
                },
            )
            .await?;
        }
    }
    match read_epoch(etcd).await? {
        Some((record, _)) => Ok(record.epoch),
        None => {
            let first = allocate_epoch(coord, floor).await?;
            Ok(epoch::init_with(etcd, first).await?.0.epoch)
        }
    }
}

/// The holds of keys that move from `shard` between `old` and `new`.
async fn moving_holds(
    etcd: &Etcd,
    shard: &str,
    old: &ShardMap,
    new: &ShardMap,
) -> Result<Vec<String>, StoreError> {
    let resp = etcd
        .range(
            HOLDER_PREFIX,
            Some(GetOptions::new().with_prefix().with_keys_only()),
        )
        .await?;
    Ok(resp
        .kvs()
        .iter()
        .filter_map(|kv| kv.key_str().ok())
        .filter_map(|k| k.strip_prefix(HOLDER_PREFIX))
        .filter(|k| old.shard_of(k) == shard && new.shard_of(k) != shard)
        .map(str::to_owned)
        .collect())
}

/// Changes the map to `next` (its version must be the current one's + 1) by the move
/// protocol above. `progress` hears each step.
pub async fn change(
    coord: &Etcd,
    next: ShardMap,
    connect: &impl Connect,
    opts: &MoveOptions,
    progress: &mut (impl FnMut(&str) + Send),
) -> Result<MoveReport, StoreError> {
    let started = Instant::now();
    next.validate()
        .map_err(|e| StoreError::Map(MapError::Invalid(e)))?;
    let (doc, doc_rev) = read_doc(coord)
        .await?
        .ok_or(StoreError::Absent(Absent::ShardMap))?;
    if let Some(p) = &doc.pending {
        if *p != next {
            return Err(StoreError::Move(MoveRefused::UnderWay {
                version: p.version,
            }));
        }
    } else if next.version != doc.current.version + 1 {
        return Err(StoreError::Move(MoveRefused::NotNext {
            want: doc.current.version + 1,
            got: next.version,
        }));
    }
    let old = doc.current.clone();
    // Every shard named by either map, connected (new ones get their epoch and fence).
    let mut shards: BTreeMap<String, Etcd> = BTreeMap::new();
    let mut epochs: BTreeMap<String, u16> = BTreeMap::new();
    let mut floor = read_epoch(coord).await?.map_or(0, |(r, _)| r.epoch);
    for s in old.shards.iter().chain(&next.shards) {
        if shards.contains_key(&s.name) {
            continue;
        }
        let etcd = connect.connect(s).await?;
        let e = if old.shards.iter().any(|o| o.name == s.name) {
            read_epoch(&etcd)
                .await?
                .map(|(r, _)| r.epoch)
                .ok_or_else(|| StoreError::Absent(Absent::ShardEpoch(s.name.clone())))?
        } else {
            if read_epoch(&etcd).await?.is_none() && !may_write_epoch(&etcd).await? {
                return Err(StoreError::Move(MoveRefused::MayNotStart {
                    shard: s.name.clone(),
                }));
            }
            progress(&format!(
                "starting shard {} (epoch from the coord cluster)",
                s.name
            ));
            start_shard(coord, &etcd, s, old.version, floor).await?
        };
        floor = floor.max(e);
        epochs.insert(s.name.clone(), e);
        shards.insert(s.name.clone(), etcd);
    }
    // Which receivers need an advance: decided before anything is written.
    let mut to_advance = BTreeMap::new();
    for (d, sources) in receivers(&old, &next) {
        let top = sources
            .iter()
            .filter_map(|s| epochs.get(s))
            .copied()
            .max()
            .unwrap_or(0);
        let mine = epochs.get(&d).copied().unwrap_or(0);
        if mine <= top {
            to_advance.insert(d, (mine, top));
        }
    }
    if !to_advance.is_empty() && !opts.advance_destinations {
        let list = to_advance
            .iter()
            .map(|(d, (e, top))| format!("{d} (epoch {e}, receives from epoch {top})"))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(StoreError::Move(MoveRefused::NeedsAdvance {
            receivers: list,
        }));
    }
    for d in to_advance.keys() {
        if !may_write_epoch(&shards[d]).await? {
            return Err(StoreError::Move(MoveRefused::MayNotAdvance {
                shard: d.clone(),
            }));
        }
    }
    // 1. The pending map.
    let pending = ShardsDoc {
        current: old.clone(),
        pending: Some(next.clone()),
    };
    if doc.pending.is_none() && !write_doc(coord, &pending, doc_rev).await? {
        return Err(StoreError::Contended(Contended::ShardMapMoved));
    }
    progress(&format!("map {} -> {}: pending", old.version, next.version));
    // 2. Fences: moving keys are refused everywhere from here.
    let fence = |name: &str, version, pending| ShardFence {
        name: name.to_owned(),
        version,
        pending,
    };
    for (name, etcd) in &shards {
        write_fence(etcd, fence(name, old.version, Some(next.version))).await?;
    }
    progress("fences written: grants of moving keys are refused (MOVING)");
    // 3. Drain.
    let drain_started = Instant::now();
    let mut first_seen = None;
    loop {
        let mut held = Vec::new();
        for (name, etcd) in &shards {
            held.extend(moving_holds(etcd, name, &old, &next).await?);
        }
        first_seen.get_or_insert(held.len());
        if held.is_empty() {
            break;
        }
        if drain_started.elapsed() >= opts.wait {
            // Put everything back: the move did not happen.
            for (name, etcd) in &shards {
                if old.shards.iter().any(|s| &s.name == name) {
                    write_fence(etcd, fence(name, old.version, None)).await?;
                }
            }
            let (_, rev) = read_doc(coord).await?.unwrap_or((pending.clone(), 0));
            write_doc(
                coord,
                &ShardsDoc {
                    current: old.clone(),
                    pending: None,
                },
                rev,
            )
            .await?;
            held.truncate(5);
            return Err(StoreError::Move(MoveRefused::HoldsRemain {
                wait: opts.wait,
                examples: held.join(", "),
                version: old.version,
            }));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let drained_in = drain_started.elapsed();
    progress(&format!(
        "drained: {} hold(s) of moving keys ended in {drained_in:?}",
        first_seen.unwrap_or(0)
    ));
    // 4. Receivers' epochs above their sources'.
    let mut advanced = BTreeMap::new();
    for (d, (mine, top)) in &to_advance {
        let etcd = &shards[d];
        let to = allocate_epoch(coord, *top).await?;
        let by = AdvancedBy {
            request: String::new(),
            reason: format!(
                "shard map {} -> {}: {d} receives keys from epoch {top}",
                old.version, next.version
            ),
            requester: "lockctl shards --advance-destination (etcd root)".into(),
            approver: String::new(),
            break_glass: true,
        };
        epoch::advance(etcd, *mine, Some(to), Some(by)).await?;
        progress(&format!("shard {d}: epoch {mine} -> {to}"));
        advanced.insert(d.clone(), (*mine, to));
    }
    // 5. Flip: fences first (the authority), then the document.
    for (name, etcd) in &shards {
        write_fence(etcd, fence(name, next.version, None)).await?;
    }
    let (_, rev) = read_doc(coord)
        .await?
        .ok_or(StoreError::Contended(Contended::ShardMapVanished))?;
    let flipped = ShardsDoc {
        current: next.clone(),
        pending: None,
    };
    if !write_doc(coord, &flipped, rev).await? {
        return Err(StoreError::Contended(Contended::ShardMapAtFlip));
    }
    progress(&format!("map version {} in force", next.version));
    Ok(MoveReport {
        from_version: old.version,
        to_version: next.version,
        holds_waited_for: first_seen.unwrap_or(0),
        drained_in,
        advanced,
        took: started.elapsed(),
    })
}
