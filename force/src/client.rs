//! `lockctl force-release`'s side of the admin API, and its sign-in: an ID token from a
//! file or `LOCK_ID_TOKEN`, or the OAuth device flow (RFC 8628) against the issuer the
//! admin server names: lockctl prints a URL and a code, the operator signs in (with MFA)
//! in any browser, and lockctl gets the ID token.

use crate::advance::AdvanceRequest;
use crate::api::{AdvanceListing, Advanced, Approved, ErrorBody, Listing, OidcInfo, Pending};
use serde::Deserialize;
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The admin API refused (its code and message).
    #[error("{code}: {message}")]
    Refused {
        status: u16,
        code: String,
        message: String,
    },
    #[error("admin API unreachable: {0}")]
    Unreachable(String),
    #[error("sign-in: {0}")]
    SignIn(String),
}

pub struct AdminClient {
    base: String,
    http: reqwest::Client,
    token: String,
}

async fn answer<T: for<'de> Deserialize<'de>>(
    resp: Result<reqwest::Response, reqwest::Error>,
) -> Result<T, ClientError> {
    let resp = resp.map_err(|e| ClientError::Unreachable(e.to_string()))?;
    let status = resp.status();
    if status.is_success() {
        return resp
            .json()
            .await
            .map_err(|e| ClientError::Unreachable(e.to_string()));
    }
    let body: ErrorBody = resp.json().await.unwrap_or(ErrorBody {
        code: "HTTP".into(),
        message: format!("HTTP {status}"),
    });
    Err(ClientError::Refused {
        status: status.as_u16(),
        code: body.code,
        message: body.message,
    })
}

impl AdminClient {
    pub fn new(base: &str, token: String) -> Self {
        AdminClient {
            base: base.trim_end_matches('/').to_owned(),
            http: reqwest::Client::new(),
            token,
        }
    }

    pub async fn file(
        &self,
        key: &str,
        reason: &str,
        revoke_session: bool,
    ) -> Result<Pending, ClientError> {
        answer(
            self.http
                .post(format!("{}/v1/requests", self.base))
                .bearer_auth(&self.token)
                .json(&serde_json::json!({
                    "key": key, "reason": reason, "revoke_session": revoke_session
                }))
                .send()
                .await,
        )
        .await
    }

    pub async fn list(&self) -> Result<Listing, ClientError> {
        answer(
            self.http
                .get(format!("{}/v1/requests", self.base))
                .bearer_auth(&self.token)
                .send()
                .await,
        )
        .await
    }

    pub async fn file_advance(
        &self,
        from: u16,
        reason: &str,
    ) -> Result<AdvanceRequest, ClientError> {
        answer(
            self.http
                .post(format!("{}/v1/advances", self.base))
                .bearer_auth(&self.token)
                .json(&serde_json::json!({"from": from, "reason": reason}))
                .send()
                .await,
        )
        .await
    }

    pub async fn list_advances(&self) -> Result<AdvanceListing, ClientError> {
        answer(
            self.http
                .get(format!("{}/v1/advances", self.base))
                .bearer_auth(&self.token)
                .send()
                .await,
        )
        .await
    }

    pub async fn approve_advance(&self, id: &str) -> Result<Advanced, ClientError> {
        answer(
            self.http
                .post(format!("{}/v1/advances/{id}/approve", self.base))
                .bearer_auth(&self.token)
                .send()
                .await,
        )
        .await
    }

    pub async fn approve(&self, id: &str) -> Result<Approved, ClientError> {
        answer(
            self.http
                .post(format!("{}/v1/requests/{id}/approve", self.base))
                .bearer_auth(&self.token)
                .send()
                .await,
        )
        .await
    }
}

#[derive(Deserialize)]
struct DeviceStart {
    device_code: String,
    user_code: String,
    verification_uri: String,
    #[serde(default)]
    verification_uri_complete: Option<String>,
    #[serde(default = "five")]
    interval: u64,
    expires_in: u64,
}

fn five() -> u64 {
    5
}

#[derive(Deserialize)]
struct TokenAnswer {
    #[serde(default)]
    id_token: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

/// Signs in by the device flow; `show` is told the URL and code to give the operator.
/// Bounded by the code's own expiry.
pub async fn device_sign_in(admin: &str, show: impl Fn(&str, &str)) -> Result<String, ClientError> {
    let http = reqwest::Client::new();
    let info: OidcInfo = answer(
        http.get(format!("{}/v1/oidc", admin.trim_end_matches('/')))
            .send()
            .await,
    )
    .await?;
    let Some(device) = info.device_authorization_endpoint else {
        return Err(ClientError::SignIn(
            "the IdP offers no device flow: pass --id-token-file".into(),
        ));
    };
    let start: DeviceStart = http
        .post(&device)
        .form(&[
            ("client_id", info.client_id.as_str()),
            ("scope", "openid profile"),
        ])
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| ClientError::SignIn(e.to_string()))?
        .json()
        .await
        .map_err(|e| ClientError::SignIn(e.to_string()))?;
    show(
        start
            .verification_uri_complete
            .as_deref()
            .unwrap_or(&start.verification_uri),
        &start.user_code,
    );
    let deadline = Instant::now() + Duration::from_secs(start.expires_in.min(1800));
    let mut interval = Duration::from_secs(start.interval.clamp(1, 60));
    while Instant::now() < deadline {
        tokio::time::sleep(interval).await;
        let answer: TokenAnswer = http
            .post(&info.token_endpoint)
            .form(&[
                ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"),
                ("device_code", start.device_code.as_str()),
                ("client_id", info.client_id.as_str()),
            ])
            .send()
            .await
            .map_err(|e| ClientError::SignIn(e.to_string()))?
            .json()
            .await
            .map_err(|e| ClientError::SignIn(e.to_string()))?;
        match (answer.id_token, answer.error.as_deref()) {
            (Some(t), _) => return Ok(t),
            (None, Some("authorization_pending")) => {}
            (None, Some("slow_down")) => interval += Duration::from_secs(5),
            (None, Some(e)) => return Err(ClientError::SignIn(e.to_owned())),
            (None, None) => return Err(ClientError::SignIn("no ID token".into())),
        }
    }
    Err(ClientError::SignIn("the device code expired".into()))
}
