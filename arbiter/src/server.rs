//! Serving: `serve(listener, engine, id, shutdown)`; the binary only parses and binds.

use crate::engine::Engine;
use crate::proto::lock_server::LockServer;
use crate::service::LockService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

pub async fn serve(
    listener: TcpListener,
    engine: Arc<Engine>,
    arbiter_id: &str,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(20)))
        .tcp_nodelay(true)
        .add_service(LockServer::new(LockService::new(engine, arbiter_id)))
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
        .await
}
