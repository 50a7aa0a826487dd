//! Issue 35, item 3: AcquireAll through Envoy. A set of keys is granted in one etcd
//! transaction or not at all, with one token for every key; ReleaseAll ends them together.
//! Two callers asking for {a,b} and {b,a} at once cannot deadlock (a set holds nothing
//! while it waits), with two identities and with two replicas of one identity. At the
//! edge, a set with one key the caller has no grant for is refused with the very bytes
//! every NOT_GRANTED carries, whichever key it is, and nothing is forwarded or held.

use lock_client::{LockClient, LockError};
use lock_config::Reason;
use lock_config::proto::v1::*;
use lock_integration::h2raw::{H2Client, Part, Reply, grpc_frame};
use lock_integration::pki::{LEDGER, OPERATOR};
use lock_integration::registry::{FAIR_PREFIX, FAST_PREFIX, SLOW_PREFIX, waiter_id};
use lock_integration::{Stack, StackOptions};
use prost::Message as _;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn k(name: &str) -> String {
    format!("{FAST_PREFIX}/set/{name}")
}

/// Whether `key` is held now, read by Inspect through the edge.
async fn held(
    client: &mut lock_client::proto::lock_client::LockClient<tonic::transport::Channel>,
    key: &str,
) -> bool {
    client
        .inspect(InspectRequest { key: key.into() })
        .await
        .unwrap()
        .into_inner()
        .held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_is_granted_whole_or_not_at_all_with_one_token() {
    let (stack, _reg) = lock_integration::stack_with_bugs(2, &[]).await;
    let a = stack.lock_client(&waiter_id(0)).unwrap();
    let b = stack.lock_client(&waiter_id(1)).unwrap();
    let mut look = stack.workload(&waiter_id(2)).await.unwrap();
    let (ka, kb, kc) = (k("a"), k("b"), k("c"));

    // b holds kb alone: a's set {ka, kb, kc} is refused at once, and none of it is held.
    let single = b
        .acquire(&kb, Duration::from_secs(5), lock_integration::no_fence())
        .await
        .unwrap();
    let refused = a
        .acquire_all(
            &[&kc, &kb, &ka],
            Duration::ZERO,
            lock_integration::no_fence(),
        )
        .await
        .err();
    assert_eq!(refused, Some(LockError::Held));
    assert!(!held(&mut look, &ka).await && !held(&mut look, &kc).await);

    // Waiting, the set is taken when b releases, above b's token.
    let waiting = {
        let a = a.clone();
        let keys = [kc.clone(), kb.clone(), ka.clone()];
        tokio::spawn(async move { a.acquire_all(&keys, Duration::from_secs(20), || {}).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!held(&mut look, &ka).await, "a waiting set holds nothing");
    let b_token = single.token();
    single.release().await.unwrap();
    let set = tokio::time::timeout(Duration::from_secs(15), waiting)
        .await
        .expect("the set is granted after the release")
        .unwrap()
        .unwrap();
    assert_eq!(set.keys(), [ka.clone(), kb.clone(), kc.clone()]);
    assert!(
        set.token() > b_token,
        "the set's token is above the key's last grant"
    );
    // One token for every key: each is that key's current grant.
    for key in [&ka, &kb, &kc] {
        let valid = look
            .validate_token(ValidateTokenRequest {
                key: key.clone(),
                token: set.token().as_u64(),
            })
            .await
            .unwrap()
            .into_inner()
            .valid;
        assert!(valid, "{key}");
    }
    // A single acquire of one of its keys waits for the set.
    assert_eq!(
        b.acquire(&ka, Duration::ZERO, lock_integration::no_fence())
            .await
            .err(),
        Some(LockError::Held)
    );
    let set_token = set.token();
    set.release().await.unwrap();
    for key in [&ka, &kb, &kc] {
        assert!(!held(&mut look, key).await, "{key} released with the set");
    }
    let after = b
        .acquire(&kc, Duration::from_secs(5), lock_integration::no_fence())
        .await
        .unwrap();
    assert!(after.token() > set_token);
    after.release().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// The sets a caller cannot have, each refused with its reason and nothing held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sets_that_cannot_be_one_transaction_are_refused_with_their_reason() {
    let (stack, _reg) = lock_integration::stack_with_bugs(2, &[]).await;
    let a = stack.lock_client(&waiter_id(0)).unwrap();
    let mut look = stack.workload(&waiter_id(2)).await.unwrap();
    let why = |r: Result<lock_client::HeldSet, LockError>| match r {
        Err(LockError::KeySetRefused { why, .. }) => why,
        Err(e) => format!("refused otherwise: {e}"),
        Ok(_) => "granted".into(),
    };
    let durable = format!("{FAIR_PREFIX}/set/x");
    assert_eq!(
        why(a
            .acquire_all(
                &[k("d1"), durable.clone()],
                Duration::ZERO,
                lock_integration::no_fence()
            )
            .await),
        "durable-class"
    );
    let slow = format!("{SLOW_PREFIX}/set/x");
    assert_eq!(
        why(a
            .acquire_all(
                &[k("d2"), slow.clone()],
                Duration::ZERO,
                lock_integration::no_fence()
            )
            .await),
        "mixed-ttl"
    );
    // A key this client holds alone: a wait would be on itself.
    let mine = a
        .acquire(
            &k("d3"),
            Duration::from_secs(5),
            lock_integration::no_fence(),
        )
        .await
        .unwrap();
    assert_eq!(
        why(a
            .acquire_all(
                &[k("d3"), k("d4")],
                Duration::from_secs(5),
                lock_integration::no_fence()
            )
            .await),
        "own-hold"
    );
    mine.release().await.unwrap();
    for key in [k("d1"), k("d2"), k("d4"), durable, slow] {
        assert!(!held(&mut look, &key).await, "{key}");
    }
    // Malformed sets never reach etcd.
    let twice = a
        .acquire_all(
            &[k("e"), k("e")],
            Duration::ZERO,
            lock_integration::no_fence(),
        )
        .await
        .err();
    assert!(
        matches!(twice, Some(LockError::InvalidRequest(_))),
        "{twice:?}"
    );
    a.shutdown().await.unwrap();
}

/// What the deadlock run saw: per key, the tokens of the sets granted it in grant order,
/// and any moment two holders believed they held one key.
#[derive(Default)]
struct Seen {
    holding: HashMap<String, u64>,
    tokens: HashMap<String, Vec<u64>>,
    overlaps: Vec<String>,
}

/// Two callers loop on {a,b} and {b,a} (and a third takes a and b alone) for `rounds`
/// rounds each: every set must be granted within its wait, no key may be believed held
/// by two at once, and each key's tokens must rise in the order its holds began.
async fn contend(clients: Vec<LockClient>, rounds: usize) -> Seen {
    let (x, y) = (k("x"), k("y"));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut tasks = Vec::new();
    for (i, c) in clients.into_iter().enumerate() {
        let (x, y, seen) = (x.clone(), y.clone(), seen.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let keys = if i % 2 == 0 {
                    vec![x.clone(), y.clone()]
                } else {
                    vec![y.clone(), x.clone()]
                };
                let set = c
                    .acquire_all(&keys, Duration::from_secs(20), || {})
                    .await
                    .map_err(|e| format!("client {i}: {e}"))?;
                let t = set.token().as_u64();
                {
                    let mut s = seen.lock().unwrap();
                    for key in set.keys() {
                        if let Some(other) = s.holding.insert(key.clone(), t) {
                            s.overlaps.push(format!("{key}: {other} and {t}"));
                        }
                        s.tokens.entry(key.clone()).or_default().push(t);
                    }
                }
                tokio::time::sleep(Duration::from_millis(3)).await;
                {
                    let mut s = seen.lock().unwrap();
                    for key in set.keys() {
                        s.holding.remove(key);
                    }
                }
                set.release()
                    .await
                    .map_err(|e| format!("client {i}: {e}"))?;
            }
            c.shutdown().await.ok();
            Ok::<(), String>(())
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    for t in tasks {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, t).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => seen.lock().unwrap().overlaps.push(format!("failed: {e}")),
            Ok(Err(e)) => panic!("{e}"),
            Err(_) => panic!("the contending sets did not finish in 120 s: a deadlock"),
        }
    }
    Arc::try_unwrap(seen)
        .ok()
        .map(|m| m.into_inner().unwrap())
        .unwrap_or_default()
}

fn assert_rising(seen: &Seen) {
    assert!(seen.overlaps.is_empty(), "{:#?}", seen.overlaps);
    for (key, tokens) in &seen.tokens {
        assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{key}: {tokens:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_orders_cannot_deadlock_two_identities_and_two_replicas_of_one() {
    let (stack, _reg) = lock_integration::stack_with_bugs(2, &[]).await;
    let rounds = 15;
    // Two identities.
    let two = vec![
        stack.lock_client(&waiter_id(0)).unwrap(),
        stack.lock_client(&waiter_id(1)).unwrap(),
    ];
    let seen = contend(two, rounds).await;
    assert_rising(&seen);
    assert_eq!(seen.tokens[&k("x")].len(), 2 * rounds);
    // Two replicas of one identity (one SVID, instances r1 and r2): siblings contend and
    // wait for each other, never a leak.
    let svid = stack.pki.svid("replica", &waiter_id(3)).unwrap();
    let replicas = vec![
        stack.lock_client_with(&svid, Some("r1")).unwrap(),
        stack.lock_client_with(&svid, Some("r2")).unwrap(),
    ];
    let seen = contend(replicas, rounds).await;
    assert_rising(&seen);
    assert_eq!(seen.tokens[&k("y")].len(), 2 * rounds);
}

/// With the arbiter's injected bug (the set's last key not compared absent), a set is
/// granted over a key another session holds: two believe they hold it. Without the bug,
/// the same request is refused HELD.
async fn set_over_a_held_key(bugs: &[&str]) -> Result<(), LockError> {
    let (stack, _reg) = lock_integration::stack_with_bugs(2, bugs).await;
    let a = stack.lock_client(&waiter_id(0)).unwrap();
    let b = stack.lock_client(&waiter_id(1)).unwrap();
    let hold = b
        .acquire(
            &k("z"),
            Duration::from_secs(5),
            lock_integration::no_fence(),
        )
        .await
        .unwrap();
    let set = a
        .acquire_all(
            &[k("w"), k("z")],
            Duration::ZERO,
            lock_integration::no_fence(),
        )
        .await;
    drop(hold);
    set.map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_over_a_held_key_is_refused() {
    assert_eq!(set_over_a_held_key(&[]).await, Err(LockError::Held));
}

#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_test_catches_a_set_without_one_compare() {
    assert_eq!(
        set_over_a_held_key(&["set-without-one-compare"]).await,
        Ok(())
    );
}

/// AcquireAll and ReleaseAll of sets with one key the ledger has no grant for, in raw
/// HTTP/2 with hand-made protobuf: each must get the reply a single ungranted key gets,
/// whichever key it is, with or without a granted `lock-key` in the metadata; nothing may
/// reach an arbiter and nothing may be held.
async fn set_denial_faults(filter_switches: &[&str]) -> Vec<String> {
    let stack = Stack::start(StackOptions {
        arbiters: 1,
        filter_switches: filter_switches.iter().map(|s| (*s).to_owned()).collect(),
        ..StackOptions::default()
    })
    .await
    .unwrap();
    let ledger = stack.pki.svid("set-ledger", LEDGER).unwrap();
    let mut look = stack.workload(OPERATOR).await.unwrap();
    let mut c = H2Client::connect(stack.envoy.listen, Some(&ledger), &ledger.ca, "localhost")
        .await
        .unwrap();
    let upstream = || {
        stack
            .envoy
            .stat("cluster.arbiters.upstream_rq_total")
            .unwrap()
            .unwrap_or(0)
    };
    let shape = |r: &Reply| (r.grpc_status, r.grpc_message.clone(), r.details.clone());
    let mut faults = Vec::new();
    let acquire = AcquireRequest {
        key: "orders/free".into(),
        session_id: 1,
        wait_millis: 0,
        ..Default::default()
    };
    let reference = c
        .call(
            "Acquire",
            &[],
            &[Part::Data(grpc_frame(&acquire.encode_to_vec())), Part::End],
        )
        .await
        .unwrap();
    if reference.reason != Some(Reason::NotGranted) {
        faults.push(format!("the reference Acquire was answered {reference:?}"));
    }
    let before = upstream();
    // The ledger is granted pay/ledger; orders/… is the operator's.
    let sets: [&[&str]; 3] = [
        &["pay/ledger/1", "orders/free"],
        &["orders/free", "pay/ledger/2"],
        &["pay/ledger/3", "pay/ledger/4", "zzz/nope"],
    ];
    for keys in sets {
        for metadata in [false, true] {
            let headers: Vec<(&str, &str)> = if metadata {
                vec![("lock-key", "pay/ledger/1")]
            } else {
                Vec::new()
            };
            let keys: Vec<String> = keys.iter().map(|s| (*s).to_owned()).collect();
            let calls = [
                (
                    "AcquireAll",
                    AcquireAllRequest {
                        keys: keys.clone(),
                        session_id: 1,
                        wait_millis: 0,
                    }
                    .encode_to_vec(),
                ),
                (
                    "ReleaseAll",
                    ReleaseAllRequest {
                        keys: keys.clone(),
                        token: 1 << 48 | 5,
                        session_id: 0,
                    }
                    .encode_to_vec(),
                ),
            ];
            for (method, body) in calls {
                let reply = c
                    .call(
                        method,
                        &headers,
                        &[Part::Data(grpc_frame(&body)), Part::End],
                    )
                    .await
                    .unwrap();
                if shape(&reply) != shape(&reference) {
                    faults.push(format!(
                        "{method} {keys:?} (metadata {metadata}): {:?} {:?}, not the NOT_GRANTED every denial is",
                        reply.reason, reply.grpc_message
                    ));
                }
            }
        }
    }
    let after = upstream();
    if after != before {
        faults.push(format!(
            "{} set request(s) reached an arbiter",
            after - before
        ));
    }
    for key in [
        "pay/ledger/1",
        "pay/ledger/2",
        "pay/ledger/3",
        "orders/free",
    ] {
        let r = look.inspect(InspectRequest { key: key.into() }).await;
        if r.is_ok_and(|r| r.into_inner().held) {
            faults.push(format!("{key} is held"));
        }
    }
    faults
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_with_one_ungranted_key_is_refused_at_the_edge_like_every_denial() {
    let faults = set_denial_faults(&[]).await;
    assert!(faults.is_empty(), "{faults:#?}");
}

/// The same probe with the filter deciding a set on its first key alone: sets whose
/// ungranted key is not the least reach the arbiter.
#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_catches_a_filter_that_reads_one_key_of_a_set() {
    let faults = set_denial_faults(&["set-first-key-only"]).await;
    assert!(
        faults.iter().any(|f| f.contains("reached an arbiter")),
        "{faults:#?}"
    );
}

/// ReleaseAll after one key of the set ended alone: the rest are released and named; the
/// key that had ended is not. Once none is still the grant, STALE_TOKEN.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_all_ends_what_is_left_and_says_which() {
    let (stack, _reg) = lock_integration::stack_with_bugs(2, &[]).await;
    let mut raw = stack.workload(&waiter_id(0)).await.unwrap();
    let (p, q, r) = (k("p"), k("q"), k("r"));
    let session = raw
        .open_session(OpenSessionRequest { key: p.clone() })
        .await
        .unwrap()
        .into_inner()
        .session_id;
    let set = raw
        .acquire_all(AcquireAllRequest {
            keys: vec![r.clone(), p.clone(), q.clone()],
            session_id: session,
            wait_millis: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(set.keys, [p.clone(), q.clone(), r.clone()]);
    raw.release(ReleaseRequest {
        key: q.clone(),
        token: set.token,
        session_id: session,
        ..Default::default()
    })
    .await
    .unwrap();
    let release_all = ReleaseAllRequest {
        keys: set.keys.clone(),
        token: set.token,
        session_id: session,
    };
    let released = raw
        .release_all(release_all.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(released.released_keys, [p.clone(), r.clone()]);
    let again = raw.release_all(release_all).await.unwrap_err();
    assert_eq!(
        lock_client::refusal(&again).map(|r| r.reason),
        Some(Reason::StaleToken)
    );
}
