//! The approval page's sign-in state: sign-ins in progress (PKCE verifier and nonce, keyed
//! by `state`) and signed-in browser sessions (a random cookie naming the verified operator
//! in memory until the ID token's `exp`). One admin server per cluster: a restart signs
//! everyone out. Both maps are bounded, so a flood of /login cannot grow memory.
//!
//! It knows nothing of the routes; `sign_in.rs` drives it and `page.rs` reads it.

use crate::oidc::Operator;
use crate::store::now_ms;
use axum::http::{HeaderMap, header};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const COOKIE: &str = "lock_admin";
const MAX_ENTRIES: usize = 10_000;
const LOGIN_TTL: Duration = Duration::from_secs(600);

/// Why a sign-in or a session could not be recorded (the page shows it, 503 or 500).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Crowded {
    #[error("too many sign-ins in progress; try again shortly")]
    SignIns,
    #[error("too many sessions")]
    Sessions,
    #[error("sign-in state unavailable")]
    Poisoned,
}

/// A sign-in between /login and /callback.
pub struct PendingLogin {
    pub verifier: String,
    pub nonce: String,
    started: Instant,
}

/// What /login sends to the IdP.
pub struct LoginStart {
    pub state: String,
    pub nonce: String,
    pub challenge: String,
}

#[derive(Clone)]
pub struct WebSession {
    pub operator: Operator,
    /// Read only (the viewer role) or read and act (the operator role).
    pub access: crate::oidc::Access,
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

    pub fn redirect_uri(&self) -> String {
        format!("{}/callback", self.public_url)
    }

    /// The signed-in session the request's cookie names, if it has not expired.
    pub fn session(&self, headers: &HeaderMap) -> Option<WebSession> {
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

    /// A new sign-in: fresh state, PKCE verifier and nonce, remembered for LOGIN_TTL.
    pub fn begin_login(&self) -> Result<LoginStart, Crowded> {
        let state = random_text(24);
        let verifier = random_text(48);
        let nonce = random_text(24);
        let challenge = code_challenge(&verifier);
        let mut logins = self.logins.lock().map_err(|_| Crowded::Poisoned)?;
        logins.retain(|_, l| l.started.elapsed() < LOGIN_TTL);
        if logins.len() >= MAX_ENTRIES {
            return Err(Crowded::SignIns);
        }
        logins.insert(
            state.clone(),
            PendingLogin {
                verifier,
                nonce: nonce.clone(),
                started: Instant::now(),
            },
        );
        Ok(LoginStart {
            state,
            nonce,
            challenge,
        })
    }

    /// The sign-in `state` names, once (a replayed callback finds nothing).
    pub fn take_login(&self, state: &str) -> Option<PendingLogin> {
        self.logins
            .lock()
            .ok()
            .and_then(|mut l| l.remove(state))
            .filter(|l| l.started.elapsed() < LOGIN_TTL)
    }

    /// Records a verified operator's session; returns its `Set-Cookie` value.
    pub fn open_session(
        &self,
        operator: Operator,
        access: crate::oidc::Access,
        expires_at: u64,
    ) -> Result<String, Crowded> {
        let id = random_text(32);
        let session = WebSession {
            operator,
            access,
            expires_at,
            csrf: random_text(24),
        };
        let mut sessions = self.sessions.lock().map_err(|_| Crowded::Poisoned)?;
        let now = now_ms() / 1000;
        sessions.retain(|_, s| s.expires_at > now);
        if sessions.len() >= MAX_ENTRIES {
            return Err(Crowded::Sessions);
        }
        tracing::info!(operator = %session.operator.subject, "operator signed in to the approval page");
        sessions.insert(id.clone(), session);
        Ok(format!(
            "{COOKIE}={id}; Path=/; HttpOnly; SameSite=Lax{}",
            if self.secure_cookie { "; Secure" } else { "" }
        ))
    }

    /// Forgets the request's session; returns the `Set-Cookie` value that clears it.
    pub fn close_session(&self, headers: &HeaderMap) -> String {
        if let (Some(id), Ok(mut sessions)) = (cookie(headers, COOKIE), self.sessions.lock()) {
            sessions.remove(&id);
        }
        format!("{COOKIE}=; Path=/; Max-Age=0")
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

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

    #[test]
    fn a_sign_in_is_taken_once() {
        let p = PageState::new("https://a/".into(), true, reqwest::Client::new());
        let start = p.begin_login().unwrap();
        assert_eq!(start.challenge.len(), 43);
        let taken = p.take_login(&start.state).unwrap();
        assert_eq!(taken.nonce, start.nonce);
        assert_eq!(code_challenge(&taken.verifier), start.challenge);
        assert!(
            p.take_login(&start.state).is_none(),
            "a replay finds nothing"
        );
        assert_eq!(p.redirect_uri(), "https://a/callback");
    }

    #[test]
    fn a_session_is_found_by_its_cookie_until_closed() {
        let p = PageState::new("https://a".into(), true, reqwest::Client::new());
        let op = Operator {
            issuer: "i".into(),
            subject: "s".into(),
            name: "n".into(),
        };
        let set = p
            .open_session(op, crate::oidc::Access::Act, u64::MAX)
            .unwrap();
        assert!(set.ends_with("; Secure") && set.contains("HttpOnly"));
        let value = set.split(';').next().unwrap();
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, HeaderValue::from_str(value).unwrap());
        assert_eq!(p.session(&h).unwrap().operator.subject, "s");
        assert!(p.close_session(&h).contains("Max-Age=0"));
        assert!(p.session(&h).is_none());
    }
}
