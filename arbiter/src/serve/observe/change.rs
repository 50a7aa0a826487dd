//! A watch event read as the key's state ([`Seen`]): the epoch at a grant, a delete's cause
//! by the audit trail's rule (`hold_end.rs`), each read at the event's revision, and read
//! once per change for every Observe of the key (the memo).

use super::{Seen, event_of};
use crate::error::ArbiterError;
use crate::store::Sealed;
use crate::store::hold_end::{EndFacts, SessionEnd, hold_end};
use crate::store::layout::{
    EPOCH_KEY, FORCE_PREFIX, Holder, SESSION_PREFIX, SessionRecord, decode,
};
use etcd_client::{Event, EventType, GetOptions};
use lock_config::proto::v1::ObserveEvent;
use lock_store::{Absent, Malformed, StoreError};
use std::sync::Arc;

/// Changes already read, for every Observe of their key: the reads a change needs (the
/// epoch at a grant; a delete's cause) are the same for each observer, so N observers of
/// one key cost its store one set of reads per change, not N (50 observers, one grant and
/// one release: 302 range reads before, `tests/observe.rs`'s measurement). Keyed by the
/// store's cluster, the holder key and the revision; the first observer reads, the others
/// wait for its answer. Bounded: the oldest entries go first.
pub(super) static SEEN: std::sync::LazyLock<SeenMemo> = std::sync::LazyLock::new(SeenMemo::default);

/// Entries kept: far more than the changes in flight to every observer at once.
const SEEN_KEPT: usize = 4096;

/// (the store's cluster ID, the holder key, the revision).
type SeenKey = (String, String, i64);
type SeenCell = Arc<tokio::sync::OnceCell<Seen>>;

/// The cells by key, and their keys oldest first.
#[derive(Default)]
pub(super) struct SeenMemo {
    cells: std::sync::Mutex<(
        std::collections::HashMap<SeenKey, SeenCell>,
        std::collections::VecDeque<SeenKey>,
    )>,
}

impl SeenMemo {
    pub(super) async fn get(&self, sealed: &Sealed, event: &Event) -> Result<Seen, ArbiterError> {
        let Some(kv) = event.kv() else {
            return seen_of(sealed, event).await;
        };
        let key: SeenKey = (
            sealed.epoch().record.cluster_id.clone(),
            String::from_utf8_lossy(kv.key()).into_owned(),
            kv.mod_revision(),
        );
        let cell = {
            let Ok(mut guard) = self.cells.lock() else {
                return seen_of(sealed, event).await;
            };
            let (cells, order) = &mut *guard;
            if let Some(c) = cells.get(&key) {
                c.clone()
            } else {
                let c = Arc::new(tokio::sync::OnceCell::new());
                cells.insert(key.clone(), c.clone());
                order.push_back(key);
                while order.len() > SEEN_KEPT {
                    if let Some(old) = order.pop_front() {
                        cells.remove(&old);
                    }
                }
                c
            }
        };
        // A failed read is not kept: the next observer reads again.
        cell.get_or_try_init(|| seen_of(sealed, event))
            .await
            .cloned()
    }
}

/// A read at an event's revision that etcd has compacted away since the watch delivered
/// it: the history is gone, as for a watch that starts there (the client starts afresh
/// and marks the gap). The compaction's revision is not in etcd's answer: 0.
pub(super) fn compacted_read(e: ArbiterError) -> ArbiterError {
    match e {
        ArbiterError::Store(StoreError::Etcd(e)) if e.to_string().contains("compacted") => {
            ArbiterError::HistoryCompacted {
                compact_revision: 0,
            }
        }
        e => e,
    }
}

/// One watch event as the key's state.
async fn seen_of(sealed: &Sealed, event: &Event) -> Result<Seen, ArbiterError> {
    let kv = event.kv().ok_or(ArbiterError::Store(StoreError::Malformed(
        Malformed::EventWithoutKey,
    )))?;
    let revision = kv.mod_revision();
    match event.event_type() {
        EventType::Put => {
            let epoch = epoch_at(sealed, revision).await?;
            Ok(Seen {
                event: ObserveEvent::Granted,
                revision,
                holder: decode::<Holder>(kv.value()),
                held: true,
                epoch,
                grant_revision: revision,
                store_epoch: epoch,
            })
        }
        EventType::Delete => {
            let prev = event.prev_kv();
            let holder = prev.and_then(|p| decode::<Holder>(p.value()));
            let grant_revision = prev.map_or(0, |p| p.mod_revision());
            let session = holder.as_ref().map(|h| h.session.as_str()).unwrap_or("");
            let ((facts, store_epoch), epoch) =
                tokio::try_join!(facts_at(sealed, revision, session), async {
                    match grant_revision {
                        0 => Ok(0),
                        r => epoch_at(sealed, r).await,
                    }
                })?;
            Ok(Seen {
                event: event_of(hold_end(facts)),
                revision,
                holder,
                held: false,
                epoch,
                grant_revision,
                store_epoch,
            })
        }
    }
}

/// The epoch number as of `revision`.
async fn epoch_at(sealed: &Sealed, revision: i64) -> Result<u16, ArbiterError> {
    let resp = sealed
        .range(EPOCH_KEY, Some(GetOptions::new().with_revision(revision)))
        .await?;
    resp.kvs()
        .first()
        .and_then(|kv| decode::<crate::store::layout::EpochRecord>(kv.value()))
        .map(|r| r.epoch)
        .ok_or(ArbiterError::Store(StoreError::Absent(Absent::EpochAt(
            revision,
        ))))
}

/// What else happened at `revision`, where a hold of `session` (hex) was deleted, and the
/// store's epoch at it.
async fn facts_at(
    sealed: &Sealed,
    revision: i64,
    session: &str,
) -> Result<(EndFacts, u16), ArbiterError> {
    let at = |r: i64| GetOptions::new().with_revision(r);
    let session_key = format!("{SESSION_PREFIX}{session}");
    let (epoch, force, session_then, session_before) = tokio::try_join!(
        sealed.range(EPOCH_KEY, Some(at(revision))),
        sealed.range(
            FORCE_PREFIX,
            Some(
                // Keys, not a count: etcd's count ignores the mod-revision filters, so
                // every force record still alive (24 h) counted, and every later end
                // was told FORCED (the gate's observer caught it in CI).
                at(revision)
                    .with_prefix()
                    .with_keys_only()
                    .with_min_mod_revision(revision)
                    .with_max_mod_revision(revision)
            )
        ),
        async {
            if session.is_empty() {
                return Ok(None);
            }
            sealed
                .range(&session_key, Some(at(revision)))
                .await
                .map(Some)
        },
        async {
            if session.is_empty() {
                return Ok(None);
            }
            sealed
                .range(&session_key, Some(at(revision - 1)))
                .await
                .map(Some)
        },
    )?;
    let advance = epoch
        .kvs()
        .first()
        .is_some_and(|kv| kv.mod_revision() == revision);
    let store_epoch = epoch
        .kvs()
        .first()
        .and_then(|kv| decode::<crate::store::layout::EpochRecord>(kv.value()))
        .map_or(0, |r| r.epoch);
    let force = force.kvs().iter().any(|kv| kv.mod_revision() == revision);
    // The session record is deleted with every hold on its lease, at one revision: gone at
    // the hold's delete means it ended there.
    let ended = session_then.is_some_and(|r| r.kvs().is_empty());
    let session = ended.then(|| {
        let closing = session_before
            .as_ref()
            .and_then(|r| r.kvs().first())
            .and_then(|kv| decode::<SessionRecord>(kv.value()))
            .is_some_and(|r| r.closing);
        if closing {
            SessionEnd::Closed
        } else {
            SessionEnd::Expired
        }
    });
    Ok((
        EndFacts {
            advance,
            force,
            session,
        },
        store_epoch,
    ))
}
