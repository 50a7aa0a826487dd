//! Who is asking: an OIDC ID token, verified against the issuer's published keys (JWKS).
//!
//! A token names an operator only if all of these hold:
//! - it is signed (never `alg: none`), with an asymmetric algorithm, by a key in the issuer's
//!   JWKS whose `kid` it names; the key's declared algorithm, if any, is the token's;
//! - `iss` is the configured issuer, `aud` contains the configured audience, `exp` is in the
//!   future (`leeway` seconds of clock skew), `sub` is present;
//! - the role claim (`roles` by default, a string or a list) contains the operator role
//!   (`lock-operator`: file and approve) or the viewer role (`lock-viewer`: read the
//!   explorer and the pending requests, act on nothing), and the MFA claim (`amr`) contains one of the accepted methods
//!   (`otp`, `hwk`): a force release is approved where the IdP's second factor lives.
//!
//! The checks on claims are [`check_claims`] (pure, a table of cases); signature, issuer,
//! audience and expiry are `jsonwebtoken`'s. Tokens are never logged or echoed: a refusal
//! says which rule failed, not what the token held.

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation, errors::ErrorKind};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::RwLock;
use std::time::{Duration, Instant};

/// How operators are recognised (the admin server's `--oidc-*` flags).
#[derive(Debug, Clone, clap::Args)]
pub struct OidcSettings {
    /// The IdP's issuer URL (https, or http on loopback); its discovery document and JWKS
    /// are read from it.
    #[arg(long = "oidc-issuer", env = "LOCK_OIDC_ISSUER")]
    pub issuer: String,
    /// The audience ID tokens must carry: the admin page's OIDC client ID.
    #[arg(
        long = "oidc-client-id",
        env = "LOCK_OIDC_CLIENT_ID",
        default_value = "lock-admin"
    )]
    pub client_id: String,
    /// The claim listing the user's roles or groups.
    #[arg(long = "oidc-role-claim", default_value = "roles")]
    pub role_claim: String,
    /// The role a force-release requester and approver must have.
    #[arg(long = "oidc-role", default_value = "lock-operator")]
    pub role: String,
    /// The role that may read (the explorer, the pending requests) and act on nothing.
    /// The operator role reads too.
    #[arg(long = "oidc-viewer-role", default_value = "lock-viewer")]
    pub viewer_role: String,
    /// The claim listing authentication methods (RFC 8176).
    #[arg(long = "oidc-mfa-claim", default_value = "amr")]
    pub mfa_claim: String,
    /// Methods that count as a second factor (any one).
    #[arg(long = "oidc-mfa", value_delimiter = ',', default_value = "otp,hwk")]
    pub mfa_values: Vec<String>,
    /// Clock skew allowed on `exp`, seconds.
    #[arg(long = "oidc-leeway-seconds", default_value_t = 30)]
    pub leeway_seconds: u64,
}

/// A verified operator. Two operators are the same person when issuer and subject match.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operator {
    pub issuer: String,
    pub subject: String,
    /// `name` (or `email`, or the subject): for people reading records, not for decisions.
    pub name: String,
}

impl Operator {
    pub fn same_person(&self, other: &Operator) -> bool {
        self.issuer == other.issuer && self.subject == other.subject
    }
}

/// A verified token: who, until when, and the sign-in's nonce (the page checks it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub operator: Operator,
    pub access: Access,
    /// `exp`, seconds since the epoch.
    pub expires_at: u64,
    pub nonce: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenRefused {
    #[error("no ID token (Authorization: Bearer <id token>)")]
    Missing,
    #[error("the ID token is not a signed JWT")]
    Malformed,
    #[error("the ID token is unsigned or uses an algorithm not accepted ({0})")]
    Algorithm(String),
    #[error("the ID token's signing key is not in the issuer's JWKS")]
    UnknownKey,
    #[error("the ID token's signature does not verify")]
    BadSignature,
    #[error("the ID token has expired")]
    Expired,
    #[error("the ID token is not valid yet (nbf)")]
    NotYetValid,
    #[error("the ID token is from another issuer")]
    WrongIssuer,
    #[error("the ID token is for another audience")]
    WrongAudience,
    #[error("the ID token lacks claim {0}")]
    MissingClaim(String),
    #[error("the operator lacks the {0} role")]
    NoRole(String),
    #[error("the operator did not sign in with a second factor ({0} lacks any of {1})")]
    NoMfa(String, String),
    #[error("the issuer's keys cannot be fetched: {0}")]
    JwksUnavailable(String),
}

/// Only asymmetric algorithms: a shared-secret (HS*) token could be minted by anyone who
/// holds the client's secret, and `none` by anyone.
const ACCEPTED: [Algorithm; 8] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
];

/// What a verified person may do: read only, or read and act (file, approve).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    View,
    Act,
}

/// The role and MFA rules over a token's claims (signature, iss, aud, exp already checked).
/// A token with neither role is refused, naming the operator role.
pub fn check_claims(claims: &Value, s: &OidcSettings) -> Result<(Operator, Access), TokenRefused> {
    let text = |name: &str| claims.get(name).and_then(Value::as_str).map(str::to_owned);
    let list = |name: &str| -> Vec<String> {
        match claims.get(name) {
            Some(Value::String(v)) => v.split_whitespace().map(str::to_owned).collect(),
            Some(Value::Array(vs)) => vs
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            _ => Vec::new(),
        }
    };
    let subject = text("sub")
        .filter(|s| !s.is_empty())
        .ok_or_else(|| TokenRefused::MissingClaim("sub".into()))?;
    // OIDC Core 3.1.3.7: with several audiences, the token was issued to `azp`, which must
    // be this client (a token for another client that lists us too is not ours).
    if let Some(Value::Array(auds)) = claims.get("aud")
        && auds.len() > 1
        && text("azp").as_deref() != Some(s.client_id.as_str())
    {
        return Err(TokenRefused::WrongAudience);
    }
    let roles = list(&s.role_claim);
    let access = if roles.contains(&s.role) {
        Access::Act
    } else if roles.contains(&s.viewer_role) {
        Access::View
    } else {
        return Err(TokenRefused::NoRole(s.role.clone()));
    };
    let methods = list(&s.mfa_claim);
    if !methods.iter().any(|m| s.mfa_values.contains(m)) {
        return Err(TokenRefused::NoMfa(
            s.mfa_claim.clone(),
            s.mfa_values.join(","),
        ));
    }
    let operator = Operator {
        issuer: text("iss").unwrap_or_default(),
        name: text("name")
            .or_else(|| text("email"))
            .unwrap_or_else(|| subject.clone()),
        subject,
    };
    Ok((operator, access))
}

/// Verifies `token` with the keys in `jwks` (pure: no fetching, `jsonwebtoken` reads the
/// clock for `exp`).
pub fn verify_with(token: &str, jwks: &JwkSet, s: &OidcSettings) -> Result<Verified, TokenRefused> {
    let header = jsonwebtoken::decode_header(token).map_err(|e| match e.kind() {
        // `alg: none` (or any name jsonwebtoken does not know) fails here.
        ErrorKind::Json(_) | ErrorKind::InvalidAlgorithmName => {
            TokenRefused::Algorithm("unknown or none".into())
        }
        _ => TokenRefused::Malformed,
    })?;
    if !ACCEPTED.contains(&header.alg) {
        return Err(TokenRefused::Algorithm(format!("{:?}", header.alg)));
    }
    let kid = header.kid.as_deref().ok_or(TokenRefused::UnknownKey)?;
    let jwk = jwks.find(kid).ok_or(TokenRefused::UnknownKey)?;
    if let Some(declared) = jwk.common.key_algorithm
        && format!("{declared:?}") != format!("{:?}", header.alg)
    {
        return Err(TokenRefused::Algorithm(format!("{:?}", header.alg)));
    }
    let key = DecodingKey::from_jwk(jwk).map_err(|_| TokenRefused::UnknownKey)?;
    let mut validation = Validation::new(header.alg);
    validation.set_issuer(&[s.issuer.as_str()]);
    validation.set_audience(&[s.client_id.as_str()]);
    validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
    validation.leeway = s.leeway_seconds;
    validation.validate_nbf = true;
    let data =
        jsonwebtoken::decode::<Value>(token, &key, &validation).map_err(|e| match e.kind() {
            ErrorKind::ExpiredSignature => TokenRefused::Expired,
            ErrorKind::ImmatureSignature => TokenRefused::NotYetValid,
            ErrorKind::InvalidIssuer => TokenRefused::WrongIssuer,
            ErrorKind::InvalidAudience => TokenRefused::WrongAudience,
            ErrorKind::InvalidSignature => TokenRefused::BadSignature,
            ErrorKind::InvalidAlgorithm => TokenRefused::Algorithm(format!("{:?}", header.alg)),
            ErrorKind::MissingRequiredClaim(c) => TokenRefused::MissingClaim(c.clone()),
            _ => TokenRefused::Malformed,
        })?;
    let (operator, access) = check_claims(&data.claims, s)?;
    Ok(Verified {
        operator,
        access,
        expires_at: data.claims.get("exp").and_then(Value::as_u64).unwrap_or(0),
        nonce: data
            .claims
            .get("nonce")
            .and_then(Value::as_str)
            .map(str::to_owned),
    })
}

/// The parts of the issuer's discovery document this service uses.
#[derive(Debug, Clone, Deserialize)]
pub struct Discovery {
    pub issuer: String,
    pub jwks_uri: String,
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    #[serde(default)]
    pub device_authorization_endpoint: Option<String>,
}

/// Whether `url` may carry tokens: https, or http to a loopback address (tests, `make run`).
pub fn transport_ok(url: &str) -> bool {
    if url.starts_with("https://") {
        return true;
    }
    url.strip_prefix("http://")
        .is_some_and(lock_store::etcd_tls::on_loopback)
}

/// Reads the issuer's discovery document (and checks it names the same issuer).
pub async fn discover(http: &reqwest::Client, issuer: &str) -> Result<Discovery, TokenRefused> {
    if !transport_ok(issuer) {
        return Err(TokenRefused::JwksUnavailable(format!(
            "issuer {issuer} is not https (plain http only on loopback)"
        )));
    }
    let url = format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    );
    let unavailable = |e: reqwest::Error| TokenRefused::JwksUnavailable(e.to_string());
    let d: Discovery = http
        .get(&url)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(unavailable)?
        .json()
        .await
        .map_err(unavailable)?;
    if d.issuer.trim_end_matches('/') != issuer.trim_end_matches('/') {
        return Err(TokenRefused::JwksUnavailable(format!(
            "the discovery document names issuer {}",
            d.issuer
        )));
    }
    Ok(d)
}

/// The issuer's keys, fetched at start and again when a token names a key not yet seen
/// (the IdP rotated), at most once per [`Verifier::REFRESH_EVERY`].
pub struct Verifier {
    pub settings: OidcSettings,
    pub discovery: Discovery,
    http: reqwest::Client,
    keys: RwLock<(JwkSet, Instant)>,
}

impl Verifier {
    pub const REFRESH_EVERY: Duration = Duration::from_secs(30);

    pub async fn new(settings: OidcSettings, http: reqwest::Client) -> Result<Self, TokenRefused> {
        let discovery = discover(&http, &settings.issuer).await?;
        let keys = fetch_jwks(&http, &discovery.jwks_uri).await?;
        Ok(Verifier {
            settings,
            discovery,
            http,
            keys: RwLock::new((keys, Instant::now())),
        })
    }

    pub async fn verify(&self, token: &str) -> Result<Verified, TokenRefused> {
        let first = {
            let keys = self.keys.read().map_err(|_| TokenRefused::UnknownKey)?;
            verify_with(token, &keys.0, &self.settings)
        };
        if first != Err(TokenRefused::UnknownKey) {
            return first;
        }
        let stale = self
            .keys
            .read()
            .map(|k| k.1.elapsed() >= Self::REFRESH_EVERY)
            .unwrap_or(true);
        if !stale {
            return first;
        }
        let fresh = fetch_jwks(&self.http, &self.discovery.jwks_uri).await?;
        let answer = verify_with(token, &fresh, &self.settings);
        if let Ok(mut keys) = self.keys.write() {
            *keys = (fresh, Instant::now());
        }
        answer
    }
}

async fn fetch_jwks(http: &reqwest::Client, uri: &str) -> Result<JwkSet, TokenRefused> {
    if !transport_ok(uri) {
        return Err(TokenRefused::JwksUnavailable(format!("{uri} is not https")));
    }
    let unavailable = |e: reqwest::Error| TokenRefused::JwksUnavailable(e.to_string());
    http.get(uri)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(unavailable)?
        .json()
        .await
        .map_err(unavailable)
}

#[cfg(test)]
mod tests;
