//! Issue 4 through real Envoy (`--concurrency 2`) with the built filter: per-identity rate
//! limits shared by worker threads, grants pushed live by ECDS (and a refused push),
//! metrics on Envoy's stats endpoint, affinity over three arbiters, cross-prefix refusals.

use lock_config::proto::v1::*;
use lock_config::{KeyPrefix, LockKey, Reason};
use lock_integration::paths::{dev_registry, filter_wasm};
use lock_integration::pki::{LEDGER, OPERATOR, ORDERS, TRUST_DOMAIN};
use lock_integration::process::eventually;
use lock_integration::reason_of;
use lock_integration::registry::{FAST_PREFIX, LIMITED, waiter_id, write_test_registry};
use lock_integration::stack::lockctl;
use lock_integration::{Stack, StackOptions};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

use lock_integration::Client;

async fn inspect(c: &mut Client, key: &str) -> Result<InspectResponse, tonic::Status> {
    c.inspect(InspectRequest { key: key.into() })
        .await
        .map(tonic::Response::into_inner)
}

fn reason(r: Result<InspectResponse, tonic::Status>) -> Option<Reason> {
    r.err().and_then(|s| reason_of(&s).map(|r| r.0))
}

fn push(stack: &Stack, registry: &std::path::Path) -> std::process::Output {
    let ecds = stack.pki.dir.with_file_name("lock-edge.ecds.yaml");
    lockctl(
        &[
            "grants",
            "push",
            registry.to_str().unwrap(),
            "--region",
            "local",
            "--trust-domain",
            TRUST_DOMAIN,
            "--out",
            ecds.to_str().unwrap(),
            "--wasm",
            filter_wasm().unwrap().to_str().unwrap(),
        ],
        &[],
    )
    .unwrap()
}

fn stat(stack: &Stack, name: &str) -> u64 {
    stack.envoy.stat(name).unwrap().unwrap_or(0)
}

#[tokio::test]
async fn rate_limit_holds_across_workers_and_spares_other_identities() {
    let (stack, _reg) = Stack::with_test_registry().await.unwrap();
    let key = format!("{FAST_PREFIX}/r");
    // Four connections of the limited identity: Envoy spreads connections over its two
    // worker threads, so the bucket must be shared to hold.
    let mut limited = Vec::new();
    for _ in 0..4 {
        limited.push(stack.workload(LIMITED).await.unwrap());
    }
    let mut other = stack.workload(&waiter_id(0)).await.unwrap();
    let started = std::time::Instant::now();
    let (mut ok, mut refused) = (0u64, 0u64);
    for round in 0..5 {
        for c in &mut limited {
            match inspect(c, &key).await {
                Ok(_) => ok += 1,
                Err(s) => {
                    let (r, meta) = reason_of(&s).unwrap();
                    assert_eq!(
                        (s.code(), r),
                        (tonic::Code::ResourceExhausted, Reason::RateLimited)
                    );
                    assert!(meta["retry_after_ms"].parse::<u64>().unwrap() <= 1000);
                    refused += 1;
                }
            }
        }
        // The other identity on the same Envoy is never limited.
        assert!(inspect(&mut other, &key).await.is_ok(), "round {round}");
    }
    let elapsed = started.elapsed().as_secs();
    assert!(
        ok <= 3 + elapsed + 1,
        "{ok} allowed in {elapsed} s with burst 3 and 1/s"
    );
    assert!(refused >= 20 - (3 + elapsed + 1), "{refused} refused");
    assert!(stat(&stack, "wasmcustom.lock_edge.denied.RATE_LIMITED") >= refused);
}

#[tokio::test]
async fn grants_are_pushed_live_and_a_refused_push_keeps_the_previous_config() {
    let stack = Stack::start(StackOptions::default()).await.unwrap();
    let mut orders = stack.workload(ORDERS).await.unwrap();
    assert_eq!(
        reason(inspect(&mut orders, "pay/ledger/1").await),
        Some(Reason::NotGranted)
    );

    // A reviewed change: the orders worker may now lock pay/ledger.
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(dev_registry()).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, dir.path().join(p.file_name().unwrap())).unwrap();
    }
    std::fs::write(
        dir.path().join("extra.yaml"),
        format!("apiVersion: lock.dev/v1alpha1\nkind: LockGrant\nmetadata: {{name: orders-ledger}}\nspec:\n  spiffeId: {ORDERS}\n  prefixes: [pay/ledger]\n"),
    )
    .unwrap();
    let reloads = stat(
        &stack,
        "extension_config_discovery.http_filter.lock_edge.config_reload",
    );
    let out = push(&stack, dir.path());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eventually(Duration::from_secs(20), || {
        let mut c = orders.clone();
        async move {
            let r = inspect(&mut c, "pay/ledger/1").await;
            anyhow::ensure!(r.is_ok(), "not yet: {:?}", reason(r));
            Ok(())
        }
    })
    .await
    .unwrap();
    assert!(
        stat(
            &stack,
            "extension_config_discovery.http_filter.lock_edge.config_reload"
        ) > reloads
    );
    let pid = stack.envoy.proc.pid();

    // A configuration the filter refuses (a grant outside the trust domains) written
    // straight to the ECDS file: Envoy counts the rejection and keeps serving the last one.
    let rejected = stat(
        &stack,
        "extension_config_discovery.http_filter.lock_edge.update_rejected",
    );
    let broken = r#"{"region":"local","trustDomains":["dev.lock.local"],"namespaces":{"pay":"local"},"grants":[{"spiffeId":"spiffe://evil.example/x","prefixes":["pay"]}]}"#;
    let doc =
        lock_config::ecds::discovery_response_raw(broken, filter_wasm().unwrap().to_str().unwrap());
    lock_integration::envoy::write_atomic(
        &stack.pki.dir.with_file_name("lock-edge.ecds.yaml"),
        &serde_json::to_string(&doc).unwrap(),
    )
    .unwrap();
    eventually(Duration::from_secs(20), || async {
        let n = stat(
            &stack,
            "extension_config_discovery.http_filter.lock_edge.update_rejected",
        );
        anyhow::ensure!(n > rejected, "update_rejected still {n}");
        Ok(())
    })
    .await
    .unwrap();
    let mut fresh = stack.workload(ORDERS).await.unwrap();
    assert!(
        inspect(&mut fresh, "pay/ledger/1").await.is_ok(),
        "previous config still serves"
    );
    let mut ledger = stack.workload(LEDGER).await.unwrap();
    assert!(inspect(&mut ledger, "pay/ledger/1").await.is_ok());
    assert_eq!(stack.envoy.proc.pid(), pid, "no restart");

    // lockctl refuses to push what the filter would refuse.
    std::fs::write(dir.path().join("bad.yaml"), "apiVersion: lock.dev/v1alpha1\nkind: LockGrant\nmetadata: {name: bad}\nspec:\n  spiffeId: spiffe://dev.lock.local/x\n  prefixes: [\"nope/x\"]\n").unwrap();
    let out = push(&stack, dir.path());
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn rate_buckets_survive_a_grant_push() {
    let reg = tempfile::tempdir().unwrap();
    let registry = write_test_registry(reg.path()).unwrap();
    let stack = Stack::start(StackOptions {
        registry: registry.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut limited = stack.workload(LIMITED).await.unwrap();
    let key = format!("{FAST_PREFIX}/b");
    let mut refused = false;
    for _ in 0..8 {
        refused |= reason(inspect(&mut limited, &key).await) == Some(Reason::RateLimited);
    }
    assert!(refused, "bucket exhausted");
    let reloads = stat(
        &stack,
        "extension_config_discovery.http_filter.lock_edge.config_reload",
    );
    std::fs::write(registry.join("zzz-push.yaml"), "apiVersion: lock.dev/v1alpha1\nkind: Namespace\nmetadata: {name: extra}\nspec: {region: local}\n").unwrap();
    assert!(push(&stack, &registry).status.success());
    eventually(Duration::from_secs(20), || async {
        let n = stat(
            &stack,
            "extension_config_discovery.http_filter.lock_edge.config_reload",
        );
        anyhow::ensure!(n > reloads, "not reloaded");
        Ok(())
    })
    .await
    .unwrap();
    // Immediately after the push the identity is still limited: the bucket was kept.
    let mut fresh = stack.workload(LIMITED).await.unwrap();
    assert_eq!(
        reason(inspect(&mut fresh, &key).await),
        Some(Reason::RateLimited)
    );
}

#[tokio::test]
async fn affinity_over_three_arbiters_metrics_and_cross_prefix_matrix() {
    let stack = Stack::start(StackOptions {
        arbiters: 3,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut ops = stack.workload(OPERATOR).await.unwrap();
    let mut owner: HashMap<String, String> = HashMap::new();
    for _ in 0..3 {
        for i in 0..90 {
            let key = format!("pay/ledger/a{i}");
            let resp = ops
                .inspect(InspectRequest { key: key.clone() })
                .await
                .unwrap();
            let a = lock_integration::answered_by(&resp).unwrap();
            assert_eq!(
                owner.entry(key.clone()).or_insert_with(|| a.clone()),
                &a,
                "{key} moved"
            );
        }
    }
    assert_eq!(
        owner.values().collect::<HashSet<_>>().len(),
        3,
        "all three arbiters own keys"
    );

    // Every identity x key combination: allowed exactly when a grant prefix covers the key.
    let registry = lock_arbiter::registry_files::load(&dev_registry()).unwrap();
    let keys = [
        "pay/ledger",
        "pay/ledger/1",
        "pay/ledgers",
        "pay/other",
        "orders/x",
        "orders/batch/2",
        "ordersx/y",
        "archive/x",
        "nope/x",
    ];
    for (id, grant) in registry.grants() {
        let mut c = stack.workload(id.as_str()).await.unwrap();
        for key in keys {
            let k = LockKey::parse(key).unwrap();
            let covered = grant.prefixes.iter().any(|p: &KeyPrefix| p.covers(&k));
            let got = reason(inspect(&mut c, key).await);
            match (covered, got) {
                (false, Some(Reason::NotGranted)) => {}
                (true, None) => {}
                (true, Some(Reason::RegionRedirect)) if key.starts_with("archive/") => {}
                other => panic!("{id} on {key}: {other:?}"),
            }
        }
    }
    // Bounded labels on Envoy's stats: reasons and declared namespaces, never keys or IDs.
    let stats = lock_integration::admin_get(stack.envoy.admin, "/stats?filter=lock_edge").unwrap();
    assert!(
        stats.contains("wasmcustom.lock_edge.denied.NOT_GRANTED"),
        "{stats}"
    );
    assert!(
        stats.contains("wasmcustom.lock_edge.allowed.ns.pay"),
        "{stats}"
    );
    assert!(
        stats.contains("wasmcustom.lock_edge.denied.REGION_REDIRECT"),
        "{stats}"
    );
    assert!(
        !stats.contains("nope") && !stats.contains("spiffe") && !stats.contains("ledger/"),
        "{stats}"
    );
}
