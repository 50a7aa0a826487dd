//! Locks taken the way lock-client takes them (issue 33): the acquire on a `Hold` stream
//! through the edge, and its release later on the same stream. The answers come back in
//! the unary calls' shape, so the history records and classifies them as it does those.

use lock_client::proto::lock_client::LockClient;
use lock_config::proto::v1::hold_request::Step as Ask;
use lock_config::proto::v1::hold_response::Step as Answer;
use lock_config::proto::v1::{
    AcquireRequest, AcquireResponse, HoldRequest, HoldResponse, ReleaseRequest, ReleaseResponse,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Response, Status, Streaming};

pub(super) type Asks = ReceiverStream<HoldRequest>;

/// A granted hold's open stream, for its release.
pub(super) struct Link {
    pub(super) key: String,
    pub(super) token: u64,
    asks: mpsc::Sender<HoldRequest>,
    answers: Streaming<HoldResponse>,
    metadata: tonic::metadata::MetadataMap,
}

/// The acquire on a new stream (`wrap` adds the route's headers): the answer as a unary
/// Acquire's, and the stream when it granted.
pub(super) async fn acquire(
    client: &mut LockClient<Channel>,
    m: AcquireRequest,
    wrap: impl FnOnce(Asks) -> tonic::Request<Asks>,
) -> (Result<Response<AcquireResponse>, Status>, Option<Link>) {
    let key = m.key.clone();
    let (asks, rx) = mpsc::channel(2);
    if asks
        .try_send(HoldRequest {
            step: Some(Ask::Acquire(m)),
        })
        .is_err()
    {
        return (Err(Status::internal("hold stream: first message")), None);
    }
    let (metadata, mut answers, _) = match client.hold(wrap(ReceiverStream::new(rx))).await {
        Ok(r) => r.into_parts(),
        Err(s) => return (Err(s), None),
    };
    match answers.message().await {
        Ok(Some(HoldResponse {
            step: Some(Answer::Acquired(g)),
        })) => {
            let token = g.token;
            let answer = Response::from_parts(metadata.clone(), g, Default::default());
            let link = Link {
                key,
                token,
                asks,
                answers,
                metadata,
            };
            (Ok(answer), Some(link))
        }
        // No reason: the history records an unknown outcome.
        Ok(_) => (
            Err(Status::unavailable("hold stream ended without an answer")),
            None,
        ),
        Err(s) => (Err(s), None),
    }
}

/// The release on the hold's stream. None: the stream had ended without taking it (the
/// arbiter drained): release with the unary call, as lock-client does.
pub(super) async fn release(
    mut link: Link,
    m: ReleaseRequest,
) -> Option<Result<Response<ReleaseResponse>, Status>> {
    let ask = HoldRequest {
        step: Some(Ask::Release(m)),
    };
    link.asks.send(ask).await.ok()?;
    match link.answers.message().await {
        Ok(Some(HoldResponse {
            step: Some(Answer::Released(r)),
        })) => Some(Ok(Response::from_parts(
            link.metadata,
            r,
            Default::default(),
        ))),
        Ok(_) => None,
        Err(s) => Some(Err(s)),
    }
}
