//! Serving: `serve(listener, engine, id, transport, shutdown)`; the binary only parses and
//! binds.
//!
//! Every request passes `edge::intercept` first, which takes the edge's headers from the
//! initial HEADERS frame. With [`Transport::MutualTls`] (the default and the only one for
//! production) a connection exists only once its peer proved an allow-listed edge identity.

use crate::serve::edge;
use crate::serve::engine::Engine;
use crate::serve::health;
use crate::serve::peer_tls::PeerTls;
use crate::serve::proto::lock_server::LockServer;
use crate::serve::service::LockService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::TcpIncoming;

/// How long a peer may take to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshaken connections waiting for the server to take them.
const ACCEPT_BACKLOG: usize = 64;

pub enum Transport {
    /// mTLS, peers checked against the edge allow-list (`peer_tls`).
    MutualTls(Arc<PeerTls>),
    /// Plaintext: anyone who can connect can claim any identity. `--insecure-plaintext`,
    /// loopback only, for debugging; never in production.
    InsecurePlaintext,
}

pub async fn serve(
    listener: TcpListener,
    engine: Arc<Engine>,
    arbiter_id: &str,
    transport: Transport,
    health_every: Duration,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    let service = LockServer::with_interceptor(
        LockService::new(engine.clone(), arbiter_id),
        edge::intercept(engine.bugs().clone(), engine.drain().clone()),
    );
    // grpc.health.v1 beside lock.v1, on the same listener: Envoy checks through the same
    // mutual TLS its requests use (`health.rs`).
    let (reporter, health_service) = tonic_health::server::health_reporter();
    tokio::spawn(health::run(
        engine.clone(),
        reporter,
        engine.drain().clone(),
        health_every,
    ));
    let server = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(20)))
        .tcp_nodelay(true)
        .add_service(health_service)
        .add_service(service);
    match transport {
        // `tcp_nodelay` above applies only to listeners the server binds itself; a listener
        // handed in needs it set per connection, or Nagle holds a response's last frame for
        // the client's delayed ACK (~40 ms: found by `make bench`, where the plaintext
        // arbiter's c=1 p50 rose from 2.5 to 44 ms once responses were completed from the
        // group-commit task). The TLS accept loop sets it itself.
        Transport::InsecurePlaintext => {
            let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
            server
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await
        }
        Transport::MutualTls(tls) => {
            let (tx, rx) = tokio::sync::mpsc::channel(ACCEPT_BACKLOG);
            let acceptor = tokio::spawn(accept_loop(listener, tls, tx));
            let served = server
                .serve_with_incoming_shutdown(ReceiverStream::new(rx), shutdown)
                .await;
            acceptor.abort();
            served
        }
    }
}

type TlsConn = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;

/// Accepts TCP, runs each handshake on its own task (a slow peer holds up nobody), and
/// hands finished connections to the server. A failed handshake is the peer's problem: it
/// is logged and the loop goes on.
async fn accept_loop(
    listener: TcpListener,
    tls: Arc<PeerTls>,
    tx: tokio::sync::mpsc::Sender<Result<TlsConn, std::io::Error>>,
) {
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // EMFILE and the like: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = tls.acceptor();
        let tx = tx.clone();
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(conn)) => {
                    let _ = tx.send(Ok(conn)).await;
                }
                Ok(Err(e)) => tracing::warn!(%peer, error = %e, "TLS handshake refused"),
                Err(_) => tracing::warn!(%peer, "TLS handshake timed out"),
            }
        });
    }
}
