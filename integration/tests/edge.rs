//! Issue 4 through real Envoy (`--concurrency 2`) with the built filter: per-identity rate
//! limits shared by worker threads, grants pushed live by ECDS (and a refused push),
//! metrics on Envoy's stats endpoint, affinity over three arbiters, cross-prefix refusals.

use lock_config::proto::v1::*;
use lock_config::{KeyPrefix, LockKey, Reason};
use lock_integration::paths::{dev_registry, filter_wasm};
use lock_integration::pki::{LEDGER, OPERATOR, ORDERS};
use lock_integration::process::eventually;
use lock_integration::reason_of;
use lock_integration::registry::{
    FAST_PREFIX, LIMITED, dev_registry_with_grant, waiter_id, write_test_registry,
};
use lock_integration::{Stack, StackOptions};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

use lock_integration::{Client, inspect};

fn reason(r: Result<InspectResponse, tonic::Status>) -> Option<Reason> {
    r.err().and_then(|s| reason_of(&s).map(|r| r.0))
}

fn push(stack: &Stack, registry: &std::path::Path) -> std::process::Output {
    stack.push_grants(registry).unwrap()
}

fn stat(stack: &Stack, name: &str) -> u64 {
    stack.envoy.stat(name).unwrap().unwrap_or(0)
}

#[tokio::test]
async fn rate_limit_holds_across_workers_and_spares_other_identities() {
    let (stack, _reg) = Stack::with_test_registry().await.unwrap();
    let key = format!("{FAST_PREFIX}/r");
    // Connections of the limited identity, opened until Envoy's two worker threads have
    // each accepted some (counted by Envoy per worker): the bucket must be shared to hold.
    let before = stack.envoy.connections_per_worker().unwrap();
    let mut limited = Vec::new();
    while limited.len() < 16 {
        limited.push(stack.workload(LIMITED).await.unwrap());
        let now = stack.envoy.connections_per_worker().unwrap();
        let spread = now
            .iter()
            .zip(before.iter().chain(std::iter::repeat(&0)))
            .filter(|(n, b)| n > b)
            .count();
        if limited.len() >= 4 && spread >= 2 {
            break;
        }
    }
    let now = stack.envoy.connections_per_worker().unwrap();
    assert!(
        now.len() >= 2
            && now
                .iter()
                .zip(before.iter().chain(std::iter::repeat(&0)))
                .filter(|(n, b)| n > b)
                .count()
                >= 2,
        "the limited identity's connections never reached both worker threads: {before:?} -> {now:?}"
    );
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
    let sent = 5 * limited.len() as u64;
    assert!(
        ok <= 3 + elapsed + 1,
        "{ok} allowed in {elapsed} s with burst 3 and 1/s"
    );
    assert_eq!(ok + refused, sent);
    assert!(stat(&stack, "wasmcustom.lock_edge.denied.RATE_LIMITED") >= refused);

    // ValidateToken draws from a bucket of its own (ADR-16): with the grant budget spent
    // (an Inspect refused just now), a ValidateToken still passes, and each admitted one
    // is counted by namespace.
    let c = &mut limited[0];
    let mut spent = false;
    for _ in 0..10 {
        if inspect(c, &key).await.is_err() {
            spent = true;
            break;
        }
    }
    assert!(spent, "the grant budget was never spent");
    let validate = ValidateTokenRequest {
        key: key.clone(),
        token: 1,
    };
    let r = c
        .validate_token(lock_client::stub::keyed(validate, &key))
        .await;
    assert!(
        r.is_ok(),
        "ValidateToken with the grant budget spent: {r:?}"
    );
    let ns = key.split('/').next().unwrap();
    let counted = stat(&stack, &format!("wasmcustom.lock_edge.validate.ns.{ns}"));
    assert_eq!(counted, 1);
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
    dev_registry_with_grant(dir.path(), ORDERS, "pay/ledger").unwrap();
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
    // The push says what it changes against what is live.
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(&format!(
            "+ grant     {ORDERS} may lock pay/ledger   [widens]"
        )),
        "{said}"
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
    lock_integration::paths::write_atomic(
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

/// Sends `n` Inspects as fast as they go; how many were admitted.
async fn admitted_of(c: &mut Client, key: &str, n: u32) -> u32 {
    let mut ok = 0;
    for _ in 0..n {
        match inspect(c, key).await {
            Ok(_) => ok += 1,
            Err(s) => assert_eq!(reason_of(&s).map(|r| r.0), Some(Reason::RateLimited)),
        }
    }
    ok
}

/// A grant push must not refill the buckets. The identity's bucket is deep (60) and refills
/// at 1/s: emptied, pushed, reloaded, a new connection may then get at most one token per
/// second since the bucket was emptied, where a fresh bucket would admit 60 at once. A slow
/// reload only lets more tokens back (counted), so the test gets slower, never red, until
/// the reload takes longer than the bucket's depth in seconds.
#[tokio::test]
async fn rate_buckets_survive_a_grant_push() {
    use lock_integration::registry::{DEEP_BURST, DEEP_LIMITED};
    let (stack, reg) = Stack::with_test_registry().await.unwrap();
    let registry = reg.path().join("registry");
    let mut limited = stack.workload(DEEP_LIMITED).await.unwrap();
    let key = format!("{FAST_PREFIX}/b");
    // Empty the bucket: a full one admits DEEP_BURST, plus what refills meanwhile.
    let first = admitted_of(&mut limited, &key, DEEP_BURST + 20).await;
    let emptied = std::time::Instant::now();
    assert!(
        first >= DEEP_BURST,
        "a full bucket admits its burst: {first}"
    );
    assert!(
        first < DEEP_BURST + 20,
        "the bucket was never emptied: {first}"
    );
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
    // A new connection after the reload: the kept bucket has refilled one per second.
    let mut fresh = stack.workload(DEEP_LIMITED).await.unwrap();
    let after = admitted_of(&mut fresh, &key, DEEP_BURST).await;
    let refill = u32::try_from(emptied.elapsed().as_secs()).unwrap_or(u32::MAX) + 1;
    assert!(
        refill < DEEP_BURST / 2,
        "the reload took {refill} s: too slow to tell a kept bucket from a fresh one"
    );
    assert!(
        after <= refill,
        "{after} admitted after the push, {refill} s after the bucket was emptied: the push refilled it"
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
    let registry = lock_store::registry_files::load(&dev_registry()).unwrap();
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

/// Affinity where it matters: waiting Acquires of one key from several identities, over
/// three arbiters, all queue at the one arbiter that owns the key (its local waiter count
/// sees every one of them), for keys owned by each of the three.
#[tokio::test]
async fn waiters_from_several_identities_queue_at_the_key_owner() {
    use lock_integration::registry::SLOW_PREFIX;
    let reg = tempfile::tempdir().unwrap();
    let stack = Stack::start(StackOptions {
        arbiters: 3,
        registry: write_test_registry(reg.path()).unwrap(),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut holder = stack.workload(&waiter_id(0)).await.unwrap();
    // One key owned by each arbiter.
    let mut keys: HashMap<String, String> = HashMap::new();
    for i in 0..200 {
        let key = format!("{SLOW_PREFIX}/aff{i}");
        let resp = holder
            .inspect(InspectRequest { key: key.clone() })
            .await
            .unwrap();
        let owner = lock_integration::answered_by(&resp).unwrap();
        if !keys.values().any(|o| *o == owner) {
            keys.insert(key, owner);
        }
        if keys.len() == 3 {
            break;
        }
    }
    assert_eq!(keys.len(), 3, "no key found for some arbiter: {keys:?}");
    let mut waiting = Vec::new();
    for (key, owner) in &keys {
        let s = lock_integration::open_session(&mut holder, key)
            .await
            .unwrap();
        holder
            .acquire(AcquireRequest {
                key: key.clone(),
                session_id: s,
                wait_millis: 0,
                ..Default::default()
            })
            .await
            .unwrap();
        for w in 1..=3 {
            let mut c = stack.workload(&waiter_id(w)).await.unwrap();
            let key = key.clone();
            waiting.push(tokio::spawn(async move {
                let s = lock_integration::open_session(&mut c, &key).await.unwrap();
                c.acquire(AcquireRequest {
                    key,
                    session_id: s,
                    wait_millis: 20_000,
                    ..Default::default()
                })
                .await
            }));
        }
        let seen = eventually(Duration::from_secs(15), || async {
            let resp = holder
                .clone()
                .inspect(InspectRequest { key: key.clone() })
                .await?;
            let by = lock_integration::answered_by(&resp).unwrap_or_default();
            let n = resp.into_inner().waiters;
            anyhow::ensure!(n == 3, "{n} of 3 waiters queued at {by}");
            Ok(by)
        })
        .await
        .unwrap();
        assert_eq!(&seen, owner, "{key}: waiters counted away from its owner");
    }
    for w in waiting {
        w.abort();
    }
}

/// HTTP/2 lets a header value carry any octet but NUL, CR and LF, so a client can send one
/// that is not UTF-8. proxy-wasm's string readers unwrap values as UTF-8 (a panic in the
/// VM); the filter reads raw octets and refuses such a request like any malformed one, and
/// keeps serving. Seen failing with the filter of before (it read headers one by one as
/// strings): the request got no gRPC status and the filter's VM failed.
#[tokio::test]
async fn header_values_that_are_not_utf8_are_refused_and_the_edge_keeps_serving() {
    use lock_integration::h2raw::{H2Client, Part, grpc_frame};
    use prost::Message as _;
    let (stack, _reg) = Stack::with_test_registry().await.unwrap();
    let svid = stack.pki.svid("utf8-prober", &waiter_id(2)).unwrap();
    let key = format!("{FAST_PREFIX}/utf8");
    let body = grpc_frame(&OpenSessionRequest { key: key.clone() }.encode_to_vec());
    let hostile: [(&str, &[u8]); 3] = [
        ("lock-key", b"pay/\xff\xfe"),
        ("content-type", b"application/grpc\xff"),
        ("x-lock-identity", b"spiffe://dev.lock.local/\xc3"),
    ];
    for (name, value) in hostile {
        let mut h2 = H2Client::connect(stack.envoy.listen, Some(&svid), &svid.ca, "localhost")
            .await
            .unwrap();
        let reply = h2
            .call_bytes(
                "OpenSession",
                &[(name, value)],
                &[Part::Data(body.clone()), Part::End],
            )
            .await
            .unwrap();
        // Answered, never a broken exchange: refused with its reason (a content type that
        // is not gRPC's gets Envoy's HTTP form of the local reply, still with the reason),
        // or, for a value the edge does not read, served.
        assert!(
            reply.failed.is_none() && (reply.grpc_status.is_some() || reply.reason.is_some()),
            "{name}: no answer: {reply:?}"
        );
        if name == "lock-key" || name == "content-type" {
            assert!(
                reply.reason.is_some() && reply.grpc_status != Some(0),
                "{name}: admitted: {reply:?}"
            );
        }
    }
    // The filter still decides: a well-formed call is admitted, an ungranted one refused.
    let mut ok = stack.workload(&waiter_id(2)).await.unwrap();
    let opened = ok
        .open_session(lock_integration::routed(
            OpenSessionRequest { key: key.clone() },
            &key,
            None,
        ))
        .await;
    assert!(opened.is_ok(), "{opened:?}");
    let crashed = stack
        .envoy
        .stats_matching(r"^wasm\..*(crash|fail).*")
        .unwrap()
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .collect::<Vec<_>>();
    assert!(crashed.is_empty(), "the filter's VM failed: {crashed:?}");
}

/// The harness picks Envoy's ports free and Envoy binds them a moment later; once in `make
/// test` another process took one in between ("Address already in use"). The stack's
/// Envoy then moves to fresh ports instead of failing the test.
#[tokio::test]
async fn the_harness_moves_envoy_off_a_port_taken_before_it_bound() {
    use lock_integration::envoy::{Envoy, EnvoyConfig};
    let stack = Stack::start(StackOptions::default()).await.unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().map(|a| (taken, a.port())).unwrap();
    let config = || {
        let arbiters = stack.arbiters.iter().map(|a| a.addr).collect();
        let mut c =
            EnvoyConfig::new(&stack.pki.dir, stack.envoy_config.filter.clone(), arbiters).unwrap();
        c.listen_port = taken.1;
        c
    };
    let (first, second) = (stack.dir.join("envoy-b"), stack.dir.join("envoy-c"));
    std::fs::create_dir_all(&first).unwrap();
    std::fs::create_dir_all(&second).unwrap();
    let refused = Envoy::start(&first, &config()).err().unwrap();
    assert!(
        format!("{refused:#}").contains("Address already in use"),
        "{refused:#}"
    );
    let mut moved = config();
    let envoy = Envoy::start_on_free_ports(&second, &mut moved, true).unwrap();
    assert_ne!(envoy.listen.port(), taken.1);
    assert_eq!(envoy.listen.port(), moved.listen_port);
}
