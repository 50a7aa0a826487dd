//! Hold streams: one hold of one key as one HTTP/2 stream, its Acquire and then its
//! Release, so a lock costs the edge one request instead of two (issue 33: Envoy's cost is
//! per request, mostly TLS and HTTP/2 framing, and a stream's second message is a DATA
//! frame on a request already decided).
//!
//! The edge decided the stream once, on its key (`x-lock-key`, in the initial headers).
//! Every message must name that key: the two steps below are exactly the unary calls
//! (`calls::acquire`, `calls::release`), which refuse any other key. The stream is a
//! transport, not state: the hold lives on the session, so a stream ending early (the
//! client half-closes, a proxy's idle timeout, this arbiter draining) leaves the hold as
//! it was, and the client releases it with a unary Release.
//!
//! The answers are a state machine tonic polls itself (`stream::unfold`), not a task and a
//! channel: a spawned task would add a wake-up per message, and at low load a lock's cost
//! is its wake-ups (`make profile`, concurrency 1).

use crate::error::ArbiterError;
use crate::serve::calls::{acquire, record, release};
use crate::serve::edge::EdgeContext;
use crate::serve::engine::Engine;
use futures_util::stream::{self, Stream};
use lock_config::proto::v1::hold_request::Step as Ask;
use lock_config::proto::v1::hold_response::Step as Answer;
use lock_config::proto::v1::{HoldRequest, HoldResponse};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;
use tonic::{Status, Streaming};

struct Open {
    engine: Arc<Engine>,
    edge: EdgeContext,
    inbound: Streaming<HoldRequest>,
}

impl Open {
    /// The edge's decision each message is judged by: the stream's, always (a debug-only
    /// bug makes it the message's own key, for the boundary test to catch).
    /// Borrowed: the stream's own context, with no copy per message.
    fn edge_for(&self, message_key: &str) -> Cow<'_, EdgeContext> {
        if self
            .engine
            .bugs()
            .has(crate::ops::bugs::Bug::HoldKeyFromMessage)
        {
            return Cow::Owned(self.edge.with_key_of(message_key));
        }
        Cow::Borrowed(&self.edge)
    }
}

/// Where a stream is.
enum State {
    /// Waiting for the acquire.
    Start(Open),
    /// Granted `token`: waiting for its release, or the end of the stream.
    Held(Open, u64),
}

/// What the client sent next, in a form the steps below match on.
enum Next {
    Ask(Ask),
    /// The client half-closed, reset, or sent a message without a step.
    Ended,
    Empty,
    /// This arbiter started draining while the stream waited.
    Draining,
}

async fn next(s: &mut Open) -> Next {
    let drain = s.engine.drain().clone();
    tokio::select! {
        m = s.inbound.message() => match m {
            Ok(Some(HoldRequest { step: Some(ask) })) => Next::Ask(ask),
            Ok(Some(HoldRequest { step: None })) => Next::Empty,
            Ok(None) | Err(_) => Next::Ended,
        },
        () = drain.started() => Next::Draining,
    }
}

/// Serves one Hold stream; `edge` is what the edge decided for it.
pub fn serve(
    engine: Arc<Engine>,
    edge: EdgeContext,
    inbound: Streaming<HoldRequest>,
) -> impl Stream<Item = Result<HoldResponse, Status>> + Send {
    let start = State::Start(Open {
        engine,
        edge,
        inbound,
    });
    stream::unfold(Some(start), |state| async move {
        match state? {
            State::Start(mut s) => match next(&mut s).await {
                Next::Ask(Ask::Acquire(m)) => {
                    let t = Instant::now();
                    let edge = s.edge_for(&m.key);
                    // Boxed, as the release below: the stream's state machine is sized for
                    // the largest future it inlines, and it lives as long as the hold
                    // (55 kB of arbiter RSS per open stream inlined, `tests/hold_stream.rs`).
                    let r = Box::pin(acquire(&s.engine, &edge, &m))
                        .await
                        .map_err(Status::from);
                    record("acquire", t, &r);
                    match r {
                        Ok(g) => {
                            let token = g.token;
                            let answer = HoldResponse {
                                step: Some(Answer::Acquired(g)),
                            };
                            Some((Ok(answer), Some(State::Held(s, token))))
                        }
                        Err(status) => Some((Err(status), None)),
                    }
                }
                Next::Ask(Ask::Release(_)) | Next::Empty => Some((
                    Err(ArbiterError::HoldOutOfOrder("the first message must be acquire").into()),
                    None,
                )),
                // Nothing was asked: nothing to answer.
                Next::Ended => None,
                Next::Draining => Some((Err(ArbiterError::Draining.into()), None)),
            },
            State::Held(mut s, token) => match next(&mut s).await {
                Next::Ask(Ask::Release(m)) if m.token == token => {
                    let t = Instant::now();
                    let edge = s.edge_for(&m.key);
                    let r = Box::pin(release(&s.engine, &edge, &m))
                        .await
                        .map_err(Status::from);
                    record("release", t, &r);
                    let answer = r.map(|r| HoldResponse {
                        step: Some(Answer::Released(r)),
                    });
                    Some((answer, None))
                }
                Next::Ask(Ask::Release(_)) => Some((
                    Err(ArbiterError::HoldOutOfOrder("release the grant this stream made").into()),
                    None,
                )),
                Next::Ask(Ask::Acquire(_)) | Next::Empty => Some((
                    Err(ArbiterError::HoldOutOfOrder("one acquire per stream").into()),
                    None,
                )),
                // The hold stays on the session; the client releases it with Release. A
                // drain ends the stream cleanly so the arbiter can exit with holds out.
                Next::Ended | Next::Draining => None,
            },
        }
    })
}
