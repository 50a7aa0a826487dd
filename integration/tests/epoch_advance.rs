//! The two-person epoch advance (issue 38, ADR-03) with a real IdP (npm oidc-provider),
//! real etcd with roles on (lock-admin runs as the `force` user), arbiters behind Envoy,
//! and `lockctl epoch advance`.
//!
//! What must hold:
//! - one operator cannot advance: etcd refuses the operator's certificate (break-glass
//!   as operator), and lock-admin refuses the requester's own approval;
//! - a second operator's approval advances, in one Txn: the epoch moves, every hold ends,
//!   the request is gone (it cannot run twice), and the record names both people;
//! - break-glass needs etcd root's certificate, warns, and says so in the record;
//! - the audit trail's `epoch-advance` rows name who did it;
//! - tokens after the advances are larger than every token before.

use lock_audit::classify::Kind;
use lock_integration::oidc::{Admin, Idp};
use lock_integration::paths::workspace_bin;
use lock_integration::registry::{SLOW_PREFIX, waiter_id};
use lock_integration::stack::{Stack, lockctl_etcd};
use lock_store::layout::EpochRecord;
use std::process::Command;
use std::time::Duration;

/// `lockctl epoch advance ARGS --admin URL` with `token` as the operator's ID token.
fn advance(args: &[&str], admin: &str, token: &str) -> (i32, String, String) {
    let out = Command::new(workspace_bin("lockctl").unwrap())
        .args(["epoch", "advance"])
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

async fn epoch_record(stack: &Stack) -> EpochRecord {
    let mut root = stack.etcd_client().await.unwrap();
    let r = root.get("/sys/epoch", None).await.unwrap();
    serde_json::from_slice(r.kvs()[0].value()).unwrap()
}

async fn held(stack: &Stack, key: &str) -> bool {
    let mut root = stack.etcd_client().await.unwrap();
    root.get(format!("/l/{key}"), None).await.unwrap().count() == 1
}

/// `lockctl epoch advance break-glass` with etcd user `user`'s certificate.
fn break_glass(stack: &Stack, user: &str, from: u16) -> std::process::Output {
    let from = from.to_string();
    lockctl_etcd(
        &[
            "epoch",
            "advance",
            "break-glass",
            "--etcd",
            &stack.etcd_urls(),
            "--from",
            &from,
            "--reason",
            "lock-admin is down and etcd was restored",
            "--operator",
            "carol (on call)",
        ],
        &stack.etcd.pki,
        user,
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_operator_cannot_advance_the_epoch_and_two_can() {
    let (stack, _registry) = Stack::with_test_registry().await.unwrap();
    let dir = stack.dir.clone();
    let ports = lock_integration::process::free_ports(2).unwrap();
    let admin_url = format!("http://127.0.0.1:{}", ports[0]);
    let idp = Idp::start(&dir, ports[1], &[format!("{admin_url}/callback")]).unwrap();
    let admin = Admin::start(&dir, &stack.etcd_access(), &idp, &admin_url, None).unwrap();
    let url = admin.url.as_str();
    let alice = idp.sign_in("alice").await.unwrap();
    let bob = idp.sign_in("bob").await.unwrap();

    // A hold, whose token the advances must exceed.
    let client = stack.lock_client(&waiter_id(0)).unwrap();
    let key = format!("{SLOW_PREFIX}/advance/1");
    let before = client
        .acquire(&key, Duration::from_secs(10), || {})
        .await
        .unwrap();
    let token_before = before.token();
    assert_eq!(epoch_record(&stack).await.epoch, 1);

    // --- One operator alone, at etcd: the operator's certificate cannot write /sys/epoch.
    let out = break_glass(&stack, "operator", 1);
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("permission denied") && text.contains("etcd root"),
        "{text}"
    );
    assert_eq!(epoch_record(&stack).await.epoch, 1);
    assert!(held(&stack, &key).await, "nothing ended");

    // --- One operator alone, at lock-admin: alice files, alice cannot approve. ---
    let (code, id, err) = advance(
        &["request", "--from", "1", "--reason", "restore drill"],
        url,
        &alice,
    );
    assert_eq!(code, 0, "lockctl epoch advance request: {err}");
    let id = id.trim().to_owned();
    assert!(err.contains("every hold on it ends"), "{err}");
    let (code, _, err) = advance(&["approve", &id], url, &alice);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("SAME_PERSON"), "{err}");
    assert_eq!(epoch_record(&stack).await.epoch, 1);
    assert!(held(&stack, &key).await, "nothing ended");
    let (code, listing, _) = advance(&["list"], url, &bob);
    assert_eq!(code, 0);
    assert!(
        listing.contains(&id) && listing.contains("restore drill"),
        "{listing}"
    );

    // --- A second operator approves: one Txn advances and ends every hold. ---
    let (code, out, err) = advance(&["approve", &id], url, &bob);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("epoch advanced to 2"), "{out}");
    let rec = epoch_record(&stack).await;
    assert_eq!(rec.epoch, 2);
    let by = rec
        .advanced_by
        .clone()
        .expect("the record names who advanced");
    assert!(
        by.requester.contains("alice") && by.approver.contains("bob") && !by.break_glass,
        "{by:?}"
    );
    assert_eq!(by.request, id);
    assert!(!held(&stack, &key).await, "the advance ended the hold");
    // It ran once: the request is gone, and a new filing from 1 is refused.
    let (code, _, err) = advance(&["approve", &id], url, &bob);
    assert_eq!(code, 1);
    assert!(err.contains("NOT_FOUND"), "{err}");
    let (code, _, err) = advance(
        &["request", "--from", "1", "--reason", "again"],
        url,
        &alice,
    );
    assert_eq!(code, 1);
    assert!(err.contains("EPOCH_MOVED"), "{err}");
    drop(before);

    // --- Break-glass with root's certificate: warned, and recorded as such. ---
    let out = break_glass(&stack, "root", 2);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    assert!(err.contains("WARNING: break-glass"), "{err}");
    let rec = epoch_record(&stack).await;
    assert_eq!(rec.epoch, 3);
    let by = rec.advanced_by.expect("break-glass is recorded");
    assert!(
        by.break_glass && by.requester == "carol (on call)" && by.approver.is_empty(),
        "{by:?}"
    );

    // --- The audit trail's rows name both people, and the break-glass. ---
    let mut root = stack.etcd_client().await.unwrap();
    let rows = lock_audit::tailer::replay(&mut root, 1).await.unwrap();
    // (`epoch init` is its own row: from none to 1, by no one.)
    assert_eq!(
        rows.iter().filter(|r| r.kind == Kind::EpochInit).count(),
        1,
        "one init"
    );
    let advances: Vec<&str> = rows
        .iter()
        .filter(|r| r.kind == Kind::EpochAdvance)
        .map(|r| r.detail.as_str())
        .collect();
    assert_eq!(advances.len(), 2, "{advances:?}");
    assert!(
        advances[0].contains("alice") && advances[0].contains("bob"),
        "{}",
        advances[0]
    );
    assert!(
        advances[1].contains(r#""break_glass":true"#) && advances[1].contains("carol"),
        "{}",
        advances[1]
    );

    // Tokens after both advances exceed every token before.
    let after = client
        .acquire(&key, Duration::from_secs(10), || {})
        .await
        .unwrap();
    assert!(after.token() > token_before);
    assert_eq!(after.token().epoch(), 3);
    after.release().await.unwrap();
    client.shutdown().await.unwrap();
}
