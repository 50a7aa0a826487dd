//! The admin listener (`--admin-listen`, loopback by default): `GET /metrics` for
//! Prometheus. Plaintext HTTP/1.1 and separate from the lock.v1 listener: it carries no
//! identity and no key, only the counts in `metrics.rs`. Expose it to the cluster's
//! Prometheus by address (a pod IP) and a NetworkPolicy, never through the edge.

use crate::ops::metrics::METRICS;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use tokio::net::TcpListener;

/// The OpenMetrics content type Prometheus asks for and parses.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The answer to one admin request (pure: the path decides).
pub fn respond(path: &str) -> (StatusCode, &'static str, String) {
    respond_with(path, || METRICS.encode())
}

/// [`respond`] for another process's metrics (the audit tailer's), encoded by `encode`.
pub fn respond_with(path: &str, encode: fn() -> String) -> (StatusCode, &'static str, String) {
    match path {
        "/metrics" => (StatusCode::OK, CONTENT_TYPE, encode()),
        // What this arbiter serves, for `lockctl registry status` (and people).
        "/status" => (
            StatusCode::OK,
            "application/json",
            serde_json::json!({
                "registry_version": lock_config::ecds::version_text(
                    u64::try_from(METRICS.registry_version.get()).unwrap_or(0)
                ),
                "registry_refused_version": match METRICS.registry_refused_version.get() {
                    0 => None,
                    v => Some(lock_config::ecds::version_text(u64::try_from(v).unwrap_or(0))),
                },
                "epoch": METRICS.epoch.get(),
                "sealed": METRICS.sealed.get() == 1,
                "serving": METRICS.serving.get() == 1,
            })
            .to_string(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found: the admin listener serves /metrics and /status\n".to_owned(),
        ),
    }
}

async fn handle(
    req: Request<hyper::body::Incoming>,
    encode: fn() -> String,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (status, content_type, body) = respond_with(req.uri().path(), encode);
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    if let Ok(v) = content_type.parse() {
        resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    Ok(resp)
}

/// Serves until the process ends.
pub async fn serve(listener: TcpListener) {
    serve_with(listener, || METRICS.encode()).await;
}

/// Serves `/metrics` encoded by `encode` until the process ends.
pub async fn serve_with(listener: TcpListener, encode: fn() -> String) {
    loop {
        let (tcp, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "admin accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        tokio::spawn(async move {
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(tcp), service_fn(|r| handle(r, encode)))
                .await;
        });
    }
}

/// `GET http://{addr}/metrics` (for `lockctl register --metrics`): the exposition text.
pub async fn scrape(addr: &str) -> Result<String, String> {
    get(addr, "/metrics").await
}

/// `GET http://{addr}{path}` on an admin listener (an arbiter's or Envoy's): the body of a
/// 200 answer, within 5 s.
pub async fn get(addr: &str, path: &str) -> Result<String, String> {
    use http_body_util::BodyExt as _;
    let fail = |e: &dyn std::fmt::Display| format!("{addr}: {e}");
    let call = async {
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| fail(&e))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| fail(&e))?;
        tokio::spawn(conn);
        let req = Request::get(path)
            .header(hyper::header::HOST, addr)
            .body(http_body_util::Empty::<Bytes>::new())
            .map_err(|e| fail(&e))?;
        let resp = sender.send_request(req).await.map_err(|e| fail(&e))?;
        if resp.status() != StatusCode::OK {
            return Err(fail(&resp.status()));
        }
        let body = resp.into_body().collect().await.map_err(|e| fail(&e))?;
        String::from_utf8(body.to_bytes().to_vec()).map_err(|e| fail(&e))
    };
    tokio::time::timeout(std::time::Duration::from_secs(5), call)
        .await
        .map_err(|_| fail(&"no answer within 5 s"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_at_its_path_and_nothing_else() {
        let (status, content_type, body) = respond("/metrics");
        assert_eq!(status, StatusCode::OK);
        assert!(content_type.starts_with("application/openmetrics-text"));
        assert!(body.ends_with("# EOF\n"), "{body}");
        let (status, _, body) = respond("/status");
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("\"registry_version\""), "{body}");
        for path in ["/", "/metrics/x", "/debug/pprof"] {
            assert_eq!(respond(path).0, StatusCode::NOT_FOUND, "{path}");
        }
    }
}
