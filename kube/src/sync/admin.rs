//! The admin listener (`--admin-listen`): `GET /metrics` (OpenMetrics text) and
//! `GET /healthz` — 200 once every kind has been listed and the folder holds a set, 503
//! before: a startup probe on it lets an arbiter beside it start only with a registry to
//! load.

use super::decide::FILE;
use super::metrics::METRICS;
use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use std::path::PathBuf;
use tokio::net::TcpListener;

const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The answer to `/healthz` (pure).
pub fn health(synced: bool, has_set: bool) -> (StatusCode, &'static str) {
    match (synced, has_set) {
        (true, true) => (StatusCode::OK, "ok\n"),
        (false, _) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "not synced: a kind has not been listed yet\n",
        ),
        (true, false) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "no registry set written yet: the cluster's set is refused (see the log)\n",
        ),
    }
}

pub fn router(out: PathBuf) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|| async { ([(header::CONTENT_TYPE, CONTENT_TYPE)], METRICS.encode()) }),
        )
        .route(
            "/healthz",
            get(move || async move {
                health(METRICS.synced.get() == 1, out.join(FILE).exists()).into_response()
            }),
        )
}

/// Serves until the process ends.
pub async fn serve(listener: TcpListener, out: PathBuf) -> std::io::Result<()> {
    axum::serve(listener, router(out)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_table() {
        let cases = [
            (true, true, StatusCode::OK),
            (false, true, StatusCode::SERVICE_UNAVAILABLE),
            (false, false, StatusCode::SERVICE_UNAVAILABLE),
            (true, false, StatusCode::SERVICE_UNAVAILABLE),
        ];
        for (synced, has_set, want) in cases {
            assert_eq!(health(synced, has_set).0, want, "{synced} {has_set}");
        }
    }
}
