//! Observe (issue 35): a key's holder now, then every change of it, from an etcd watch on
//! the arbiter that owns the key. A hint (ADR-15): a change seen is never a grant.
//!
//! The stream is one watch of `/l/<key>` with previous values. A put is a grant (a handoff
//! overwrites the record); a delete's cause is read at its revision by the rule the audit
//! trail uses (`hold_end.rs`): the epoch record, a force release's record and the session
//! record at that revision. Each answer carries its revision, so a client that lost the
//! stream resumes after the last one it saw; a revision the store has compacted away is
//! HISTORY_COMPACTED, never a silent gap.
//!
//! Tokens are capabilities: an answer carries the holder's token only to the holder's own
//! session named in the request, by the holder's identity (`answer`, its table). Sessions
//! are not secret from a sibling replica of the same identity (it may renew or close them),
//! so the boundary is the identity; the session check keeps one replica from reading a
//! token it was never handed by mistake.
//!
//! Bounded: at most `--max-observers` streams per arbiter. They share one etcd watch stream
//! with the waiting queue heads (`watch_hub.rs`), each with a watch of its own. A quiet
//! key's stream gets a PROGRESS answer every minute: a fresh resume point, and traffic that
//! keeps proxies' idle timeouts from ending it. A drain ends every stream DRAINING; the
//! client resumes at the key's next owner.

use crate::error::ArbiterError;
use crate::ops::bugs::Bug;
use crate::ops::metrics::{GaugeGuard, METRICS};
use crate::serve::edge::EdgeContext;
use crate::serve::engine::Engine;
use crate::store::hold_end::HoldEnd;
use crate::store::layout::{Holder, decode, holder_key, lease_hex};
use crate::store::watch_hub::{Note, Watch};
use futures_util::stream::{self, Stream};
use lock_config::FencingToken;
use lock_config::proto::v1::{ObserveEvent, ObserveRequest, ObserveResponse};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tonic::Status;

mod change;
use change::{SEEN, compacted_read};

/// How often a stream checks its key still lives on this arbiter's store (shard moves).
/// Cheap: the epoch and the shard map are cached, and read only when they disagree.
const PLACE_EVERY: Duration = Duration::from_secs(5);

/// Who is watching: their identity and, if they named one, their own session (hex).
#[derive(Debug, Clone)]
pub struct Viewer {
    pub identity: String,
    pub session: Option<String>,
}

/// One state of the key as the store recorded it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    pub event: ObserveEvent,
    pub revision: i64,
    /// The hold now (CURRENT, GRANTED) or the hold that ended.
    pub holder: Option<Holder>,
    /// Whether the key is held after this change.
    pub held: bool,
    /// The epoch and revision the hold was granted at: its token's parts.
    pub epoch: u16,
    pub grant_revision: i64,
    /// The epoch of the store `revision` is of (a resume point names its store with it).
    pub store_epoch: u16,
}

/// The answer `viewer` gets for `seen`. The token only while the hold is current, and
/// only to its own session by its own identity (`token_to_all` is the injected bug).
pub fn answer(seen: &Seen, viewer: &Viewer, token_to_all: bool) -> ObserveResponse {
    let h = seen.holder.clone().unwrap_or_default();
    let own = viewer.session.as_deref() == Some(h.session.as_str())
        && !h.session.is_empty()
        && viewer.identity == h.spiffe_id;
    let token = if seen.held && seen.holder.is_some() && (own || token_to_all) {
        u64::try_from(seen.grant_revision)
            .ok()
            .and_then(|r| FencingToken::pack(seen.epoch, r).ok())
            .map_or(0, FencingToken::as_u64)
    } else {
        0
    };
    ObserveResponse {
        event: seen.event as i32,
        revision: seen.revision,
        held: seen.held,
        holder_spiffe_id: h.spiffe_id,
        holder_instance: h.instance.unwrap_or_default(),
        class_name: h.class,
        acquired_at_unix_ms: h.acquired_at_ms,
        epoch: u32::from(seen.epoch),
        grant_revision: seen.grant_revision,
        token,
        store_epoch: u32::from(seen.store_epoch),
    }
}

/// The event an ended hold is reported as.
pub fn event_of(end: HoldEnd) -> ObserveEvent {
    match end {
        HoldEnd::Released => ObserveEvent::Released,
        HoldEnd::Expired => ObserveEvent::Expired,
        HoldEnd::ClosedWithSession => ObserveEvent::Closed,
        HoldEnd::Forced => ObserveEvent::Forced,
        HoldEnd::RevokedByAdvance => ObserveEvent::Revoked,
    }
}

type Answers = mpsc::Sender<Result<ObserveResponse, Status>>;

/// Where a stream resumes: after a revision of the store of an epoch (0: unchecked).
#[derive(Debug, Clone, Copy)]
struct Resume {
    revision: i64,
    store_epoch: u32,
}

/// Serves one Observe call: refused at once (no class, the limit), or a stream.
pub fn serve(
    engine: Arc<Engine>,
    edge: &EdgeContext,
    req: &ObserveRequest,
) -> Result<impl Stream<Item = Result<ObserveResponse, Status>> + Send + use<>, ArbiterError> {
    let identity = edge.identity()?;
    let key = edge.keyed(&req.key)?;
    let registry = engine.registry();
    let class = registry.class_for(&key).ok_or(ArbiterError::NoClass)?;
    // Observe reports one holder record; a semaphore has N permits and no such record, so
    // its stream would report the key free forever. Refused until Observe reports permits.
    if let Some(permits) = class.permits() {
        return Err(ArbiterError::SemaphoreNotObservable {
            class: class.name.to_owned(),
            permits,
        });
    }
    let slot = engine.observers().admit()?;
    let viewer = Viewer {
        identity,
        session: (req.session_id > 0).then(|| lease_hex(req.session_id)),
    };
    let after = Resume {
        revision: req.after_revision.max(0),
        store_epoch: req.after_store_epoch,
    };
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        let _slot = slot;
        let _counted = GaugeGuard::new(&METRICS.observe_streams);
        if let Err(e) = watch(&engine, &key, after, &viewer, &tx).await {
            let _ = tx.send(Err(e.into())).await;
        }
    });
    Ok(stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|a| (a, rx))
    }))
}

/// The stream's life: the current holder (unless resuming), then the watch's changes.
/// Returns when the caller has gone; an error ends the stream with its status.
async fn watch(
    engine: &Engine,
    key: &lock_config::LockKey,
    after: Resume,
    viewer: &Viewer,
    tx: &Answers,
) -> Result<(), ArbiterError> {
    // The reads before the watch are boxed, as the event reads below: the task lives as
    // long as the stream, and its idle size is the largest future it inlines.
    let store = Box::pin(engine.store_for(key)).await?;
    let sealed = Box::pin(async { store.admit(store.sealed().await?, key).await }).await?;
    let token_to_all = engine.bugs().has(Bug::ObserveTokenToAll);
    let end_as_release = engine.bugs().has(Bug::ObserveEndAsRelease);
    let send = async |seen: &Seen| {
        tx.send(Ok(answer(seen, viewer, token_to_all)))
            .await
            .is_ok()
    };
    let holder = holder_key(key);
    let store_epoch = sealed.epoch().record.epoch;
    let start = if after.revision > 0 {
        // A revision of another store's history (a shard move, a restore) resumes nothing
        // here: the gap is said, and the client starts from now.
        if after.store_epoch != 0 && after.store_epoch != u32::from(store_epoch) {
            return Err(ArbiterError::HistoryCompacted {
                compact_revision: 0,
            });
        }
        after.revision + 1
    } else {
        let resp = Box::pin(sealed.get(&holder)).await?;
        let revision = resp.header().map_or(0, |h| h.revision());
        let kv = resp.kvs().first();
        let seen = Seen {
            event: ObserveEvent::Current,
            revision,
            holder: kv.and_then(|kv| decode::<Holder>(kv.value())),
            held: kv.is_some(),
            // An advance deletes every hold: a hold that exists was granted in this epoch.
            epoch: store_epoch,
            grant_revision: kv.map_or(0, |kv| kv.mod_revision()),
            store_epoch,
        };
        if !send(&seen).await {
            return Ok(());
        }
        revision + 1
    };
    // On the store's one watch stream (`watch_hub.rs`), with its own start: puts and
    // deletes, with previous values.
    let watch = Watch::changes(&holder, start).with_prev_kv();
    let mut observing = store.watch_hub().every(watch);
    // How often to check the key still lives here (a shard move: the client resumes there).
    let mut placed =
        tokio::time::interval_at(tokio::time::Instant::now() + PLACE_EVERY, PLACE_EVERY);
    let drain = engine.drain().clone();
    loop {
        tokio::select! {
            () = tx.closed() => return Ok(()),
            () = drain.started() => return Err(ArbiterError::Draining),
            _ = placed.tick() => {
                // Read afresh (the view the stream began with cannot see a move): a key
                // that lives elsewhere now is watched there; the client resumes.
                let now = Box::pin(async { store.admit(store.sealed().await?, key).await }).await;
                match now {
                    Ok(_) => {}
                    Err(ArbiterError::WrongSessionPlace { .. }) => return Err(ArbiterError::Moving),
                    Err(e) => return Err(e),
                }
            }
            note = observing.next() => match note {
                Note::Events(events, _) => {
                    for event in &events {
                        // Boxed: the reads it makes are large futures, and an idle stream
                        // (most of them, most of the time) should not carry their room
                        // (148 kB of arbiter RSS per stream before, `tests/observe.rs`).
                        let mut seen = Box::pin(SEEN.get(&sealed, event))
                            .await
                            .map_err(compacted_read)?;
                        if end_as_release && !seen.held {
                            seen.event = ObserveEvent::Released;
                        }
                        if !send(&seen).await {
                            return Ok(());
                        }
                    }
                }
                Note::Progress(revision) => {
                    // The epoch as this arbiter knows it now (behind an advance at worst:
                    // a resume then starts afresh, never from the wrong history).
                    let store_epoch = Box::pin(store.sealed()).await?.epoch().record.epoch;
                    let seen = Seen {
                        event: ObserveEvent::Progress,
                        revision,
                        store_epoch,
                        ..Seen::default()
                    };
                    if !send(&seen).await {
                        return Ok(());
                    }
                }
                Note::Compacted(0) | Note::Broken => return Err(ArbiterError::NoQuorum),
                Note::Compacted(compact_revision) => {
                    return Err(ArbiterError::HistoryCompacted { compact_revision });
                }
            },
        }
    }
}

#[cfg(test)]
mod tests;
