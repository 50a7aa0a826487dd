//! An admin listener (the arbiter's `--admin-listen`, lock-audit's): plaintext HTTP/1.1,
//! loopback by default, separate from the lock.v1 listener: it carries no identity and no
//! key, only counts. Expose it to the cluster's Prometheus by address (a pod IP) and a
//! NetworkPolicy, never through the edge. Each binary gives its own pages ([`Page`]).
//!
//! And its client: `GET` on an admin listener (an arbiter's or Envoy's) for lockctl, and the
//! grants by class read from an arbiter's exposition.

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use tokio::net::TcpListener;

/// The OpenMetrics content type Prometheus asks for and parses.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// One answer: its status, content type and body.
pub type Page = (StatusCode, &'static str, String);

/// The answer of a listener that serves `/metrics` alone, encoded by `encode`.
pub fn metrics_only(path: &str, encode: impl FnOnce() -> String) -> Page {
    match path {
        "/metrics" => (StatusCode::OK, CONTENT_TYPE, encode()),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found: the admin listener serves /metrics\n".to_owned(),
        ),
    }
}

async fn handle(
    req: Request<hyper::body::Incoming>,
    respond: fn(&str) -> Page,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (status, content_type, body) = respond(req.uri().path());
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    if let Ok(v) = content_type.parse() {
        resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    Ok(resp)
}

/// Serves the pages `respond` gives by path, until the process ends.
pub async fn serve_with(listener: TcpListener, respond: fn(&str) -> Page) {
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
                .serve_connection(TokioIo::new(tcp), service_fn(|r| handle(r, respond)))
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

/// Grants by class in an arbiter's exposition text (`lock_arbiter_grants_total{class="..."} N`
/// lines): what `lockctl register --metrics` sums over the arbiters. The arbiter's metrics
/// test reads its own exposition back with it.
pub fn grants_by_class(text: &str) -> std::collections::HashMap<String, u64> {
    let mut out = std::collections::HashMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("lock_arbiter_grants_total{class=\"") else {
            continue;
        };
        let Some((class, rest)) = rest.split_once("\"}") else {
            continue;
        };
        let value = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok());
        if let Some(v) = value {
            // Counters are whole numbers; the exposition may write them as floats.
            *out.entry(class.to_owned()).or_insert(0) += v as u64;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_alone_at_its_path() {
        let (status, content_type, body) = metrics_only("/metrics", || "# EOF\n".to_owned());
        assert_eq!(status, StatusCode::OK);
        assert!(content_type.starts_with("application/openmetrics-text"));
        assert_eq!(body, "# EOF\n");
        for path in ["/", "/status", "/metrics/x"] {
            assert_eq!(
                metrics_only(path, String::new).0,
                StatusCode::NOT_FOUND,
                "{path}"
            );
        }
    }

    #[test]
    fn grants_are_read_back_by_class() {
        let text = "# TYPE lock_arbiter_grants counter\n\
            lock_arbiter_grants_total{class=\"pay-ledger\"} 7\n\
            lock_arbiter_grants_total{class=\"orders\"} 2.0\n\
            lock_arbiter_grants_created{class=\"orders\"} 1.7e9\n\
            lock_arbiter_grants_total{class=\"broken\"\n\
            lock_arbiter_releases_total{class=\"orders\"} 9\n";
        let g = grants_by_class(text);
        assert_eq!(g.get("pay-ledger"), Some(&7));
        assert_eq!(g.get("orders"), Some(&2));
        assert_eq!(g.len(), 2);
    }
}
