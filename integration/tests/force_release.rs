//! Two-person force release (issue 22, items 2–4) with a real IdP (npm oidc-provider),
//! real etcd (roles on: lock-admin runs as the `force` user), arbiters behind Envoy, the
//! audit tailer with PostgreSQL, `lockctl force-release`, and the approval page driven in
//! headless Chromium.
//!
//! What must hold:
//! - only a signed, unexpired ID token for this audience from this issuer, with the
//!   operator role and a second factor, names an operator (every other token refused,
//!   including real IdP tokens of a role-less and of a password-only user);
//! - the requester cannot approve; a hold that changed since the request is not released;
//! - an approved release deletes exactly the requested hold in one Txn with its
//!   `/sys/force/<id>` record (24 h lease), the next waiter is granted a larger token, the
//!   old holder's release is refused, the audit trail has the force-release rows;
//! - `--revoke-session` ends every hold of the holder's session;
//! - in a browser, the requester sees no approve button, a second operator approves.

use lock_config::proto::v1::*;
use lock_force::client::{AdminClient, ClientError};
use lock_integration::audit::Tailer;
use lock_integration::oidc::{Admin, Idp, node_tools, now_s, other_key, sign};
use lock_integration::paths::{workspace_bin, workspace_root};
use lock_integration::postgres::Postgres;
use lock_integration::registry::{SLOW_PREFIX, waiter_id};
use lock_integration::stack::Stack;
use std::process::Command;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

type Lock = lock_client::proto::lock_client::LockClient<Channel>;

struct Hold {
    client: Lock,
    session_id: i64,
    token: u64,
    /// The holder renews, as a leaked lock's holder does (alive, never releasing), so no
    /// hold here ends by its TTL however slow the machine is. Stopped with the hold.
    renewing: tokio::task::JoinHandle<()>,
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.renewing.abort();
    }
}

async fn hold(stack: &Stack, who: usize, key: &str) -> Hold {
    let mut client = stack.workload(&waiter_id(who)).await.unwrap();
    let session_id = client
        .open_session(OpenSessionRequest { key: key.into() })
        .await
        .unwrap()
        .into_inner()
        .session_id;
    let token = client
        .acquire(AcquireRequest {
            key: key.into(),
            session_id,
            wait_millis: 0,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .token;
    Hold {
        renewing: lock_integration::keep_alive(client.clone(), session_id, Duration::from_secs(1)),
        client,
        session_id,
        token,
    }
}

async fn held_by(stack: &Stack, key: &str) -> Option<String> {
    let mut c = stack.workload(&waiter_id(7)).await.unwrap();
    let r = c
        .inspect(InspectRequest { key: key.into() })
        .await
        .unwrap()
        .into_inner();
    r.held.then_some(r.holder_spiffe_id)
}

fn refused_code(r: Result<impl std::fmt::Debug, ClientError>) -> String {
    match r {
        Err(ClientError::Refused { code, .. }) => code,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn lockctl(args: &[&str], admin: &str, token: &str) -> (i32, String, String) {
    let out = Command::new(workspace_bin("lockctl").unwrap())
        .args(["force-release"])
        .args(args)
        .args(["--admin", admin])
        .env("LOCK_ID_TOKEN", token)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The approval page in Chromium as `user`; approves `approve` if given.
fn browser(
    admin: &str,
    user: &str,
    approve: Option<&str>,
    shot: &std::path::Path,
) -> serde_json::Value {
    let mut cmd = Command::new("node");
    cmd.arg(workspace_root().join("integration/node/approve.mjs"))
        .args(["--url", admin, "--user", user])
        .arg("--screenshot")
        .arg(shot)
        .arg("--screenshot-pending")
        .arg(shot.with_extension("pending.png"))
        .env("LOCK_NODE_TOOLS", node_tools());
    if let Some(id) = approve {
        cmd.args(["--approve", id]);
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "approve.mjs printed no JSON ({e}): {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_people_release_a_leaked_lock_and_nothing_else_can() {
    let (stack, _registry) = Stack::with_test_registry().await.unwrap();
    let dir = stack.dir.clone();
    let access = stack.etcd_access();
    let pg = Postgres::start(&dir.join("audit-pg")).unwrap();
    let tailer = Tailer::start(&dir, &access, &pg.url(), "tailer", &[]).unwrap();
    // Both ports chosen together (the IdP must know the admin page's callback URL).
    let ports = lock_integration::process::free_ports(2).unwrap();
    let admin_url = format!("http://127.0.0.1:{}", ports[0]);
    let idp = Idp::start(&dir, ports[1], &[format!("{admin_url}/callback")]).unwrap();
    // lock-admin reads the same registry the arbiters serve (for each class's enforcement).
    let registry =
        lock_integration::registry::write_test_registry(&dir.join("admin-registry")).unwrap();
    let admin = Admin::start(&dir, &access, &idp, &admin_url, Some(&registry)).unwrap();
    let url = admin.url.as_str();

    // Real tokens from the IdP's own sign-in.
    let alice = idp.sign_in("alice").await.unwrap();
    let bob = idp.sign_in("bob").await.unwrap();
    let carol = idp.sign_in("carol").await.unwrap();
    let dave = idp.sign_in("dave").await.unwrap();

    // --- Who may ask: every token but an operator's with MFA is refused. ---
    let key = format!("{SLOW_PREFIX}/force/leaked");
    let mut a = hold(&stack, 0, &key).await;
    let now = now_s();
    let claims = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut c = idp.operator_claims("mallory");
        f(&mut c);
        c
    };
    let forged = [
        ("no token", String::new(), "BAD_TOKEN"),
        (
            "unsigned (alg none)",
            "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJtYWxsb3J5In0.".into(),
            "BAD_TOKEN",
        ),
        (
            "expired, the IdP's key",
            idp.mint(&claims(&|c| {
                c["iat"] = (now - 7200).into();
                c["exp"] = (now - 3600).into();
            }))
            .unwrap(),
            "TOKEN_EXPIRED",
        ),
        (
            "another audience, the IdP's key",
            idp.mint(&claims(&|c| c["aud"] = "grafana".into())).unwrap(),
            "WRONG_AUDIENCE",
        ),
        (
            "not valid yet, the IdP's key",
            idp.mint(&claims(&|c| c["nbf"] = (now + 3600).into()))
                .unwrap(),
            "TOKEN_NOT_YET_VALID",
        ),
        (
            "issued to another client that lists us too",
            idp.mint(&claims(&|c| {
                c["aud"] = serde_json::json!(["grafana", "lock-admin"]);
                c["azp"] = "grafana".into();
            }))
            .unwrap(),
            "WRONG_AUDIENCE",
        ),
        (
            "another issuer, the IdP's key",
            idp.mint(&claims(&|c| c["iss"] = "https://evil.example".into()))
                .unwrap(),
            "WRONG_ISSUER",
        ),
        (
            "another key under the IdP's kid",
            sign(&other_key(&dir).unwrap(), &claims(&|_| {})).unwrap(),
            "BAD_TOKEN",
        ),
        (
            "no role, the IdP's key",
            idp.mint(&claims(&|c| c["roles"] = serde_json::json!([])))
                .unwrap(),
            "NO_ROLE",
        ),
        (
            "carol: a real token without the role",
            carol.clone(),
            "NO_ROLE",
        ),
        ("dave: a real token, password only", dave.clone(), "NO_MFA"),
    ];
    for (name, token, want) in &forged {
        let c = AdminClient::new(url, token.clone());
        assert_eq!(
            refused_code(c.file(&key, "leak", false).await),
            *want,
            "filing with {name}"
        );
        assert_eq!(refused_code(c.list().await), *want, "listing with {name}");
    }
    // A token minted with the IdP's key and every rule met is accepted: the refusals above
    // are the rules, not the minting.
    let minted = AdminClient::new(url, idp.mint(&claims(&|_| {})).unwrap());
    assert!(
        minted.list().await.is_ok(),
        "a well-formed minted token is accepted"
    );

    // --- File (alice, through lockctl); the requester cannot approve. ---
    let (code, id, err) = lockctl(
        &[
            "request",
            &key,
            "--reason",
            "batch job wedged, holds the ledger",
        ],
        url,
        &alice,
    );
    assert_eq!(code, 0, "lockctl request: {err}");
    let id = id.trim().to_owned();
    assert!(err.contains("another operator must approve"), "{err}");
    let (code, _, err) = lockctl(&["approve", &id], url, &alice);
    assert_eq!(code, 1, "alice cannot approve her own request: {err}");
    assert!(err.contains("SAME_PERSON"), "{err}");
    assert_eq!(held_by(&stack, &key).await, Some(waiter_id(0)));

    // A waiter queues behind the leaked hold.
    let waiter = {
        let mut c = stack.workload(&waiter_id(1)).await.unwrap();
        let k = key.clone();
        tokio::spawn(async move {
            let session_id = c
                .open_session(OpenSessionRequest { key: k.clone() })
                .await
                .unwrap()
                .into_inner()
                .session_id;
            let r = c
                .acquire(AcquireRequest {
                    key: k,
                    session_id,
                    wait_millis: 25_000,
                    ..Default::default()
                })
                .await;
            r.map(|g| g.into_inner().token)
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;

    // --- Bob approves (lockctl): the hold ends, the waiter is granted a larger token. ---
    let (code, out, err) = lockctl(&["approve", &id], url, &bob);
    assert_eq!(code, 0, "bob approves: {out} {err}");
    assert!(out.contains("approved by Bob Operator"), "{out}");
    let granted = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the waiter is answered")
        .unwrap()
        .expect("the waiter is granted after the force release");
    assert!(
        granted > a.token,
        "tokens only grow: {granted} after {}",
        a.token
    );
    assert_eq!(held_by(&stack, &key).await, Some(waiter_id(1)));
    let old = a
        .client
        .release(ReleaseRequest {
            key: key.clone(),
            token: a.token,
            session_id: a.session_id,
            ..Default::default()
        })
        .await;
    assert!(old.is_err(), "the old holder's release is refused: {old:?}");
    // Approving again finds nothing.
    let (code, _, err) = lockctl(&["approve", &id], url, &bob);
    assert_eq!(code, 1);
    assert!(err.contains("NOT_FOUND"), "{err}");

    // The record, on its 24 h lease.
    let mut etcd = stack.etcd_client().await.unwrap();
    let rec = etcd.get(format!("/sys/force/{id}"), None).await.unwrap();
    let kv = rec.kvs().first().expect("the force record");
    let record: serde_json::Value = serde_json::from_slice(kv.value()).unwrap();
    assert_eq!(record["requester"]["subject"], "alice");
    assert_eq!(record["approver"]["subject"], "bob");
    assert_eq!(record["enforcement"], "fenced");
    assert_eq!(record["key"], key.as_str());
    let ttl = etcd
        .lease_time_to_live(kv.lease(), None)
        .await
        .unwrap()
        .granted_ttl();
    assert_eq!(ttl, 24 * 3600);
    let listed = AdminClient::new(url, bob.clone()).list().await.unwrap();
    assert!(listed.pending.is_empty());
    assert_eq!(listed.executed.len(), 1);

    // --- A hold that changed since the request is not released. ---
    let key2 = format!("{SLOW_PREFIX}/force/changed");
    let mut c1 = hold(&stack, 2, &key2).await;
    let filed = AdminClient::new(url, alice.clone())
        .file(&key2, "stuck", false)
        .await
        .unwrap();
    c1.client
        .release(ReleaseRequest {
            key: key2.clone(),
            token: c1.token,
            session_id: c1.session_id,
            ..Default::default()
        })
        .await
        .unwrap();
    let c2 = hold(&stack, 3, &key2).await;
    assert_eq!(
        refused_code(
            AdminClient::new(url, bob.clone())
                .approve(&filed.request.id)
                .await
        ),
        "HOLD_CHANGED"
    );
    assert_eq!(
        held_by(&stack, &key2).await,
        Some(waiter_id(3)),
        "the new hold stays"
    );
    let listed = AdminClient::new(url, bob.clone()).list().await.unwrap();
    assert!(listed.pending.is_empty(), "the dead request is withdrawn");
    drop(c2);

    // --- Revoking the session ends its other holds too. ---
    let (k3, k4) = (
        format!("{SLOW_PREFIX}/force/s-one"),
        format!("{SLOW_PREFIX}/force/s-two"),
    );
    let mut d = hold(&stack, 4, &k3).await;
    d.client
        .acquire(AcquireRequest {
            key: k4.clone(),
            session_id: d.session_id,
            wait_millis: 0,
            ..Default::default()
        })
        .await
        .unwrap();
    let filed = AdminClient::new(url, bob.clone())
        .file(&k3, "the whole session is wedged", true)
        .await
        .unwrap();
    let done = AdminClient::new(url, alice.clone())
        .approve(&filed.request.id)
        .await
        .unwrap();
    assert!(done.executed.session_revoke_error.is_none());
    assert_eq!(held_by(&stack, &k3).await, None);
    assert_eq!(
        held_by(&stack, &k4).await,
        None,
        "the session's other hold ended"
    );

    // --- The browser: the requester sees no button; a second operator approves. ---
    let k5 = format!("{SLOW_PREFIX}/force/browser");
    let _e = hold(&stack, 5, &k5).await;
    let filed = AdminClient::new(url, alice.clone())
        .file(&k5, "approved in the browser", false)
        .await
        .unwrap();
    let shots = dir.join("screens");
    std::fs::create_dir_all(&shots).unwrap();
    let seen = browser(url, "alice", None, &shots.join("alice.png"));
    assert_eq!(seen["error"], serde_json::Value::Null, "{seen}");
    assert_eq!(
        seen["pending"],
        serde_json::json!([filed.request.id]),
        "{seen}"
    );
    assert_eq!(seen["approveButtons"], serde_json::json!([]), "{seen}");
    let seen = browser(url, "bob", Some(&filed.request.id), &shots.join("bob.png"));
    assert_eq!(seen["operator"], "Bob Operator", "{seen}");
    assert_eq!(
        seen["approveButtons"],
        serde_json::json!([filed.request.id]),
        "{seen}"
    );
    assert_eq!(seen["enforcement"], serde_json::json!(["fenced"]), "{seen}");
    assert_eq!(seen["error"], serde_json::Value::Null, "{seen}");
    assert!(
        seen["notice"]
            .as_str()
            .is_some_and(|n| n.contains("executed")),
        "{seen}"
    );
    assert_eq!(held_by(&stack, &k5).await, None);
    // A role-less user signs in but is refused.
    let seen = browser(url, "carol", None, &shots.join("carol.png"));
    assert!(
        seen["error"]
            .as_str()
            .is_some_and(|e| e.contains("#operator")),
        "carol gets no operator page: {seen}"
    );
    if let Ok(keep) = std::env::var("LOCK_SCREENSHOT_DIR") {
        let keep = std::path::Path::new(&keep);
        let _ = std::fs::copy(
            shots.join("bob.pending.png"),
            keep.join("force-release-pending.png"),
        );
        let _ = std::fs::copy(
            shots.join("bob.png"),
            keep.join("force-release-approved.png"),
        );
    }

    // --- lockctl signs in by the device flow: the operator finishes it in a browser. ---
    let mut cli = tokio::process::Command::new(workspace_bin("lockctl").unwrap())
        .args(["force-release", "list", "--device-login", "--admin", url])
        .env_remove("LOCK_ID_TOKEN")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stderr = tokio::io::BufReader::new(cli.stderr.take().unwrap());
    let mut line = String::new();
    tokio::time::timeout(
        Duration::from_secs(20),
        tokio::io::AsyncBufReadExt::read_line(&mut stderr, &mut line),
    )
    .await
    .expect("lockctl prints where to sign in")
    .unwrap();
    // "To sign in, open URL and enter the code CODE"
    let verify = line
        .split_whitespace()
        .find(|w| w.starts_with("http"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_owned();
    let done = tokio::task::spawn_blocking(move || {
        let out = Command::new("node")
            .arg(workspace_root().join("integration/node/device.mjs"))
            .args(["--url", &verify, "--user", "bob"])
            .env("LOCK_NODE_TOOLS", node_tools())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    })
    .await
    .unwrap();
    assert!(
        !done.contains("\"error\""),
        "device sign-in in the browser: {done}"
    );
    let out = tokio::time::timeout(Duration::from_secs(30), cli.wait_with_output())
        .await
        .expect("lockctl finishes once the browser sign-in is done")
        .unwrap();
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "lockctl list by device sign-in: {listing}"
    );
    assert!(listing.contains("approved in the browser"), "{listing}");

    // --- The audit trail has each release, with its record. ---
    let head = etcd
        .get("/sys/epoch", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    let db = lock_audit::store::Postgres::connect(&pg.url())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let cluster = stack.etcd.cluster_id().await.unwrap();
    use lock_audit::store::AuditStore;
    while db.checkpoint(&cluster).await.unwrap().unwrap_or(0) < head {
        assert!(
            Instant::now() < deadline,
            "tailer: {}",
            tailer.proc.log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let rows: Vec<_> = db
        .between(0, 4_102_444_800_000)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.row)
        .collect();
    let forced: Vec<&str> = rows
        .iter()
        .filter(|r| r.kind == lock_audit::classify::Kind::ForceRelease)
        .map(|r| r.key.as_str())
        .collect();
    for k in [key.as_str(), k3.as_str(), k5.as_str()] {
        assert!(
            forced.contains(&k),
            "a force-release row for {k}: {forced:?}"
        );
    }
    assert_eq!(
        forced
            .iter()
            .filter(|k| k.starts_with("/sys/force/"))
            .count(),
        3,
        "three records: {forced:?}"
    );
    assert!(
        !forced.contains(&key2.as_str()),
        "the refused approval released nothing"
    );
    assert!(
        rows.iter()
            .any(|r| r.key == k4 && r.kind == lock_audit::classify::Kind::ClosedWithSession),
        "the revoked session's other hold is recorded as closed with it"
    );
    // Every filing is on record, approved or not (four: one refused as HOLD_CHANGED).
    let filed: Vec<&str> = rows
        .iter()
        .filter(|r| r.kind == lock_audit::classify::Kind::ForceRequest)
        .map(|r| r.detail.as_str())
        .collect();
    assert_eq!(filed.len(), 4, "{filed:?}");
    assert!(filed.iter().any(|d| d.contains("\"stuck\"")), "{filed:?}");
    // The tailer counts executed releases for the LockForceReleaseExecuted alert.
    assert_eq!(tailer.metric("lock_audit_force_releases_total").unwrap(), 3);
}

/// ID tokens are bearer credentials: lock-admin will not listen in plain HTTP off
/// loopback, and with a certificate it serves HTTPS only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_admin_serves_tokens_over_https_only() {
    use lock_integration::etcd::{Etcd, Security};
    use lock_integration::process::{Proc, free_ports, patience};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let etcd = Etcd::start_secured(dir, "admin-tls", 1, &[], Security::Roles)
        .unwrap()
        .remove(0);
    let access = etcd.access(&etcd.client_url);
    let ports = free_ports(2).unwrap();
    let idp = Idp::start(dir, ports[1], &[]).unwrap();
    let admin = |listen: &str, tls: bool| {
        let mut cmd = Command::new(workspace_bin("lock-admin").unwrap());
        cmd.args(["--etcd", &access.urls, "--listen", listen])
            .args(["--oidc-issuer", &idp.issuer])
            .envs(access.pki.lockctl_env("force"));
        if tls {
            cmd.arg("--tls-cert")
                .arg(dir.join("admin.pem"))
                .arg("--tls-key")
                .arg(dir.join("admin.key"));
        }
        cmd
    };
    // Off loopback without TLS: refused at start, with the reason.
    let out = admin("0.0.0.0:0", false).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("not a loopback address"), "{err}");
    // With a certificate: HTTPS answers, plain HTTP does not.
    let ca = lock_devca::DevCa::create_plain("lock-admin test CA").unwrap();
    ca.issue(&lock_devca::Leaf::plain().with_ip("127.0.0.1".parse().unwrap()))
        .unwrap()
        .save(dir, "admin")
        .unwrap();
    let listen = format!("127.0.0.1:{}", ports[0]);
    let mut proc = Proc::spawn("lock-admin-tls", admin(&listen, true), dir).unwrap();
    proc.wait_for_line("lock-admin listening on", patience())
        .unwrap();
    let https = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.bundle_pem().as_bytes()).unwrap())
        .build()
        .unwrap();
    let ok = https
        .get(format!("https://{listen}/healthz"))
        .send()
        .await
        .unwrap();
    assert!(ok.status().is_success());
    // Sign-in redirects to the IdP with PKCE and this server's https callback.
    let login = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.bundle_pem().as_bytes()).unwrap())
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(format!("https://{listen}/login"))
        .send()
        .await
        .unwrap();
    let to = login.headers()[reqwest::header::LOCATION].to_str().unwrap();
    assert!(to.starts_with(&idp.issuer), "{to}");
    assert!(to.contains("code_challenge_method=S256"), "{to}");
    assert!(
        to.contains(&format!(
            "redirect_uri=https%3A%2F%2F{}",
            listen.replace(':', "%3A")
        )),
        "{to}"
    );
    let plain = reqwest::Client::new()
        .get(format!("http://{listen}/healthz"))
        .send()
        .await;
    assert!(plain.is_err() || !plain.unwrap().status().is_success());
}
