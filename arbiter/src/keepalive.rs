//! KeepAlive streams: each request renews one session's lease through an etcd
//! LeaseKeepAlive stream kept open for the life of the client's stream.

use crate::engine::Engine;
use crate::error::ArbiterError;
use etcd_client::{LeaseKeepAliveStream, LeaseKeeper};
use lock_config::proto::v1::{KeepAliveRequest, KeepAliveResponse};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

/// Sessions one client stream may renew: a process has one session per TTL, so a handful.
const MAX_SESSIONS_PER_STREAM: usize = 16;

type Keepers = HashMap<i64, (LeaseKeeper, LeaseKeepAliveStream)>;

pub fn serve(
    engine: Arc<Engine>,
    identity: String,
    mut inbound: Streaming<KeepAliveRequest>,
) -> impl Stream<Item = Result<KeepAliveResponse, Status>> {
    let (tx, rx) = mpsc::channel(8);
    tokio::spawn(async move {
        let mut keepers = Keepers::new();
        while let Ok(Some(req)) = inbound.message().await {
            let result = renew(&engine, &identity, req.session_id, &mut keepers).await;
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

async fn renew(
    engine: &Engine,
    identity: &str,
    lease: i64,
    keepers: &mut Keepers,
) -> Result<i64, ArbiterError> {
    engine
        .sessions
        .owned(&engine.store, lease, identity)
        .await?;
    let epoch = engine.epoch.current(&engine.store).await?;
    if !keepers.contains_key(&lease) {
        if keepers.len() >= MAX_SESSIONS_PER_STREAM {
            return Err(ArbiterError::Store(format!(
                "at most {MAX_SESSIONS_PER_STREAM} sessions per KeepAlive stream"
            )));
        }
        let mut leases = engine.store.lease();
        let pair = engine.store.bounded(leases.keep_alive(lease)).await?;
        keepers.insert(lease, pair);
    }
    let result = async {
        let (keeper, stream) = keepers
            .get_mut(&lease)
            .ok_or_else(|| ArbiterError::Store("keeper vanished".into()))?;
        engine.store.bounded(keeper.keep_alive()).await?;
        engine
            .store
            .bounded(stream.message())
            .await?
            .ok_or(ArbiterError::NoQuorum)
    }
    .await;
    let resp = match result {
        Ok(r) => r,
        Err(e) => {
            // A broken etcd stream is reopened on the next request.
            keepers.remove(&lease);
            return Err(e);
        }
    };
    // Keepalive headers get the cluster-ID seal only: a leader's keepalive header may carry a
    // revision older than a linearizable read's, so the revision guard would misfire here.
    if epoch.check_header(resp.header()).is_err() {
        // The cached record may predate an epoch advance: re-read it before refusing.
        engine
            .epoch
            .refresh(&engine.store)
            .await?
            .check_header(resp.header())?;
    }
    if resp.ttl() <= 0 {
        keepers.remove(&lease);
        engine.sessions.forget(lease);
        return Err(ArbiterError::SessionNotFound);
    }
    Ok(resp.ttl())
}
