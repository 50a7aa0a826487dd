//! KeepAlive streams: each request renews one session's lease through an etcd
//! LeaseKeepAlive stream kept open for the life of the client's stream (`sessions.rs`).

use crate::lock::sessions::Keepers;
use crate::serve::engine::Engine;
use lock_config::proto::v1::{KeepAliveRequest, KeepAliveResponse};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

/// Serves one client stream: a refusal ends it (the client reopens, or learns its session
/// is gone).
pub fn serve(
    engine: Arc<Engine>,
    identity: String,
    mut inbound: Streaming<KeepAliveRequest>,
) -> impl Stream<Item = Result<KeepAliveResponse, Status>> {
    let (tx, rx) = mpsc::channel(8);
    tokio::spawn(async move {
        let mut keepers = Keepers::default();
        loop {
            // A drain ends the stream cleanly between renewals: the client reopens it,
            // through Envoy, on another arbiter.
            let req = tokio::select! {
                m = inbound.message() => match m {
                    Ok(Some(req)) => req,
                    _ => break,
                },
                () = engine.drain().started() => break,
            };
            let result = engine.renew(&identity, req.session_id, &mut keepers).await;
            let fatal = result.is_err();
            let item = result
                .map(|ttl| KeepAliveResponse {
                    session_id: req.session_id,
                    ttl_seconds: ttl,
                })
                .map_err(Status::from);
            if tx.send(item).await.is_err() || fatal {
                break;
            }
        }
    });
    ReceiverStream::new(rx)
}
