//! The webhook's listener: `POST /validate` (AdmissionReview v1) over HTTPS, as the API
//! server requires; `GET /healthz`. The registry in force is read from its folder at each
//! review, so a new export of the CRs (or a ConfigMap update) applies at once.

use crate::admission::{AdmissionReview, review};
use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use lock_store::registry_files;
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

pub struct Webhook {
    /// The registry in force: reviewed YAML files or exported CRs (one loader reads both).
    pub registry: PathBuf,
}

fn bad_request(message: String) -> Response {
    (StatusCode::BAD_REQUEST, Json(json!({"error": message}))).into_response()
}

async fn validate(
    State(hook): State<Arc<Webhook>>,
    body: Result<Json<AdmissionReview>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Json(ar) = match body {
        Ok(b) => b,
        Err(e) => return bad_request(e.body_text()),
    };
    if ar.api_version != "admission.k8s.io/v1" || ar.kind != "AdmissionReview" {
        return bad_request(format!(
            "expected admission.k8s.io/v1 AdmissionReview, got {} {}",
            ar.api_version, ar.kind
        ));
    }
    let Some(req) = ar.request else {
        return bad_request("an AdmissionReview without a request".into());
    };
    // The registry in force; if it cannot be read, refuse (fail closed: the
    // ValidatingWebhookConfiguration's failurePolicy is Fail too).
    let current = match registry_files::read_sources(&hook.registry) {
        Ok(s) => s,
        Err(e) => {
            let v = crate::admission::Verdict {
                allowed: false,
                message: format!("the webhook cannot read the registry in force: {e}"),
            };
            return Json(v.review(&req.uid)).into_response();
        }
    };
    let verdict = review(&current, &req, registry_files::today());
    tracing::info!(
        uid = %req.uid, operation = %req.operation, kind = %req.kind.kind,
        allowed = verdict.allowed, "admission review"
    );
    Json(verdict.review(&req.uid)).into_response()
}

pub fn router(hook: Arc<Webhook>) -> Router {
    Router::new()
        .route("/validate", post(validate))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(hook)
}

/// Serves HTTPS on `listener` until the process ends.
pub async fn serve(
    listener: TcpListener,
    hook: Arc<Webhook>,
    tls: TlsAcceptor,
) -> std::io::Result<()> {
    let router = router(hook);
    loop {
        let (tcp, peer) = listener.accept().await?;
        let tls = tls.clone();
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            match tls.accept(tcp).await {
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
