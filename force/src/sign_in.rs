//! The sign-in routes of the approval page: authorization code with PKCE at the operators'
//! IdP, so the IdP's MFA applies, then a cookie session ([`crate::web_session`]).
//!
//! ```text
//! GET  /login     -> the IdP's authorize endpoint (state, nonce, S256 code challenge)
//! GET  /callback  code -> ID token (verified like a bearer token, nonce checked) -> session
//! POST /logout
//! ```

use crate::api::{AdminError, Shared};
use crate::oidc::TokenRefused;
use crate::page::page_error;
use crate::web_session::Crowded;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

fn crowded(e: Crowded) -> Response {
    let status = match e {
        Crowded::Poisoned => StatusCode::INTERNAL_SERVER_ERROR,
        Crowded::SignIns | Crowded::Sessions => StatusCode::SERVICE_UNAVAILABLE,
    };
    page_error(status, &e.to_string())
}

fn redirect_setting_cookie(to: &str, cookie: &str) -> Response {
    let mut resp = Redirect::to(to).into_response();
    if let Ok(v) = HeaderValue::from_str(cookie) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp
}

pub async fn login(State(app): State<Shared>) -> Response {
    let start = match app.page.begin_login() {
        Ok(s) => s,
        Err(e) => return crowded(e),
    };
    let d = &app.verifier.discovery;
    let url = reqwest::Url::parse_with_params(
        &d.authorization_endpoint,
        &[
            ("response_type", "code"),
            ("client_id", app.verifier.settings.client_id.as_str()),
            ("redirect_uri", app.page.redirect_uri().as_str()),
            ("scope", "openid profile"),
            ("state", start.state.as_str()),
            ("nonce", start.nonce.as_str()),
            ("code_challenge", start.challenge.as_str()),
            ("code_challenge_method", "S256"),
        ],
    );
    match url {
        Ok(u) => Redirect::to(u.as_str()).into_response(),
        Err(e) => page_error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

#[derive(Deserialize)]
pub struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
}

#[derive(Deserialize)]
struct TokenResponse {
    id_token: Option<String>,
}

pub async fn callback(State(app): State<Shared>, Query(q): Query<CallbackQuery>) -> Response {
    if let Some(e) = q.error {
        return page_error(StatusCode::UNAUTHORIZED, &format!("the IdP refused: {e}"));
    }
    let (Some(code), Some(state)) = (q.code, q.state) else {
        return page_error(StatusCode::BAD_REQUEST, "no code or state");
    };
    let Some(pending) = app.page.take_login(&state) else {
        return page_error(
            StatusCode::BAD_REQUEST,
            "unknown or expired sign-in; start again",
        );
    };
    let client_id = app.verifier.settings.client_id.clone();
    let redirect_uri = app.page.redirect_uri();
    let answer = app
        .page
        .http
        .post(&app.verifier.discovery.token_endpoint)
        .form(&[
            ("grant_type", "authorization_code"),
            ("code", code.as_str()),
            ("redirect_uri", redirect_uri.as_str()),
            ("client_id", client_id.as_str()),
            ("code_verifier", pending.verifier.as_str()),
        ])
        .send()
        .await;
    let token = match answer {
        Ok(r) if r.status().is_success() => r
            .json::<TokenResponse>()
            .await
            .ok()
            .and_then(|t| t.id_token),
        Ok(r) => {
            return page_error(
                StatusCode::UNAUTHORIZED,
                &format!("the IdP's token endpoint answered {}", r.status()),
            );
        }
        Err(e) => return page_error(StatusCode::BAD_GATEWAY, &e.to_string()),
    };
    let Some(token) = token else {
        return page_error(StatusCode::UNAUTHORIZED, "the IdP returned no ID token");
    };
    let verified = match app.verifier.verify(&token).await {
        Ok(v) => v,
        Err(e) => {
            let e = AdminError::from(e);
            return page_error(e.status(), &e.to_string());
        }
    };
    if verified.nonce.as_deref() != Some(pending.nonce.as_str()) {
        let e = AdminError::from(TokenRefused::Malformed);
        return page_error(e.status(), "the ID token's nonce is not this sign-in's");
    }
    match app
        .page
        .open_session(verified.operator, verified.access, verified.expires_at)
    {
        Ok(cookie) => redirect_setting_cookie("/", &cookie),
        Err(e) => crowded(e),
    }
}

pub async fn logout(State(app): State<Shared>, headers: HeaderMap) -> Response {
    let cookie = app.page.close_session(&headers);
    redirect_setting_cookie("/", &cookie)
}
