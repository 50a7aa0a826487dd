//! Observing a key (lock.v1 Observe): its holder now, then every change, resumed across
//! reconnects. A hint, never a grant: to act on a key, acquire it and write with its token.
//!
//! The stream ends for reasons that are not the caller's business (a proxy's idle timeout,
//! an arbiter draining or restarting, the store without quorum for a while): the
//! observation calls again with the last revision it saw and the caller sees no gap. When
//! the store has compacted that revision away, the gap cannot be replayed: the next change
//! is a fresh [`Change::Current`] with `gap: true`, so the caller knows changes were
//! missed.

use crate::error::LockError;
use crate::state::Inner;
use lock_config::FencingToken;
use lock_config::proto::v1::{ObserveEvent, ObserveRequest, ObserveResponse};
use std::sync::Arc;
use std::time::Duration;
use tonic::Streaming;

/// Reconnects in a row without an answer before the observation gives up (about a
/// minute with the back-off below).
const MAX_RECONNECTS: u32 = 40;

/// The session the client would hold the key on (0: none).
pub(crate) type OwnSession = Box<dyn Fn() -> i64 + Send + Sync>;

/// What happened to the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The holder as of the observation's start (or a restart after a gap): held or free.
    Current,
    /// Granted to a session (free before, or handed on by a release).
    Granted,
    Released,
    /// The holder's session was not renewed in time.
    Expired,
    /// The holder closed its session.
    Closed,
    /// Two operators force-released it.
    Forced,
    /// An epoch advance revoked every hold.
    Revoked,
}

/// The holder a change names: the hold now, or the hold that ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub spiffe_id: String,
    /// The holding process's instance, when its client sent one.
    pub instance: Option<String>,
    pub class: String,
    pub acquired_at_unix_ms: u64,
    /// The token's parts (the epoch and revision the hold was granted at): a later hold's
    /// are higher. The token itself only in [`Observed::token`].
    pub epoch: u16,
    pub grant_revision: i64,
}

/// One change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub change: Change,
    /// The store revision of the change.
    pub revision: i64,
    /// Whether the key is held after it.
    pub held: bool,
    pub holder: Option<Holder>,
    /// The hold's token, only when the holder is this client's own session (see
    /// [`crate::LockClient::observe`]).
    pub token: Option<FencingToken>,
    /// Changes before this one were missed (the store compacted them away while the
    /// stream was down, or the key's store is another since: a shard move, a restore).
    /// Only on a `Current`.
    pub gap: bool,
    /// The epoch of the store `revision` is of: with it, `revision` is a resume point
    /// ([`Observation::resume_after`]).
    pub store_epoch: u32,
}

/// A key being observed: call [`Observation::next`] for each change.
pub struct Observation {
    inner: Arc<Inner>,
    /// This client's session for the key, asked at each (re)connect: a session opened
    /// since is this client's now.
    own_session: OwnSession,
    key: String,
    /// The last revision seen, and its store's epoch: where a reconnect resumes (0: from
    /// the current state).
    after: i64,
    store_epoch: u32,
    stream: Option<Streaming<ObserveResponse>>,
    gap: bool,
}

impl Observation {
    pub(crate) fn new(inner: Arc<Inner>, own_session: OwnSession, key: &str) -> Self {
        Self {
            inner,
            own_session,
            key: key.to_owned(),
            after: 0,
            store_epoch: 0,
            stream: None,
            gap: false,
        }
    }

    /// Starts after `revision` of the store of `store_epoch` (a change's `revision` and
    /// `store_epoch` from an earlier observation; 0: unchecked) instead of from the current
    /// holder.
    pub fn resume_after(mut self, revision: i64, store_epoch: u32) -> Self {
        self.after = revision.max(0);
        self.store_epoch = store_epoch;
        self
    }

    /// The last revision seen.
    pub fn revision(&self) -> i64 {
        self.after
    }

    /// The epoch of the store the last revision seen is of.
    pub fn store_epoch(&self) -> u32 {
        self.store_epoch
    }

    /// The next change, reconnecting as needed. Errors are the refusals a new call gets
    /// (NOT_GRANTED, INVALID_KEY...), or the service unreachable for about a minute.
    pub async fn next(&mut self) -> Result<Observed, LockError> {
        let mut failures = 0u32;
        let mut backoff = Duration::from_millis(50);
        // Whether the stream at hand has answered: one that ends without a word is a
        // failure to back off from, not a reason to reconnect at once.
        let mut answered = true;
        loop {
            let answer = match self.stream.as_mut() {
                Some(s) => s.message().await.map_err(|s| mid_stream_error(&s)),
                None => match self.open().await {
                    Ok(s) => {
                        self.stream = Some(s);
                        answered = false;
                        continue;
                    }
                    Err(e) => Err(e),
                },
            };
            match answer {
                Ok(Some(a)) => {
                    failures = 0;
                    answered = true;
                    if let Some(o) = self.take(a) {
                        return Ok(o);
                    }
                }
                // The stream ended cleanly (a proxy's timeout): resume.
                Ok(None) if answered => self.stream = None,
                Ok(None) => {
                    self.stream = None;
                    failures += 1;
                    if failures > MAX_RECONNECTS {
                        return Err(LockError::Unavailable(
                            "observe streams end without an answer".into(),
                        ));
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                    tokio::time::sleep(backoff).await;
                }
                Err(LockError::HistoryCompacted { .. }) => {
                    self.stream = None;
                    self.after = 0;
                    self.store_epoch = 0;
                    self.gap = true;
                }
                Err(e) => {
                    self.stream = None;
                    let pause = match &e {
                        LockError::RateLimited { retry_after } => *retry_after,
                        e if e.is_transient() => {
                            backoff = (backoff * 2).min(Duration::from_secs(2));
                            backoff
                        }
                        _ => return Err(e),
                    };
                    failures += 1;
                    if failures > MAX_RECONNECTS {
                        return Err(e);
                    }
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }

    async fn open(&self) -> Result<Streaming<ObserveResponse>, LockError> {
        let mut rpc = self.inner.rpc()?;
        let req = crate::stub::keyed(
            ObserveRequest {
                key: self.key.clone(),
                after_revision: self.after,
                after_store_epoch: self.store_epoch,
                session_id: (self.own_session)(),
            },
            &self.key,
        );
        Ok(rpc.observe(req).await?.into_inner())
    }

    /// The answer as a change for the caller; None for a progress mark.
    fn take(&mut self, a: ObserveResponse) -> Option<Observed> {
        // The store's answer names its history: a revision is a resume point only with it.
        if a.store_epoch != self.store_epoch || a.revision > self.after {
            self.after = a.revision;
            self.store_epoch = a.store_epoch;
        }
        let change = match ObserveEvent::try_from(a.event).ok()? {
            ObserveEvent::Current => Change::Current,
            ObserveEvent::Granted => Change::Granted,
            ObserveEvent::Released => Change::Released,
            ObserveEvent::Expired => Change::Expired,
            ObserveEvent::Closed => Change::Closed,
            ObserveEvent::Forced => Change::Forced,
            ObserveEvent::Revoked => Change::Revoked,
            ObserveEvent::Progress | ObserveEvent::Unspecified => return None,
        };
        let holder = (!a.holder_spiffe_id.is_empty()).then(|| Holder {
            spiffe_id: a.holder_spiffe_id,
            instance: (!a.holder_instance.is_empty()).then_some(a.holder_instance),
            class: a.class_name,
            acquired_at_unix_ms: a.acquired_at_unix_ms,
            epoch: u16::try_from(a.epoch).unwrap_or(u16::MAX),
            grant_revision: a.grant_revision,
        });
        let gap = change == Change::Current && std::mem::take(&mut self.gap);
        Some(Observed {
            change,
            revision: a.revision,
            held: a.held,
            holder,
            token: FencingToken::from_u64(a.token)
                .ok()
                .filter(|_| a.token != 0),
            gap,
            store_epoch: a.store_epoch,
        })
    }
}

/// An open stream that breaks without a lock.v1 refusal is a broken connection, resumed
/// like any other: when the arbiter behind the edge is killed, Envoy resets the stream and
/// h2 reports INTERNAL ("error reading a body from connection"), which is not the service
/// refusing anything. A refusal (ErrorInfo with a reason) is the service's word and keeps
/// its meaning.
fn mid_stream_error(status: &tonic::Status) -> LockError {
    match crate::error::refusal(status) {
        Some(_) => LockError::from_status(status),
        None => LockError::Unavailable(status.message().to_owned()),
    }
}
