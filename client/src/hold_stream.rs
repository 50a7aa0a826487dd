//! A hold as one `Hold` stream (issue 33): the acquire and, later, its release travel on
//! one HTTP/2 stream, so the edge decides and proxies one request per lock instead of two
//! (Envoy's cost is per request: TLS records, HTTP/2 HEADERS both ways, routing, the
//! filter's context). The stream is only a transport. The hold lives on the session, so
//! when the stream cannot carry the release (it ended: the arbiter drained, a proxy's
//! idle timeout, a reset) the release goes as a unary call, as it always did.
//!
//! Each open stream is an HTTP/2 stream held open at the edge and the arbiter for the
//! life of the hold; past [`DEFAULT_MAX_HOLD_STREAMS`] open ones (per client, settable with
//! [`crate::LockClient::limit_hold_streams`]) further acquires use the unary calls.

use crate::error::LockError;
use crate::proto::lock_client::LockClient as Rpc;
use lock_config::FencingToken;
use lock_config::proto::v1::hold_request::Step as Ask;
use lock_config::proto::v1::hold_response::Step as Answer;
use lock_config::proto::v1::{AcquireRequest, HoldRequest, HoldResponse, ReleaseRequest};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use tonic::transport::Channel;

/// Open hold streams per client before acquires fall back to unary calls.
pub const DEFAULT_MAX_HOLD_STREAMS: usize = 1024;

/// How many hold streams a client has open, and how many it may.
#[derive(Debug)]
pub(crate) struct Budget {
    open: Arc<AtomicUsize>,
    max: AtomicUsize,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            open: Arc::default(),
            max: AtomicUsize::new(DEFAULT_MAX_HOLD_STREAMS),
        }
    }
}

impl Budget {
    pub(crate) fn set_max(&self, max: usize) {
        self.max.store(max, Ordering::Relaxed);
    }

    /// A place for one more open stream, if the budget has one.
    fn reserve(&self) -> Option<Slot> {
        let max = self.max.load(Ordering::Relaxed);
        let taken = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok();
        taken.then(|| Slot(self.open.clone()))
    }

    pub(crate) fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }
}

/// One open stream's place in the budget, given back when the stream is dropped.
#[derive(Debug)]
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A granted hold's open stream: where its release goes.
pub(crate) struct Link {
    asks: mpsc::Sender<HoldRequest>,
    answers: Streaming<HoldResponse>,
    _slot: Slot,
}

/// Acquires on a Hold stream when the budget allows (the stream kept for the release),
/// else with the unary call. Answers the token, the class the service named (the metrics'
/// label) and the stream.
pub(crate) async fn acquire(
    rpc: &mut Rpc<Channel>,
    budget: &Budget,
    req: AcquireRequest,
) -> Result<(FencingToken, String, Option<Link>), LockError> {
    let key = req.key.clone();
    let Some(slot) = budget.reserve() else {
        let r = rpc
            .acquire(crate::stub::keyed(req, &key))
            .await?
            .into_inner();
        return Ok((token_of(r.token)?, r.class_name, None));
    };
    // Room for the release too: the stream never waits on its own sender.
    let (asks, rx) = mpsc::channel(2);
    let first = HoldRequest {
        step: Some(Ask::Acquire(req)),
    };
    asks.try_send(first)
        .map_err(|_| LockError::Unavailable("hold stream closed before it opened".into()))?;
    let mut answers = rpc
        .hold(crate::stub::keyed(ReceiverStream::new(rx), &key))
        .await?
        .into_inner();
    match answers.message().await? {
        Some(HoldResponse {
            step: Some(Answer::Acquired(r)),
        }) => Ok((
            token_of(r.token)?,
            r.class_name,
            Some(Link {
                asks,
                answers,
                _slot: slot,
            }),
        )),
        // No answer and no status: not granted here. A retry on the same session gets the
        // grant back if one was made.
        _ => Err(LockError::Unavailable(
            "the hold stream ended without answering the acquire".into(),
        )),
    }
}

/// Releases on the hold's stream. None: the stream could not carry it (it had ended, or
/// broke before answering), and the caller releases with the unary call; a grant the
/// stream did release answers that call STALE_TOKEN.
pub(crate) async fn release(
    mut link: Link,
    key: &str,
    token: FencingToken,
    session_id: i64,
) -> Option<Result<(), LockError>> {
    let ask = HoldRequest {
        step: Some(Ask::Release(ReleaseRequest {
            key: key.to_owned(),
            token: token.as_u64(),
            session_id,
            ..Default::default()
        })),
    };
    link.asks.send(ask).await.ok()?;
    match link.answers.message().await {
        Ok(Some(HoldResponse {
            step: Some(Answer::Released(_)),
        })) => Some(Ok(())),
        Ok(_) => None,
        Err(status) => match LockError::from_status(&status) {
            LockError::Unavailable(_) => None,
            refused => Some(Err(refused)),
        },
    }
}

fn token_of(raw: u64) -> Result<FencingToken, LockError> {
    FencingToken::from_u64(raw).map_err(|e| LockError::InvalidRequest(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_gives_back_what_a_dropped_stream_held() {
        let b = Budget::default();
        b.set_max(2);
        let one = b.reserve().expect("first");
        let two = b.reserve().expect("second");
        assert!(b.reserve().is_none(), "the third is over the budget");
        drop(one);
        assert_eq!(b.open(), 1);
        let _three = b.reserve().expect("a slot came back");
        drop(two);
        b.set_max(0);
        assert!(b.reserve().is_none(), "0: unary calls only");
    }
}
