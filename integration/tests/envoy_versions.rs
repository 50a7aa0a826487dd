//! Issue 19, item 5: the filter in the Envoy releases platform teams run. Every other
//! end-to-end test runs Envoy 1.40 (the newest); this runs the oldest supported release
//! (1.36.4) and a middle one (1.38.2), installed beside it by install-deps.sh: the wasm loads,
//! a lock is taken on both paths (key as `lock-key` metadata, key in the body only), an
//! ungranted key and a malformed one are refused, a namespace homed elsewhere is
//! redirected, and a grant pushed by `lockctl grants push` (file ECDS) is served without a
//! restart.

use lock_client::stub::keyed;
use lock_config::Reason;
use lock_config::proto::v1::*;
use lock_integration::pki::{LEDGER, OPERATOR, ORDERS};
use lock_integration::process::eventually;
use lock_integration::registry::dev_registry_with_grant;
use lock_integration::{Stack, StackOptions, reason_of};
use std::time::Duration;

async fn take_refuse_redirect_push(version: &str) {
    let stack = Stack::start(StackOptions {
        envoy_version: Some(version.into()),
        ..Default::default()
    })
    .await
    .unwrap_or_else(|e| panic!("Envoy {version} with the filter: {e:#}"));
    let out = std::process::Command::new(
        lock_integration::paths::dep(&format!("envoy-{version}")).unwrap(),
    )
    .arg("--version")
    .output()
    .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("/{version}/")),
        "the Envoy under test is {version}"
    );

    // Take and release, on both paths.
    let mut ledger = stack.workload(LEDGER).await.unwrap();
    for (i, fast) in [true, false].into_iter().enumerate() {
        let key = format!("pay/ledger/compat-{i}");
        let req = |m| {
            if fast {
                keyed(m, &key)
            } else {
                tonic::Request::new(m)
            }
        };
        let session = ledger
            .open_session(req(OpenSessionRequest { key: key.clone() }))
            .await
            .unwrap()
            .into_inner()
            .session_id;
        let req = |m| {
            if fast {
                keyed(m, &key)
            } else {
                tonic::Request::new(m)
            }
        };
        let token = ledger
            .acquire(req(AcquireRequest {
                key: key.clone(),
                session_id: session,
                wait_millis: 0,
                ..Default::default()
            }))
            .await
            .unwrap()
            .into_inner()
            .token;
        let req = |m| {
            if fast {
                keyed(m, &key)
            } else {
                tonic::Request::new(m)
            }
        };
        ledger
            .release(req(ReleaseRequest {
                key: key.clone(),
                token,
                session_id: session,
                ..Default::default()
            }))
            .await
            .unwrap();
    }

    // Refusals, on both paths.
    let refused = |r: Result<tonic::Response<InspectResponse>, tonic::Status>| {
        reason_of(&r.expect_err("refused")).map(|r| r.0)
    };
    for (key, reason) in [
        ("pay/ledgers", Reason::NotGranted),
        ("pay/a//b", Reason::InvalidKey),
    ] {
        let msg = || InspectRequest { key: key.into() };
        assert_eq!(refused(ledger.inspect(msg()).await), Some(reason), "{key}");
        assert_eq!(
            refused(ledger.inspect(keyed(msg(), key)).await),
            Some(reason),
            "{key}, fast path"
        );
    }
    let mut operator = stack.workload(OPERATOR).await.unwrap();
    let status = operator
        .inspect(keyed(
            InspectRequest {
                key: "archive/x".into(),
            },
            "archive/x",
        ))
        .await
        .unwrap_err();
    let (reason, meta) = reason_of(&status).unwrap();
    assert_eq!(reason, Reason::RegionRedirect);
    assert_eq!(meta.get("region").map(String::as_str), Some("eu-far"));

    // A reviewed grant pushed live: the orders worker may now lock pay/ledger.
    let mut orders = stack.workload(ORDERS).await.unwrap();
    let key = "pay/ledger/compat-push";
    let ask = |mut c: lock_integration::Client| async move {
        c.inspect(keyed(InspectRequest { key: key.into() }, key))
            .await
    };
    assert_eq!(refused(ask(orders.clone()).await), Some(Reason::NotGranted));
    let dir = tempfile::tempdir().unwrap();
    dev_registry_with_grant(dir.path(), ORDERS, "pay/ledger").unwrap();
    let pid = stack.envoy.proc.pid();
    let out = stack.push_grants(dir.path()).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eventually(Duration::from_secs(30), || {
        let c = orders.clone();
        async move {
            let r = ask(c).await;
            anyhow::ensure!(r.is_ok(), "not yet: {:?}", r.err().map(|s| reason_of(&s)));
            Ok(())
        }
    })
    .await
    .unwrap_or_else(|e| panic!("Envoy {version} did not serve the pushed grant: {e:#}"));
    assert_eq!(stack.envoy.proc.pid(), pid, "no restart");
    orders = stack.workload(ORDERS).await.unwrap();
    assert!(ask(orders).await.is_ok(), "a new connection sees it too");
}

#[tokio::test]
async fn the_oldest_supported_envoy_1_36() {
    take_refuse_redirect_push("1.36.4").await;
}

#[tokio::test]
async fn envoy_1_38() {
    // Not 1.38.3: PyPI's wheel of it is built without the V8 runtime (the filter fails
    // closed there, refusing everything).
    take_refuse_redirect_push("1.38.2").await;
}
