//! The approval page: operators sign in at their IdP (authorization code with PKCE, so the
//! IdP's MFA applies) and approve pending force releases in a browser.
//!
//! ```text
//! GET  /             pending requests (holder, age, class, enforcement, warning, reason)
//! GET  /login        -> the IdP's authorize endpoint (state, nonce, S256 code challenge)
//! GET  /callback     code -> ID token (verified like a bearer token, nonce checked) -> session
//! POST /approve/{id} approve as the signed-in operator (CSRF token; never the requester)
//! POST /logout
//! ```
//!
//! A session is a random cookie (HttpOnly, SameSite=Lax, Secure under TLS) naming the
//! verified operator in memory until the ID token's `exp`: one admin server per cluster,
//! a restart signs everyone out. Rendering is pure ([`render_index`], tested).

use crate::api::{AdminError, Listing, Shared, execute, listing};
use crate::oidc::{Operator, TokenRefused};
use crate::store::now_ms;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const COOKIE: &str = "lock_admin";
/// Sign-ins in progress and sessions are bounded: a flood of /login cannot grow memory.
const MAX_ENTRIES: usize = 10_000;
const LOGIN_TTL: Duration = Duration::from_secs(600);

struct PendingLogin {
    verifier: String,
    nonce: String,
    started: Instant,
}

#[derive(Clone)]
pub struct WebSession {
    pub operator: Operator,
    /// The ID token's `exp` (seconds since the epoch): the session ends with it.
    pub expires_at: u64,
    pub csrf: String,
}

pub struct PageState {
    /// This server's URL as the browser reaches it (the IdP redirects to `/callback` here).
    pub public_url: String,
    pub secure_cookie: bool,
    pub http: reqwest::Client,
    logins: Mutex<HashMap<String, PendingLogin>>,
    sessions: Mutex<HashMap<String, WebSession>>,
}

impl PageState {
    pub fn new(public_url: String, secure_cookie: bool, http: reqwest::Client) -> Self {
        PageState {
            public_url: public_url.trim_end_matches('/').to_owned(),
            secure_cookie,
            http,
            logins: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
        }
    }

    fn redirect_uri(&self) -> String {
        format!("{}/callback", self.public_url)
    }

    fn session(&self, headers: &HeaderMap) -> Option<WebSession> {
        let id = cookie(headers, COOKIE)?;
        let now = now_ms() / 1000;
        let mut sessions = self.sessions.lock().ok()?;
        match sessions.get(&id) {
            Some(s) if s.expires_at > now => Some(s.clone()),
            Some(_) => {
                sessions.remove(&id);
                None
            }
            None => None,
        }
    }
}

fn random_text(bytes: usize) -> String {
    let v: Vec<u8> = (0..bytes).map(|_| rand::random::<u8>()).collect();
    URL_SAFE_NO_PAD.encode(v)
}

/// RFC 7636 S256: BASE64URL(SHA256(verifier)).
pub fn code_challenge(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// HTML-escapes text from records (keys, reasons and names come from people).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn age(since_ms: u64, now_ms: u64) -> String {
    let s = now_ms.saturating_sub(since_ms) / 1000;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min", s / 60),
        _ => format!("{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

/// The page (pure): who is signed in, what is pending, what was done.
pub fn render_index(
    session: Option<&WebSession>,
    listing: &Listing,
    now_ms: u64,
    notice: Option<&str>,
) -> String {
    let mut h = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Force release approvals</title>\
         <style>body{font-family:sans-serif;margin:2em;max-width:70em}table{border-collapse:collapse}\
         td,th{border:1px solid #bbb;padding:.3em .6em;text-align:left;vertical-align:top}\
         .warn{background:#fff3cd;border:1px solid #e0a800;padding:.4em}\
         .notice{background:#e7f1ff;padding:.4em}</style></head><body>\
         <h1>Force release approvals</h1>",
    );
    match session {
        None => {
            h.push_str(
                "<p>Sign in with your operator account to see and approve force releases.</p>\
                 <p><a id=\"signin\" href=\"/login\">Sign in</a></p></body></html>",
            );
            return h;
        }
        Some(s) => h.push_str(&format!(
            "<p>Signed in as <b id=\"operator\">{}</b> ({}). \
             <form method=\"post\" action=\"/logout\" style=\"display:inline\">\
             <button>Sign out</button></form></p>",
            escape(&s.operator.name),
            escape(&s.operator.subject)
        )),
    }
    if let Some(n) = notice {
        h.push_str(&format!(
            "<p class=\"notice\" id=\"notice\">{}</p>",
            escape(n)
        ));
    }
    h.push_str("<h2>Pending</h2>");
    if listing.pending.is_empty() {
        h.push_str("<p id=\"none-pending\">No request is waiting.</p>");
    }
    for p in &listing.pending {
        let r = &p.request;
        h.push_str(&format!(
            "<div class=\"request\" id=\"request-{id}\"><h3>{key}</h3><table>\
             <tr><th>Holder</th><td>{holder}</td></tr>\
             <tr><th>Session</th><td>{session}</td></tr>\
             <tr><th>Held for</th><td>{held}</td></tr>\
             <tr><th>Class</th><td>{class}</td></tr>\
             <tr><th>Enforcement</th><td class=\"enforcement\">{enf}</td></tr>\
             <tr><th>Reason</th><td>{reason}</td></tr>\
             <tr><th>Requested by</th><td>{req} ({reqsub}), {filed} ago</td></tr>\
             <tr><th>Also revoke the session</th><td>{revoke}</td></tr></table>",
            id = escape(&r.id),
            key = escape(&r.key),
            holder = escape(&r.hold.spiffe_id),
            session = escape(&r.hold.session),
            held = age(r.hold.acquired_at_ms, now_ms),
            class = escape(&r.hold.class),
            enf = escape(&r.enforcement),
            reason = escape(&r.reason),
            req = escape(&r.requester.name),
            reqsub = escape(&r.requester.subject),
            filed = age(r.filed_at_ms, now_ms),
            revoke = if r.revoke_session {
                "yes: every hold of this session ends"
            } else {
                "no"
            },
        ));
        if let Some(w) = &p.warning {
            h.push_str(&format!("<p class=\"warn\">{}</p>", escape(w)));
        }
        match session {
            Some(s) if s.operator.same_person(&r.requester) => h.push_str(
                "<p class=\"own\">Your request: another operator must approve it.</p>",
            ),
            Some(s) => h.push_str(&format!(
                "<form method=\"post\" action=\"/approve/{id}\">\
                 <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
                 <button class=\"approve\" id=\"approve-{id}\">Approve force release</button></form>",
                id = escape(&r.id),
                csrf = escape(&s.csrf)
            )),
            None => {}
        }
        h.push_str("</div>");
    }
    h.push_str("<h2>Executed (last 24 h)</h2>");
    if listing.executed.is_empty() {
        h.push_str("<p>None.</p>");
    } else {
        h.push_str(
            "<table id=\"executed\"><tr><th>Key</th><th>Requested by</th><th>Approved by</th>\
             <th>Enforcement</th><th>Reason</th><th>When</th></tr>",
        );
        for r in &listing.executed {
            h.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} ago</td></tr>",
                escape(&r.key),
                escape(&r.requester.name),
                escape(&r.approver.name),
                escape(&r.enforcement),
                escape(&r.reason),
                age(r.executed_at_ms, now_ms)
            ));
        }
        h.push_str("</table>");
    }
    h.push_str("</body></html>");
    h
}

fn page_error(status: StatusCode, message: &str) -> Response {
    (
        status,
        Html(format!(
            "<!doctype html><html><body><h1>Refused</h1><p id=\"error\">{}</p>\
             <p><a href=\"/\">Back</a></p></body></html>",
            escape(message)
        )),
    )
        .into_response()
}

#[derive(Deserialize)]
pub struct IndexQuery {
    done: Option<String>,
}

pub async fn index(
    State(app): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<IndexQuery>,
) -> Response {
    let session = app.page.session(&headers);
    let listing = match session {
        Some(_) => match listing(&app.store).await {
            Ok(l) => l,
            Err(e) => return page_error(e.status(), &e.to_string()),
        },
        None => Listing {
            pending: Vec::new(),
            executed: Vec::new(),
        },
    };
    let notice = q.done.map(|id| format!("Force release {id} executed."));
    Html(render_index(
        session.as_ref(),
        &listing,
        now_ms(),
        notice.as_deref(),
    ))
    .into_response()
}

pub async fn login(State(app): State<Shared>) -> Response {
    let state = random_text(24);
    let verifier = random_text(48);
    let nonce = random_text(24);
    let challenge = code_challenge(&verifier);
    {
        let Ok(mut logins) = app.page.logins.lock() else {
            return page_error(StatusCode::INTERNAL_SERVER_ERROR, "sign-in unavailable");
        };
        logins.retain(|_, l| l.started.elapsed() < LOGIN_TTL);
        if logins.len() >= MAX_ENTRIES {
            return page_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many sign-ins in progress; try again shortly",
            );
        }
        logins.insert(
            state.clone(),
            PendingLogin {
                verifier,
                nonce: nonce.clone(),
                started: Instant::now(),
            },
        );
    }
    let d = &app.verifier.discovery;
    let url = reqwest::Url::parse_with_params(
        &d.authorization_endpoint,
        &[
            ("response_type", "code"),
            ("client_id", app.verifier.settings.client_id.as_str()),
            ("redirect_uri", app.page.redirect_uri().as_str()),
            ("scope", "openid profile"),
            ("state", state.as_str()),
            ("nonce", nonce.as_str()),
            ("code_challenge", challenge.as_str()),
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
    let pending = app
        .page
        .logins
        .lock()
        .ok()
        .and_then(|mut l| l.remove(&state))
        .filter(|l| l.started.elapsed() < LOGIN_TTL);
    let Some(pending) = pending else {
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
    let id = random_text(32);
    let session = WebSession {
        operator: verified.operator,
        expires_at: verified.expires_at,
        csrf: random_text(24),
    };
    {
        let Ok(mut sessions) = app.page.sessions.lock() else {
            return page_error(StatusCode::INTERNAL_SERVER_ERROR, "sessions unavailable");
        };
        let now = now_ms() / 1000;
        sessions.retain(|_, s| s.expires_at > now);
        if sessions.len() >= MAX_ENTRIES {
            return page_error(StatusCode::SERVICE_UNAVAILABLE, "too many sessions");
        }
        tracing::info!(operator = %session.operator.subject, "operator signed in to the approval page");
        sessions.insert(id.clone(), session);
    }
    let cookie = format!(
        "{COOKIE}={id}; Path=/; HttpOnly; SameSite=Lax{}",
        if app.page.secure_cookie {
            "; Secure"
        } else {
            ""
        }
    );
    let mut resp = Redirect::to("/").into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp
}

#[derive(Deserialize)]
pub struct ApproveForm {
    csrf: String,
}

pub async fn approve(
    State(app): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<ApproveForm>,
) -> Response {
    let Some(session) = app.page.session(&headers) else {
        return page_error(StatusCode::UNAUTHORIZED, "sign in first");
    };
    if form.csrf != session.csrf {
        return page_error(StatusCode::FORBIDDEN, "the form is stale; reload the page");
    }
    match execute(&app, &id, &session.operator).await {
        Ok(done) => {
            let mut msg = format!("/?done={}", done.executed.record.id);
            if done.executed.session_revoke_error.is_some() {
                msg.push_str("&revoke=failed");
            }
            Redirect::to(&msg).into_response()
        }
        Err(e) => page_error(e.status(), &e.to_string()),
    }
}

pub async fn logout(State(app): State<Shared>, headers: HeaderMap) -> Response {
    if let (Some(id), Ok(mut sessions)) = (cookie(&headers, COOKIE), app.page.sessions.lock()) {
        sessions.remove(&id);
    }
    let mut resp = Redirect::to("/").into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("{COOKIE}=; Path=/; Max-Age=0")) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Pending;
    use crate::request::{ForceRequest, HoldView, warning};

    fn op(sub: &str) -> Operator {
        Operator {
            issuer: "i".into(),
            subject: sub.into(),
            name: format!("{sub} <b>"),
        }
    }

    fn listing(enforcement: &str) -> Listing {
        Listing {
            pending: vec![Pending {
                request: ForceRequest {
                    id: "abc".into(),
                    key: "pay/<script>".into(),
                    reason: "stuck & leaking".into(),
                    revoke_session: false,
                    requester: op("alice"),
                    filed_at_ms: 1_000,
                    expires_at_ms: 9_999_999,
                    hold: HoldView {
                        revision: 4,
                        spiffe_id: "spiffe://td/ns/pay/sa/w".into(),
                        session: "69".into(),
                        class: "ledger".into(),
                        acquired_at_ms: 0,
                    },
                    enforcement: enforcement.into(),
                },
                warning: warning(enforcement).map(str::to_owned),
            }],
            executed: Vec::new(),
        }
    }

    fn session(sub: &str) -> WebSession {
        WebSession {
            operator: op(sub),
            expires_at: u64::MAX,
            csrf: "tok".into(),
        }
    }

    #[test]
    fn page_table() {
        let signed_out = render_index(None, &listing("fenced"), 0, None);
        assert!(signed_out.contains("id=\"signin\"") && !signed_out.contains("pay/"));

        let bob = render_index(Some(&session("bob")), &listing("advisory"), 125_000, None);
        assert!(
            bob.contains("id=\"approve-abc\""),
            "another operator may approve"
        );
        assert!(bob.contains("two writers"), "advisory warning shown");
        assert!(bob.contains("2 min"), "hold age shown");
        assert!(
            bob.contains("pay/&lt;script&gt;") && !bob.contains("<script>"),
            "escaped"
        );
        assert!(bob.contains("bob &lt;b&gt;"), "names escaped");

        let alice = render_index(Some(&session("alice")), &listing("fenced"), 0, None);
        assert!(
            !alice.contains("approve-abc"),
            "no approve button for the requester"
        );
        assert!(alice.contains("another operator must approve"));
        assert!(!alice.contains("class=\"warn\""), "fenced: no warning");
    }

    #[test]
    fn pkce_s256_matches_rfc7636_appendix_b() {
        assert_eq!(
            code_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn cookies_are_found_among_others() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; lock_admin=xyz; b=2"),
        );
        assert_eq!(cookie(&h, COOKIE).as_deref(), Some("xyz"));
        assert_eq!(cookie(&h, "c"), None);
    }
}
