//! A real OpenID provider (npm `oidc-provider` under node, `integration/node/
//! oidc-provider.mjs`) and the force-release admin server (`lock-admin`) against it.
//!
//! Operators sign in the way a browser does, over HTTP: authorization code with PKCE,
//! the IdP's login form, the code exchanged for an ID token the IdP signed. [`Idp::mint`]
//! signs tokens the IdP itself would never issue (expired, another audience), with the
//! IdP's own key, to test the verifier's other rules.

use crate::etcd::Access;
use crate::paths::{workspace_bin, workspace_root};
use crate::process::{Proc, patience};
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The test client's own redirect URI: never fetched, the code is read off the redirect.
pub const TEST_REDIRECT: &str = "http://127.0.0.1:9/test-callback";
pub const CLIENT_ID: &str = "lock-admin";
/// The key id the provider signs with.
pub const KID: &str = "test-issuer-1";

pub struct Idp {
    pub proc: Proc,
    pub issuer: String,
    /// The provider's private signing key (PKCS#8 PEM).
    pub key_pem: PathBuf,
}

/// Where `install-deps.sh` put the npm packages (oidc-provider, playwright-core).
pub fn node_tools() -> PathBuf {
    workspace_root().join(".deps/node-tools")
}

impl Idp {
    /// Starts the provider on loopback `port`, accepting `redirects` for `lock-admin`.
    /// A port picked free may be taken by the time node binds it (tests pick ports in
    /// parallel): the provider then never says ready, and it is started again on a fresh
    /// port, twice at most. Callers read the issuer (and so the port) from the result.
    pub fn start(dir: &Path, port: u16, redirects: &[String]) -> anyhow::Result<Self> {
        let mut port = port;
        let mut last = None;
        for _ in 0..3 {
            match Self::start_once(dir, port, redirects) {
                Ok(idp) => return Ok(idp),
                Err(e) => last = Some(e),
            }
            port = crate::process::free_ports(1)?[0];
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("oidc-provider did not start")))
    }

    fn start_once(dir: &Path, port: u16, redirects: &[String]) -> anyhow::Result<Self> {
        let key_pem = dir.join("idp-key.pem");
        let mut cmd = Command::new("node");
        cmd.arg(workspace_root().join("integration/node/oidc-provider.mjs"))
            .args(["--port", &port.to_string()])
            .arg("--key-pem")
            .arg(&key_pem)
            .env("LOCK_NODE_TOOLS", node_tools());
        for r in redirects.iter().map(String::as_str).chain([TEST_REDIRECT]) {
            cmd.args(["--redirect", r]);
        }
        let mut proc = Proc::spawn("oidc-provider", cmd, dir)?;
        let line = proc.wait_for_line("ready ", patience())?;
        let issuer = line
            .rsplit(' ')
            .next()
            .unwrap_or_default()
            .trim()
            .to_owned();
        Ok(Idp {
            proc,
            issuer,
            key_pem,
        })
    }

    /// Signs in as `user` through the IdP's login form (authorization code + PKCE) and
    /// returns the ID token the IdP issued.
    pub async fn sign_in(&self, user: &str) -> anyhow::Result<String> {
        let http = reqwest::Client::builder()
            .cookie_store(true)
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        let verifier = format!("verifier-{user}-{}", "x".repeat(43));
        let challenge = lock_force::web_session::code_challenge(&verifier);
        let auth = reqwest::Url::parse_with_params(
            &format!("{}/auth", self.issuer),
            &[
                ("response_type", "code"),
                ("client_id", CLIENT_ID),
                ("redirect_uri", TEST_REDIRECT),
                ("scope", "openid profile"),
                ("state", "s1"),
                ("nonce", "n1"),
                ("code_challenge", challenge.as_str()),
                ("code_challenge_method", "S256"),
            ],
        )?;
        let mut url = auth.to_string();
        let mut code = None;
        for _ in 0..10 {
            let resp = if url.contains("/interaction/") && !url.ends_with("/login") {
                // The IdP's login form: post the user's name to it.
                http.post(format!("{url}/login"))
                    .form(&[("login", user)])
                    .send()
                    .await?
            } else {
                http.get(&url).send().await?
            };
            let Some(next) = resp.headers().get(reqwest::header::LOCATION) else {
                bail!(
                    "sign-in stopped at {url}: {} {}",
                    resp.status(),
                    resp.text().await.unwrap_or_default()
                );
            };
            let next = next.to_str()?.to_owned();
            let next = if next.starts_with('/') {
                format!("{}{next}", self.issuer)
            } else {
                next
            };
            if next.starts_with(TEST_REDIRECT) {
                let u = reqwest::Url::parse(&next)?;
                code = u
                    .query_pairs()
                    .find(|(k, _)| k == "code")
                    .map(|(_, v)| v.into_owned());
                break;
            }
            url = next;
        }
        let code = code.context("the IdP did not redirect back with a code")?;
        let answer: serde_json::Value = http
            .post(format!("{}/token", self.issuer))
            .form(&[
                ("grant_type", "authorization_code"),
                ("code", code.as_str()),
                ("redirect_uri", TEST_REDIRECT),
                ("client_id", CLIENT_ID),
                ("code_verifier", verifier.as_str()),
            ])
            .send()
            .await?
            .json()
            .await?;
        answer["id_token"]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("no id_token in {answer}"))
    }

    /// A token signed with the IdP's own key (kid and all), with these claims.
    pub fn mint(&self, claims: &serde_json::Value) -> anyhow::Result<String> {
        sign(&std::fs::read(&self.key_pem)?, claims)
    }

    /// Claims as the IdP issues them for an operator with MFA, `exp` in 10 minutes.
    pub fn operator_claims(&self, sub: &str) -> serde_json::Value {
        let now = now_s();
        serde_json::json!({
            "iss": self.issuer, "aud": CLIENT_ID, "sub": sub, "name": sub,
            "iat": now, "exp": now + 600, "roles": ["lock-operator"], "amr": ["pwd", "otp"],
        })
    }
}

pub fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Signs `claims` (RS256, kid [`KID`]) with the RSA key in `pem`.
pub fn sign(pem: &[u8], claims: &serde_json::Value) -> anyhow::Result<String> {
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    header.kid = Some(KID.into());
    let key = jsonwebtoken::EncodingKey::from_rsa_pem(pem)?;
    Ok(jsonwebtoken::encode(&header, claims, &key)?)
}

/// A fresh RSA key (PKCS#8 PEM) that is not the IdP's, from openssl.
pub fn other_key(dir: &Path) -> anyhow::Result<Vec<u8>> {
    let path = dir.join("other-key.pem");
    let out = Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
        ])
        .arg(&path)
        .output()?;
    if !out.status.success() {
        bail!("openssl genpkey: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(std::fs::read(path)?)
}

/// `lock-admin` on a chosen loopback port, as etcd's `force` user.
pub struct Admin {
    pub proc: Proc,
    pub url: String,
}

impl Admin {
    pub fn start(
        dir: &Path,
        etcd: &Access,
        idp: &Idp,
        url: &str,
        registry: Option<&Path>,
    ) -> anyhow::Result<Self> {
        Self::start_with(dir, etcd, idp, url, registry, &[])
    }

    /// As [`Admin::start`], with `extra` flags (`--audit-db URL`).
    pub fn start_with(
        dir: &Path,
        etcd: &Access,
        idp: &Idp,
        url: &str,
        registry: Option<&Path>,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        let listen = url.trim_start_matches("http://");
        let mut cmd = Command::new(workspace_bin("lock-admin")?);
        cmd.args(["--etcd", &etcd.urls, "--listen", listen])
            .args(["--oidc-issuer", &idp.issuer])
            .args(extra)
            .envs(etcd.pki.lockctl_env("force"));
        if let Some(r) = registry {
            cmd.arg("--registry").arg(r);
        }
        let mut proc = Proc::spawn("lock-admin", cmd, dir)?;
        proc.wait_for_line("lock-admin listening on ", patience())?;
        Ok(Admin {
            proc,
            url: url.to_owned(),
        })
    }
}
