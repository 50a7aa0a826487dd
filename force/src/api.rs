//! The admin API (JSON, for `lockctl force-release`): every call carries the operator's ID
//! token as `Authorization: Bearer`. Its own listener, never the workload path: Envoy's
//! edge routes only lock.v1 to the arbiters, and this server holds no route to them.
//!
//! ```text
//! GET  /v1/oidc                   the issuer and client ID (for lockctl's device sign-in)
//! GET  /v1/requests               {pending: [...], executed: [...]}      any operator
//! POST /v1/requests               {key, reason, revoke_session} -> 201   any operator
//! POST /v1/requests/{id}/approve  -> 200 {record, warning}               another operator
//! GET  /v1/advances               {pending: [...]}                        any operator
//! POST /v1/advances               {from, reason} -> 201                   any operator
//! POST /v1/advances/{id}/approve  -> 200 {record}  (the new epoch record) another operator
//! ```

use crate::advance::AdvanceRequest;
use crate::advance_store::AdvanceStore;
use crate::oidc::{Access, Operator, TokenRefused, Verifier};
use crate::request::{ForceRecord, ForceRequest, Refusal, warning};
use crate::store::{Executed, ForceError, ForceStore};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Everything a request can fail with, and its one mapping to an HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error(transparent)]
    Token(#[from] TokenRefused),
    #[error(transparent)]
    Force(#[from] ForceError),
    #[error("{0}")]
    BadRequest(String),
}

impl AdminError {
    pub fn status(&self) -> StatusCode {
        use StatusCode as S;
        match self {
            AdminError::Token(TokenRefused::JwksUnavailable(_)) => S::SERVICE_UNAVAILABLE,
            AdminError::Token(TokenRefused::NoRole(_) | TokenRefused::NoMfa(..)) => S::FORBIDDEN,
            AdminError::Token(_) => S::UNAUTHORIZED,
            AdminError::Force(ForceError::Store(_)) => S::SERVICE_UNAVAILABLE,
            AdminError::Force(ForceError::Refused(r)) => match r {
                Refusal::InvalidKey(_) | Refusal::ReasonRequired | Refusal::ReasonTooLong => {
                    S::BAD_REQUEST
                }
                Refusal::SamePerson => S::FORBIDDEN,
                Refusal::NotFound => S::NOT_FOUND,
                Refusal::NotHeld
                | Refusal::Expired
                | Refusal::HoldChanged { .. }
                | Refusal::HoldGone
                | Refusal::NoEpoch
                | Refusal::EpochMoved { .. }
                | Refusal::ClusterChanged { .. }
                | Refusal::EpochSpaceExhausted
                | Refusal::AllocatorBehind { .. } => S::CONFLICT,
                // This lock-admin's configuration, not the request, is what is wrong.
                Refusal::CoordRequired { .. } => S::SERVICE_UNAVAILABLE,
            },
            AdminError::BadRequest(_) => S::BAD_REQUEST,
        }
    }

    /// A stable name for scripts and tests.
    pub fn code(&self) -> &'static str {
        match self {
            AdminError::Token(TokenRefused::NoRole(_)) => "NO_ROLE",
            AdminError::Token(TokenRefused::NoMfa(..)) => "NO_MFA",
            AdminError::Token(TokenRefused::Expired) => "TOKEN_EXPIRED",
            AdminError::Token(TokenRefused::NotYetValid) => "TOKEN_NOT_YET_VALID",
            AdminError::Token(TokenRefused::WrongAudience) => "WRONG_AUDIENCE",
            AdminError::Token(TokenRefused::WrongIssuer) => "WRONG_ISSUER",
            AdminError::Token(TokenRefused::JwksUnavailable(_)) => "IDP_UNAVAILABLE",
            AdminError::Token(_) => "BAD_TOKEN",
            AdminError::Force(ForceError::Store(_)) => "STORE_UNAVAILABLE",
            AdminError::Force(ForceError::Refused(r)) => match r {
                Refusal::InvalidKey(_) => "INVALID_KEY",
                Refusal::ReasonRequired | Refusal::ReasonTooLong => "BAD_REASON",
                Refusal::NotHeld => "NOT_HELD",
                Refusal::SamePerson => "SAME_PERSON",
                Refusal::Expired => "REQUEST_EXPIRED",
                Refusal::NotFound => "NOT_FOUND",
                Refusal::HoldChanged { .. } => "HOLD_CHANGED",
                Refusal::HoldGone => "HOLD_GONE",
                Refusal::NoEpoch => "NO_EPOCH",
                Refusal::EpochMoved { .. } => "EPOCH_MOVED",
                Refusal::ClusterChanged { .. } => "CLUSTER_CHANGED",
                Refusal::EpochSpaceExhausted => "EPOCH_SPACE_EXHAUSTED",
                Refusal::CoordRequired { .. } => "COORD_REQUIRED",
                Refusal::AllocatorBehind { .. } => "ALLOCATOR_BEHIND",
            },
            AdminError::BadRequest(_) => "BAD_REQUEST",
        }
    }
}

impl From<Refusal> for AdminError {
    fn from(r: Refusal) -> Self {
        AdminError::Force(ForceError::Refused(r))
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: String,
    pub message: String,
}

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            code: self.code().into(),
            message: self.to_string(),
        };
        (self.status(), Json(body)).into_response()
    }
}

pub struct App {
    pub store: ForceStore,
    /// Two-person epoch advances (ADR-03), on the same etcd credential.
    pub advances: AdvanceStore,
    pub verifier: Verifier,
    pub page: crate::web_session::PageState,
    /// The audit store's URL (a reader's): the explorer's key page reads a key's latest
    /// rows, connecting per page (an admin page is rare traffic; a store down for a while
    /// costs that page its history, nothing else).
    pub audit_db: Option<String>,
}

pub type Shared = Arc<App>;

/// The operator a bearer ID token names: one with the operator role (file, approve).
pub async fn operator(app: &App, headers: &HeaderMap) -> Result<Operator, AdminError> {
    let (who, access) = reader(app, headers).await?;
    match access {
        Access::Act => Ok(who),
        Access::View => Err(TokenRefused::NoRole(app.verifier.settings.role.clone()).into()),
    }
}

/// Whoever a bearer ID token names with either role: reading needs no more.
pub async fn reader(app: &App, headers: &HeaderMap) -> Result<(Operator, Access), AdminError> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or(TokenRefused::Missing)?;
    let v = app.verifier.verify(token).await?;
    Ok((v.operator, v.access))
}

#[derive(Debug, Serialize, Deserialize)]
pub struct OidcInfo {
    pub issuer: String,
    pub client_id: String,
    pub token_endpoint: String,
    pub device_authorization_endpoint: Option<String>,
}

pub async fn oidc_info(State(app): State<Shared>) -> Json<OidcInfo> {
    let d = &app.verifier.discovery;
    Json(OidcInfo {
        issuer: d.issuer.clone(),
        client_id: app.verifier.settings.client_id.clone(),
        token_endpoint: d.token_endpoint.clone(),
        device_authorization_endpoint: d.device_authorization_endpoint.clone(),
    })
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Pending {
    #[serde(flatten)]
    pub request: ForceRequest,
    pub warning: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Listing {
    pub pending: Vec<Pending>,
    pub executed: Vec<ForceRecord>,
}

pub async fn list(
    State(app): State<Shared>,
    headers: HeaderMap,
) -> Result<Json<Listing>, AdminError> {
    operator(&app, &headers).await?;
    Ok(Json(listing(&app.store).await?))
}

pub async fn listing(store: &ForceStore) -> Result<Listing, AdminError> {
    let pending = store
        .pending()
        .await?
        .into_iter()
        .map(|r| Pending {
            warning: warning(&r.enforcement).map(str::to_owned),
            request: r,
        })
        .collect();
    Ok(Listing {
        pending,
        executed: store.executed().await?,
    })
}

#[derive(Debug, Serialize, Deserialize)]
pub struct FileBody {
    pub key: String,
    pub reason: String,
    #[serde(default)]
    pub revoke_session: bool,
}

pub async fn file(
    State(app): State<Shared>,
    headers: HeaderMap,
    body: Result<Json<FileBody>, axum::extract::rejection::JsonRejection>,
) -> Result<(StatusCode, Json<Pending>), AdminError> {
    let requester = operator(&app, &headers).await?;
    let Json(body) = body.map_err(|e| AdminError::BadRequest(e.body_text()))?;
    let req = app
        .store
        .file(&body.key, &body.reason, body.revoke_session, &requester)
        .await?;
    tracing::info!(
        id = %req.id, key = %req.key, requester = %requester.subject,
        revoke_session = req.revoke_session, "force release filed"
    );
    Ok((
        StatusCode::CREATED,
        Json(Pending {
            warning: warning(&req.enforcement).map(str::to_owned),
            request: req,
        }),
    ))
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Approved {
    #[serde(flatten)]
    pub executed: ExecutedView,
    pub warning: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ExecutedView {
    pub record: ForceRecord,
    pub session_revoke_error: Option<String>,
}

pub async fn approve(
    State(app): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Approved>, AdminError> {
    let approver = operator(&app, &headers).await?;
    let done = execute(&app, &id, &approver).await?;
    Ok(Json(done))
}

/// Approval by `approver` (API or page), logged.
pub async fn execute(app: &App, id: &str, approver: &Operator) -> Result<Approved, AdminError> {
    match app.store.approve(id, approver).await {
        Ok(Executed {
            record,
            session_revoke_error,
        }) => {
            tracing::warn!(
                id = %record.id, key = %record.key, requester = %record.requester.subject,
                approver = %record.approver.subject, enforcement = %record.enforcement,
                hold_revision = record.hold_revision, "force release executed"
            );
            Ok(Approved {
                warning: warning(&record.enforcement).map(str::to_owned),
                executed: ExecutedView {
                    record,
                    session_revoke_error,
                },
            })
        }
        Err(e) => {
            tracing::info!(id, approver = %approver.subject, error = %e, "force release refused");
            Err(e.into())
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct AdvanceListing {
    pub pending: Vec<AdvanceRequest>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct AdvanceBody {
    pub from: u16,
    pub reason: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Advanced {
    /// The new epoch record, naming both operators.
    pub record: lock_store::layout::EpochRecord,
}

pub async fn list_advances(
    State(app): State<Shared>,
    headers: HeaderMap,
) -> Result<Json<AdvanceListing>, AdminError> {
    operator(&app, &headers).await?;
    Ok(Json(AdvanceListing {
        pending: app.advances.pending().await?,
    }))
}

pub async fn file_advance(
    State(app): State<Shared>,
    headers: HeaderMap,
    body: Result<Json<AdvanceBody>, axum::extract::rejection::JsonRejection>,
) -> Result<(StatusCode, Json<AdvanceRequest>), AdminError> {
    let requester = operator(&app, &headers).await?;
    let Json(body) = body.map_err(|e| AdminError::BadRequest(e.body_text()))?;
    let req = app
        .advances
        .file(body.from, &body.reason, &requester)
        .await?;
    tracing::warn!(
        id = %req.id, from = req.from, cluster = %req.cluster_id,
        requester = %requester.subject, "epoch advance filed"
    );
    Ok((StatusCode::CREATED, Json(req)))
}

pub async fn approve_advance(
    State(app): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Advanced>, AdminError> {
    let approver = operator(&app, &headers).await?;
    match app.advances.approve(&id, &approver).await {
        Ok(record) => {
            tracing::warn!(
                id, epoch = record.epoch, cluster = %record.cluster_id,
                approver = %approver.subject, "epoch advance executed: every hold ended"
            );
            Ok(Json(Advanced { record }))
        }
        Err(e) => {
            tracing::info!(id, approver = %approver.subject, error = %e, "epoch advance refused");
            Err(e.into())
        }
    }
}
