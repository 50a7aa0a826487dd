//! etcd as a trust boundary (issue 21, item 4): TLS with client certificates from etcd's own
//! CA, auth enabled, and the roles of `lock_store::etcd_roles` applied by `lockctl roles
//! apply`. Neither the arbiter's credential nor one operator's can move the epoch or
//! delete a hold (lock-admin's can, after a second operator's approval); nothing without
//! a certificate of an etcd user can read or write. Each refusal is also shown to be the roles' doing: the
//! same probe on a cluster with auth off succeeds.

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use lock_integration::etcd::{Etcd, Security};
use lock_integration::stack::lockctl_etcd;
use std::time::Duration;
use tonic::Code;

fn code(e: &etcd_client::Error) -> Option<Code> {
    match e {
        etcd_client::Error::GRpcStatus(s) => Some(s.code()),
        _ => None,
    }
}

async fn connect(etcd: &Etcd, user: &str) -> anyhow::Result<Client> {
    etcd.client_as(user).await
}

/// A range read through etcd's JSON gateway over TLS as `user`; the response body.
fn gateway_range(etcd: &Etcd, user: &str, key: &str) -> String {
    use base64::Engine as _;
    let body = format!(
        "{{\"key\":\"{}\"}}",
        base64::engine::general_purpose::STANDARD.encode(key)
    );
    let script = r#"
import ssl, sys, urllib.error, urllib.request
url, ca, cert, key, body = sys.argv[1:6]
ctx = ssl.create_default_context(cafile=ca)
ctx.load_cert_chain(cert, key)
req = urllib.request.Request(url + "/v3/kv/range", data=body.encode(), method="POST")
try:
    print(urllib.request.urlopen(req, context=ctx, timeout=5).read().decode())
except urllib.error.HTTPError as e:
    print("HTTP", e.code, e.read().decode())
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", script, &etcd.client_url])
        .arg(etcd.pki.ca())
        .arg(etcd.pki.cert(user))
        .arg(etcd.pki.key(user))
        .arg(body)
        .output()
        .unwrap();
    out_text(&out)
}

/// What a client can do: (read /sys/epoch, write /sys/epoch, read /l/, write /l/).
async fn reach(etcd: &Etcd, user: &str) -> [bool; 4] {
    let Ok(mut c) = connect(etcd, user).await else {
        return [false; 4];
    };
    [
        c.get("/sys/epoch", None).await.is_ok(),
        c.put("/sys/epoch", "forged", None).await.is_ok(),
        c.get("/l/pay/ledger/1", None).await.is_ok(),
        c.put("/l/pay/ledger/1", "x", None).await.is_ok(),
    ]
}

fn out_text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test]
async fn the_arbiter_cannot_move_the_epoch_and_strangers_cannot_touch_anything() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start_secured(dir.path(), "roles", 1, &[], Security::Roles)
        .unwrap()
        .remove(0);
    let mut root = etcd.client().await.unwrap();
    root.put("/sys/epoch", "{\"epoch\":1}", None).await.unwrap();

    // The arbiter reads the epoch and writes the lock key space, as its work needs
    // (every other test runs the arbiter this way), but cannot write /sys/.
    let mut arbiter = connect(&etcd, "arbiter").await.unwrap();
    assert!(arbiter.get("/sys/epoch", None).await.is_ok());
    let e = arbiter.put("/sys/epoch", "forged", None).await.unwrap_err();
    assert_eq!(code(&e), Some(Code::PermissionDenied), "{e}");
    let e = arbiter.delete("/sys/epoch", None).await.unwrap_err();
    assert_eq!(code(&e), Some(Code::PermissionDenied), "{e}");
    // Nor smuggle the write into a grant transaction.
    let smuggled = Txn::new()
        .when([Compare::version("/sys/epoch", CompareOp::Greater, 0)])
        .and_then([
            TxnOp::put("/l/pay/ledger/1", "x", None),
            TxnOp::put("/sys/epoch", "forged", None),
        ]);
    let e = arbiter.txn(smuggled).await.unwrap_err();
    assert_eq!(code(&e), Some(Code::PermissionDenied), "{e}");
    // Nor write outside the lock key space.
    let e = arbiter.put("/elsewhere", "x", None).await.unwrap_err();
    assert_eq!(code(&e), Some(Code::PermissionDenied), "{e}");
    // Its own work: a lease, a hold on it, a session record, a durable waiter, a revoke.
    let lease = arbiter.lease_grant(5, None).await.unwrap().id();
    let on_lease = Some(PutOptions::new().with_lease(lease));
    let grant = Txn::new()
        .when([
            Compare::version("/sys/epoch", CompareOp::Greater, 0),
            Compare::create_revision("/l/pay/ledger/2", CompareOp::Equal, 0),
        ])
        .and_then([
            TxnOp::put("/l/pay/ledger/2", "h", on_lease.clone()),
            TxnOp::put(format!("/s/{lease:x}"), "s", on_lease.clone()),
            TxnOp::put(format!("/q/pay/ledger/2/{lease:x}"), "w", on_lease),
        ]);
    assert!(arbiter.txn(grant).await.unwrap().succeeded());
    arbiter.lease_revoke(lease).await.unwrap();
    assert_eq!(root.get("/l/pay/ledger/2", None).await.unwrap().count(), 0);

    // One operator can neither move the epoch nor delete a hold (ADR-03, ADR-20: both
    // are two-person, through lock-admin); it reads everything and moves shards.
    assert_eq!(reach(&etcd, "operator").await, [true, false, true, false]);
    let mut operator = connect(&etcd, "operator").await.unwrap();
    let e = operator.delete("/l/pay/ledger/1", None).await.unwrap_err();
    assert_eq!(code(&e), Some(Code::PermissionDenied), "{e}");
    let e = operator
        .delete("/l/", Some(etcd_client::DeleteOptions::new().with_prefix()))
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(Code::PermissionDenied), "{e}");
    for allowed in ["/sys/shards", "/sys/shard-fence"] {
        assert!(operator.put(allowed, "{}", None).await.is_ok(), "{allowed}");
    }
    // Nor the advance's own transaction, nor the probe `lockctl shards` makes first (a
    // compare that never holds: etcd checks both branches' permissions regardless).
    let advance = Txn::new()
        .when([Compare::version("/sys/epoch", CompareOp::Greater, 0)])
        .and_then([
            TxnOp::put("/sys/epoch", "forged", None),
            TxnOp::delete("/l/", Some(etcd_client::DeleteOptions::new().with_prefix())),
        ]);
    let e = operator.txn(advance).await.unwrap_err();
    assert_eq!(code(&e), Some(Code::PermissionDenied), "{e}");
    let probe = Txn::new()
        .when([Compare::mod_revision("/sys/epoch", CompareOp::Less, 0)])
        .and_then([TxnOp::put("/sys/epoch", "", None)]);
    let e = operator.txn(probe.clone()).await.unwrap_err();
    assert_eq!(code(&e), Some(Code::PermissionDenied), "{e}");
    assert!(!root.txn(probe).await.unwrap().succeeded());

    // lock-admin (`force`): its approval Txn and a session revoke, but never the epoch.
    let mut force = connect(&etcd, "force").await.unwrap();
    let lease = root.lease_grant(30, None).await.unwrap().id();
    let on_lease = Some(PutOptions::new().with_lease(lease));
    root.put("/l/pay/ledger/3", "h", on_lease.clone())
        .await
        .unwrap();
    root.put(format!("/s/{lease:x}"), "s", on_lease.clone())
        .await
        .unwrap();
    root.put(format!("/q/pay/ledger/3/{lease:x}"), "w", on_lease)
        .await
        .unwrap();
    let approve = Txn::new()
        .when([Compare::version("/l/pay/ledger/3", CompareOp::Greater, 0)])
        .and_then([
            TxnOp::delete("/l/pay/ledger/3", None),
            TxnOp::delete("/sys/force-request/f1", None),
            TxnOp::put("/sys/force/f1", "{}", None),
        ]);
    assert!(force.txn(approve).await.unwrap().succeeded());
    force.lease_revoke(lease).await.unwrap();
    for forbidden in [
        "/sys/shards",
        "/sys/shard-fence",
        "/sys/other",
        "/audit/election",
    ] {
        let e = force.put(forbidden, "forged", None).await.unwrap_err();
        assert_eq!(code(&e), Some(Code::PermissionDenied), "{forbidden}: {e}");
    }
    // It reads the shard keys (is this cluster a shard, does the coord hold a map: where an
    // advance's epoch comes from) and the coord's allocator, which it also writes.
    for readable in ["/sys/shards", "/sys/shard-fence", "/sys/epoch-allocator"] {
        force.get(readable, None).await.unwrap();
    }
    let e = force.get("/sys/other", None).await.unwrap_err();
    assert_eq!(code(&e), Some(Code::PermissionDenied), "{e}");
    // lock-admin runs the approved advance: the epoch record, every hold and waiter, and
    // the request, in one transaction.
    let approved_advance = Txn::new()
        .when([Compare::version("/sys/epoch", CompareOp::Greater, 0)])
        .and_then([
            TxnOp::put("/sys/epoch", "{\"epoch\":2}", None),
            TxnOp::delete("/l/", Some(etcd_client::DeleteOptions::new().with_prefix())),
            TxnOp::delete("/q/", Some(etcd_client::DeleteOptions::new().with_prefix())),
            TxnOp::delete("/sys/advance-request/a1", None),
        ]);
    assert!(force.txn(approved_advance).await.unwrap().succeeded());

    // A certificate from etcd's CA whose CN is no etcd user: nothing.
    assert_eq!(reach(&etcd, "stranger").await, [false; 4]);
    // CN "root" from another CA: refused in the handshake.
    assert_eq!(reach(&etcd, "foreign-root").await, [false; 4]);
    // No client certificate at all, over TLS: refused in the handshake.
    let no_cert = Client::connect(
        [etcd.client_url.clone()],
        Some(
            etcd_client::ConnectOptions::new()
                .with_timeout(Duration::from_secs(3))
                .with_tls(etcd_client::TlsOptions::new().ca_certificate(
                    etcd_client::Certificate::from_pem(std::fs::read(etcd.pki.ca()).unwrap()),
                )),
        ),
    )
    .await;
    if let Ok(mut c) = no_cert {
        assert!(c.get("/sys/epoch", None).await.is_err());
        assert!(c.put("/l/x", "x", None).await.is_err());
    }
    // Plaintext to the TLS port: nothing.
    let plain = etcd.client_url.replace("https://", "http://");
    let plaintext = Client::connect(
        [plain],
        Some(etcd_client::ConnectOptions::new().with_timeout(Duration::from_secs(3))),
    )
    .await;
    if let Ok(mut c) = plaintext {
        assert!(c.get("/sys/epoch", None).await.is_err());
    }

    // The JSON gateway on the same port, with root's own certificate: with auth on, etcd
    // refuses it ("CommonName of client sending a request against gateway will be ignored"):
    // the gateway would dial etcd as the member certificate, not as the caller.
    let gateway = gateway_range(&etcd, "root", "/sys/epoch");
    assert!(
        !gateway.contains("\"kvs\""),
        "the gateway read the epoch: {gateway}"
    );
    assert!(gateway.starts_with("HTTP 400"), "{gateway}");

    // lockctl: the roles are as wanted, a second apply changes nothing, and only root may
    // look (the arbiter's credential cannot read the auth tables).
    let urls = etcd.client_url.as_str();
    let show = lockctl_etcd(&["roles", "show", "--etcd", urls], &etcd.pki, "root").unwrap();
    assert!(show.status.success(), "{}", out_text(&show));
    assert!(
        out_text(&show).contains("users and roles as wanted"),
        "{}",
        out_text(&show)
    );
    let again = lockctl_etcd(&["roles", "apply", "--etcd", urls], &etcd.pki, "root").unwrap();
    assert!(again.status.success(), "{}", out_text(&again));
    assert!(out_text(&again).contains("users and roles as wanted"));
    let as_arbiter =
        lockctl_etcd(&["roles", "show", "--etcd", urls], &etcd.pki, "arbiter").unwrap();
    assert!(!as_arbiter.status.success(), "{}", out_text(&as_arbiter));

    // Drift: someone widens the arbiter's role by hand. `roles show` says what apply will
    // undo, apply undoes it, and the arbiter is refused again.
    root.auth_client()
        .role_grant_permission(
            "arbiter",
            etcd_client::Permission::read_write("/sys/").with_prefix(),
        )
        .await
        .unwrap();
    assert!(arbiter.put("/sys/epoch", "forged", None).await.is_ok());
    let show = lockctl_etcd(&["roles", "show", "--etcd", urls], &etcd.pki, "root").unwrap();
    let text = out_text(&show);
    assert!(
        text.contains("would revoke from role arbiter ReadWrite on /sys/*"),
        "{text}"
    );
    let apply = lockctl_etcd(&["roles", "apply", "--etcd", urls], &etcd.pki, "root").unwrap();
    assert!(apply.status.success(), "{}", out_text(&apply));
    let e = arbiter.put("/sys/epoch", "forged", None).await.unwrap_err();
    assert_eq!(code(&e), Some(Code::PermissionDenied), "{e}");
}

/// The layer switched off: the same cluster with auth not enabled lets the arbiter's and
/// a stranger's certificates write the epoch: the refusals above are the roles' doing.
/// `lockctl roles apply` (as root) is then what turns them on.
#[tokio::test]
async fn without_roles_the_same_probes_succeed_until_lockctl_roles_apply() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start_secured(dir.path(), "open", 1, &[], Security::TlsOnly)
        .unwrap()
        .remove(0);
    etcd.client().await.unwrap();
    assert_eq!(reach(&etcd, "arbiter").await, [true; 4]);
    assert_eq!(reach(&etcd, "operator").await, [true; 4]);
    assert_eq!(reach(&etcd, "stranger").await, [true; 4]);
    // The operator's advance and delete of every hold, refused above, go through.
    let mut operator = connect(&etcd, "operator").await.unwrap();
    let advance = Txn::new()
        .when([Compare::version("/sys/epoch", CompareOp::Greater, 0)])
        .and_then([
            TxnOp::put("/sys/epoch", "forged", None),
            TxnOp::delete("/l/", Some(etcd_client::DeleteOptions::new().with_prefix())),
        ]);
    assert!(operator.txn(advance).await.is_ok());
    // With auth off the gateway reads (its refusal above is auth's doing).
    let gateway = gateway_range(&etcd, "root", "/sys/epoch");
    assert!(gateway.contains("\"kvs\""), "{gateway}");
    // TLS alone still refuses a certificate from another CA.
    assert_eq!(reach(&etcd, "foreign-root").await, [false; 4]);

    let urls = etcd.client_url.as_str();
    let show = lockctl_etcd(&["roles", "show", "--etcd", urls], &etcd.pki, "root").unwrap();
    assert!(
        out_text(&show).contains("would add role arbiter"),
        "{}",
        out_text(&show)
    );
    let apply = lockctl_etcd(&["roles", "apply", "--etcd", urls], &etcd.pki, "root").unwrap();
    assert!(apply.status.success(), "{}", out_text(&apply));
    assert!(out_text(&apply).contains("auth enabled"));
    assert_eq!(reach(&etcd, "arbiter").await, [true, false, true, true]);
    assert_eq!(reach(&etcd, "stranger").await, [false; 4]);
}

/// The arbiter refuses to start with a plaintext etcd endpoint off loopback, and with an
/// https endpoint but no client certificate: it never sends the lock keys unprotected.
#[test]
fn the_arbiter_refuses_an_unprotected_etcd_transport() {
    let dir = tempfile::tempdir().unwrap();
    let registry = lock_integration::paths::dev_registry();
    for etcd in ["http://10.255.0.1:2379", "https://127.0.0.1:1"] {
        let out =
            std::process::Command::new(lock_integration::paths::workspace_bin("arbiter").unwrap())
                .args([
                    "--insecure-plaintext",
                    "--listen",
                    "127.0.0.1:0",
                    "--etcd",
                    etcd,
                ])
                .arg("--registry")
                .arg(&registry)
                .current_dir(dir.path())
                .output()
                .unwrap();
        let text = out_text(&out);
        assert!(!out.status.success(), "{etcd}: {text}");
        assert!(text.contains("etcd transport"), "{etcd}: {text}");
    }
}
