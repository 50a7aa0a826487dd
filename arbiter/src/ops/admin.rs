//! The arbiter's admin listener (`--admin-listen`, loopback by default): `GET /metrics` for
//! Prometheus and `/status` for `lockctl registry status`, on `lock_store::admin`'s
//! listener. It carries no identity and no key, only the counts in `metrics.rs`.

use crate::ops::metrics::METRICS;
use hyper::StatusCode;
use lock_store::admin::{CONTENT_TYPE, Page};
use tokio::net::TcpListener;

/// The answer to one admin request (pure: the path decides).
pub fn respond(path: &str) -> Page {
    match path {
        "/metrics" => (StatusCode::OK, CONTENT_TYPE, METRICS.encode()),
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

/// Serves until the process ends.
pub async fn serve(listener: TcpListener) {
    lock_store::admin::serve_with(listener, respond).await;
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
