//! The admin server's listener: HTTPS with the given certificate, or plain HTTP on a
//! loopback address only (ID tokens are bearer credentials).

use crate::api::{self, Shared};
use crate::{explorer, page, sign_in};
use axum::Router;
use axum::routing::{get, post};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use std::net::SocketAddr;
use std::path::Path;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

pub fn router(app: Shared) -> Router {
    Router::new()
        .route("/", get(page::index))
        .route("/login", get(sign_in::login))
        .route("/callback", get(sign_in::callback))
        .route("/approve/{id}", post(page::approve))
        .route("/logout", post(sign_in::logout))
        .route("/healthz", get(|| async { "ok" }))
        .route("/explorer", get(explorer::page))
        .route("/explorer/rows", get(explorer::rows))
        .route("/explorer/key", get(explorer::key))
        .route("/explorer/file", post(explorer::file))
        .route("/v1/explorer/holds", get(explorer::api_holds))
        .route("/assets/style.css", get(explorer::style))
        .route("/assets/explorer.js", get(explorer::script))
        .route("/v1/oidc", get(api::oidc_info))
        .route("/v1/requests", get(api::list).post(api::file))
        .route("/v1/requests/{id}/approve", post(api::approve))
        .route(
            "/v1/advances",
            get(api::list_advances).post(api::file_advance),
        )
        .route("/v1/advances/{id}/approve", post(api::approve_advance))
        .with_state(app)
}

#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("{0} is not a loopback address: serve the admin API over TLS (--tls-cert, --tls-key)")]
    PlaintextOffHost(SocketAddr),
    #[error("TLS certificate: {0}")]
    Tls(String),
}

/// The plaintext rule: only where nothing else on the network can read a token.
pub fn plaintext_allowed(addr: SocketAddr) -> Result<(), ListenError> {
    if addr.ip().is_loopback() {
        Ok(())
    } else {
        Err(ListenError::PlaintextOffHost(addr))
    }
}

pub fn tls_acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, ListenError> {
    lock_store::https::acceptor(cert, key).map_err(|e| ListenError::Tls(e.to_string()))
}

/// Serves `app` on `listener` until the process ends.
pub async fn serve(
    listener: TcpListener,
    app: Shared,
    tls: Option<TlsAcceptor>,
) -> std::io::Result<()> {
    let router = router(app);
    let Some(acceptor) = tls else {
        return axum::serve(listener, router).await;
    };
    loop {
        let (tcp, peer) = listener.accept().await?;
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            match acceptor.accept(tcp).await {
                Ok(stream) => {
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                }
                Err(e) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plaintext_only_on_loopback() {
        for (addr, ok) in [
            ("127.0.0.1:8480", true),
            ("[::1]:8480", true),
            ("0.0.0.0:8480", false),
            ("10.1.2.3:8480", false),
            ("[::]:8480", false),
        ] {
            let a: SocketAddr = addr
                .parse()
                .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
            assert_eq!(plaintext_allowed(a).is_ok(), ok, "{addr}");
        }
    }
}
