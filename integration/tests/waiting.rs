//! Issue 3: waiting in FIFO order, one grant attempt per release, deadlines, cancellation,
//! session expiry, ValidateToken and Inspect — through Envoy, on real etcd.

use lock_config::proto::v1::*;
use lock_config::{FencingToken, Reason};
use lock_integration::Stack;
use lock_integration::reason_of;
use lock_integration::registry::{FAST_PREFIX, waiter_id};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tonic::Code;

use lock_integration::{Client, acquire, inspect, until_waiters};

async fn waiter(stack: &Stack, i: usize) -> (Client, i64) {
    let mut c = stack.workload(&waiter_id(i)).await.unwrap();
    let s = c
        .open_session(OpenSessionRequest {
            key: format!("{FAST_PREFIX}/x"),
        })
        .await
        .unwrap()
        .into_inner()
        .session_id;
    (c, s)
}

/// Keeps a session alive in the background (the fast class has a 5 s TTL).
fn keep_alive(c: Client, session_id: i64) -> tokio::task::JoinHandle<()> {
    lock_integration::keep_alive(c, session_id, Duration::from_millis(1000))
}

#[tokio::test]
async fn waiters_are_granted_in_arrival_order_with_one_write_per_handoff() {
    let (stack, _reg) = Stack::with_test_registry().await.unwrap();
    let key = format!("{FAST_PREFIX}/fifo");
    let (mut holder, hs) = waiter(&stack, 0).await;
    let _ka = keep_alive(holder.clone(), hs);
    let first = acquire(&mut holder, &key, hs, 0).await.unwrap();

    const N: usize = 5;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    let mut tokens = Arc::new(Mutex::new(vec![first.token]));
    for i in 1..=N {
        let (mut c, s) = waiter(&stack, i).await;
        let ka = keep_alive(c.clone(), s);
        let (order, tokens, k) = (order.clone(), tokens.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            let g = acquire(&mut c, &k, s, 30_000).await.unwrap();
            order.lock().unwrap().push(i);
            tokens.lock().unwrap().push(g.token);
            c.release(ReleaseRequest {
                key: k.clone(),
                token: g.token,
                session_id: s,
                ..Default::default()
            })
            .await
            .unwrap();
            ka.abort();
        }));
        // Arrival order is the order the arbiter queued them in: wait until it has.
        until_waiters(&holder, &key, i as u32).await.unwrap();
    }
    let txns_before = stack.etcd.rpc_count("Txn").unwrap();
    holder
        .release(ReleaseRequest {
            key: key.clone(),
            token: first.token,
            session_id: hs,
            ..Default::default()
        })
        .await
        .unwrap();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .unwrap()
            .unwrap();
    }
    let txns = stack.etcd.rpc_count("Txn").unwrap() - txns_before;

    assert_eq!(*order.lock().unwrap(), (1..=N).collect::<Vec<_>>(), "FIFO");
    let tokens = std::mem::take(Arc::get_mut(&mut tokens).unwrap())
        .into_inner()
        .unwrap();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens strictly increase"
    );
    // N+1 releases, each of the first N handing the key to the next waiter in its own
    // transaction (issue 18): one write per handoff; any grant attempt of its own, or a
    // doomed one, would show here. (Before handoffs: N+1 releases and N grants.)
    assert_eq!(
        txns,
        (N + 1) as u64,
        "etcd Txn count: one transaction per handoff"
    );
    assert_eq!(inspect(&mut holder, &key).await.unwrap().waiters, 0);
}

#[tokio::test]
async fn deadline_and_cancellation_leave_the_queue() {
    let (stack, _reg) = Stack::with_test_registry().await.unwrap();
    let key = format!("{FAST_PREFIX}/dl");
    let (mut holder, hs) = waiter(&stack, 0).await;
    let _ka = keep_alive(holder.clone(), hs);
    acquire(&mut holder, &key, hs, 0).await.unwrap();

    let (mut w1, s1) = waiter(&stack, 1).await;
    let asked = std::time::Instant::now();
    let status = acquire(&mut w1, &key, s1, 800).await.unwrap_err();
    // It waited its whole deadline (a slow machine only makes the wait longer).
    assert!(
        asked.elapsed() >= Duration::from_millis(800),
        "answered after {:?}",
        asked.elapsed()
    );
    assert_eq!(status.code(), Code::DeadlineExceeded);
    assert_eq!(reason_of(&status).unwrap().0, Reason::HeldDeadline);
    assert_eq!(inspect(&mut holder, &key).await.unwrap().waiters, 0);

    // A cancelled request (the caller drops it) leaves the queue.
    let (w2, s2) = waiter(&stack, 2).await;
    let k = key.clone();
    let task = tokio::spawn(async move {
        let mut w2 = w2;
        let _ = acquire(&mut w2, &k, s2, 60_000).await;
    });
    until_waiters(&holder, &key, 1).await.unwrap();
    task.abort();
    until_waiters(&holder, &key, 0).await.unwrap();
}

#[tokio::test]
async fn session_expiry_releases_every_hold_and_the_waiter_gets_a_larger_token() {
    let (stack, _reg) = Stack::with_test_registry().await.unwrap();
    let (mut holder, hs) = waiter(&stack, 0).await; // never kept alive: expires after 5 s
    let a = acquire(&mut holder, &format!("{FAST_PREFIX}/a"), hs, 0)
        .await
        .unwrap();
    let b = acquire(&mut holder, &format!("{FAST_PREFIX}/b"), hs, 0)
        .await
        .unwrap();

    let mut etcd = stack.etcd_client().await.unwrap();
    let mut watch = etcd
        .watch(
            format!("/l/{FAST_PREFIX}/"),
            Some(etcd_client::WatchOptions::new().with_prefix()),
        )
        .await
        .unwrap();

    let (mut w, ws) = waiter(&stack, 1).await;
    let _ka = keep_alive(w.clone(), ws);
    let g = acquire(&mut w, &format!("{FAST_PREFIX}/a"), ws, 20_000)
        .await
        .unwrap();
    assert!(g.token > a.token && g.token > b.token);

    // Both holds were deleted by the lease expiry in one committed entry (same revision).
    let mut deleted = Vec::new();
    while deleted.len() < 2 {
        let resp = tokio::time::timeout(Duration::from_secs(10), watch.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        for e in resp.events() {
            if e.event_type() == etcd_client::EventType::Delete {
                deleted.push(e.kv().unwrap().mod_revision());
            }
        }
    }
    assert_eq!(
        deleted[0], deleted[1],
        "expiry removes all holds in one entry"
    );
    let status = acquire(&mut holder, &format!("{FAST_PREFIX}/c"), hs, 0)
        .await
        .unwrap_err();
    assert_eq!(reason_of(&status).unwrap().0, Reason::SessionExpired);
}

/// Issue 18: every waiting queue head watches its key on the arbiter's one etcd watch
/// stream, not one stream per head; each is still woken by its key's release (here the
/// holder's session expiring, so no handoff is involved: only the watch can wake them).
#[tokio::test]
async fn queue_heads_share_one_etcd_watch_stream_per_arbiter() {
    const KEYS: usize = 6;
    let (stack, _reg) = Stack::with_test_registry().await.unwrap();
    let (mut holder, hs) = waiter(&stack, 0).await; // never kept alive: expires after 5 s
    let streams_before = stack.etcd.streams_started("Watch").unwrap();
    let key = |k: usize| format!("{FAST_PREFIX}/heads-{k}");
    let mut tokens = Vec::new();
    for k in 0..KEYS {
        tokens.push(acquire(&mut holder, &key(k), hs, 0).await.unwrap().token);
    }
    let mut tasks = Vec::new();
    for k in 0..KEYS {
        let (mut c, s) = waiter(&stack, 1 + k % 7).await;
        let ka = keep_alive(c.clone(), s);
        let k_name = key(k);
        tasks.push(tokio::spawn(async move {
            let g = acquire(&mut c, &k_name, s, 30_000).await;
            ka.abort();
            g
        }));
        until_waiters(&holder, &key(k), 1).await.unwrap();
    }
    let streams = stack.etcd.streams_started("Watch").unwrap() - streams_before;
    assert!(
        streams <= stack.arbiters.len() as u64,
        "{streams} etcd watch streams for {KEYS} queue heads on {} arbiters",
        stack.arbiters.len()
    );
    for (k, t) in tasks.into_iter().enumerate() {
        let g = tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(g.token > tokens[k], "key {k}: the head got a larger token");
    }
}

#[tokio::test]
async fn validate_token_and_inspect() {
    let (stack, _reg) = Stack::with_test_registry().await.unwrap();
    let key = format!("{FAST_PREFIX}/v");
    let (mut w0, s0) = waiter(&stack, 0).await;
    let _ka = keep_alive(w0.clone(), s0);
    let g = acquire(&mut w0, &key, s0, 0).await.unwrap();
    let valid = |c: &mut Client, token: u64| {
        let mut c = c.clone();
        let key = key.clone();
        async move {
            c.validate_token(ValidateTokenRequest { key, token })
                .await
                .unwrap()
                .into_inner()
                .valid
        }
    };
    assert!(valid(&mut w0, g.token).await);
    assert!(!valid(&mut w0, g.token + 1).await);
    assert!(!valid(&mut w0, u64::MAX).await);
    let wrong_epoch =
        FencingToken::pack(2, FencingToken::from_u64(g.token).unwrap().revision()).unwrap();
    assert!(!valid(&mut w0, wrong_epoch.as_u64()).await);

    let i = inspect(&mut w0, &key).await.unwrap();
    assert!(i.held);
    assert_eq!(i.holder_spiffe_id, waiter_id(0));
    assert_eq!(i.class_name, "pay-fast");
    assert!(i.acquired_at_unix_ms > 0);

    w0.release(ReleaseRequest {
        key: key.clone(),
        token: g.token,
        session_id: s0,
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(!valid(&mut w0, g.token).await, "false after release");
    assert!(!inspect(&mut w0, &key).await.unwrap().held);

    let (mut w1, s1) = waiter(&stack, 1).await;
    let _ka1 = keep_alive(w1.clone(), s1);
    let g2 = acquire(&mut w1, &key, s1, 0).await.unwrap();
    assert!(!valid(&mut w0, g.token).await, "false after re-grant");
    assert!(valid(&mut w0, g2.token).await);
}

/// The durable queue entries of `key` in etcd.
async fn durable_entries(etcd: &mut etcd_client::Client, key: &str) -> usize {
    let q = etcd
        .get(
            format!("/q/{key}//"),
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    q.kvs().len()
}

#[tokio::test]
async fn durable_waiters_keep_create_revision_order_and_no_one_overtakes() {
    use lock_integration::registry::FAIR_PREFIX;
    let (stack, _reg) = Stack::with_test_registry().await.unwrap();
    let key = format!("{FAIR_PREFIX}/k");
    let (mut holder, hs) = waiter(&stack, 0).await;
    let _ka0 = keep_alive(holder.clone(), hs);
    let first = acquire(&mut holder, &key, hs, 0).await.unwrap();

    const N: usize = 3;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 1..=N {
        let (mut c, s) = waiter(&stack, i).await;
        let ka = keep_alive(c.clone(), s);
        let (order, k) = (order.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            let g = acquire(&mut c, &k, s, 30_000).await.unwrap();
            order.lock().unwrap().push(i);
            c.release(ReleaseRequest {
                key: k.clone(),
                token: g.token,
                session_id: s,
                ..Default::default()
            })
            .await
            .unwrap();
            ka.abort();
        }));
        until_waiters(&holder, &key, i as u32).await.unwrap();
    }
    // Durable waiters are keys on their session leases.
    let mut etcd = stack.etcd_client().await.unwrap();
    assert_eq!(durable_entries(&mut etcd, &key).await, N);

    // A caller that will not wait does not overtake them, even though it is its turn to ask.
    let (mut late, ls) = waiter(&stack, N + 1).await;
    let status = acquire(&mut late, &key, ls, 0).await.unwrap_err();
    assert_eq!(reason_of(&status).unwrap().0, Reason::Held);

    let txns_before = stack.etcd.rpc_count("Txn").unwrap();
    holder
        .release(ReleaseRequest {
            key: key.clone(),
            token: first.token,
            session_id: hs,
            ..Default::default()
        })
        .await
        .unwrap();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .unwrap()
            .unwrap();
    }
    let txns = stack.etcd.rpc_count("Txn").unwrap() - txns_before;
    assert_eq!(*order.lock().unwrap(), (1..=N).collect::<Vec<_>>());
    // Each of the first N releases hands the key on to the first entry, deleting it, in
    // its own transaction (issue 18); the waiters find the record theirs by reading it.
    // (Before durable handoffs: N+1 releases and N grant transactions.)
    assert_eq!(txns, (N + 1) as u64, "one transaction per handoff");
    until_waiters(&holder, &key, 0).await.unwrap();
    assert_eq!(
        durable_entries(&mut etcd, &key).await,
        0,
        "every entry went with its handoff"
    );
}

#[tokio::test]
async fn durable_order_survives_a_restart_of_the_owning_arbiter() {
    use lock_integration::registry::FAIR_PREFIX;
    let (mut stack, _reg) = Stack::with_test_registry().await.unwrap();
    let key = format!("{FAIR_PREFIX}/restart");
    let (mut holder, hs) = waiter(&stack, 0).await;
    let _ka0 = keep_alive(holder.clone(), hs);
    let first = acquire(&mut holder, &key, hs, 0).await.unwrap();
    let resp = holder
        .inspect(InspectRequest { key: key.clone() })
        .await
        .unwrap();
    let owner = lock_integration::answered_by(&resp).unwrap();

    // Three waiters queue in order 1, 2, 3; their requests die with the owning arbiter.
    let mut waiters = Vec::new();
    let mut pending = Vec::new();
    for i in 1..=3 {
        let (c, s) = waiter(&stack, i).await;
        let ka = keep_alive(c.clone(), s);
        let (mut c2, k) = (c.clone(), key.clone());
        pending.push(tokio::spawn(async move {
            acquire(&mut c2, &k, s, 60_000).await
        }));
        until_waiters(&holder, &key, i as u32).await.unwrap();
        waiters.push((i, c, s, ka));
    }
    let arbiter = stack.arbiters.iter_mut().find(|a| a.id == owner).unwrap();
    arbiter.restart().unwrap();
    for p in pending {
        assert!(
            p.await.unwrap().is_err(),
            "the waits ended with the arbiter"
        );
    }
    assert_eq!(
        inspect(&mut holder, &key).await.unwrap().waiters,
        3,
        "durable entries survived"
    );

    // They come back in reverse order; grants still follow the original order.
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (i, mut c, s, ka) in waiters.into_iter().rev() {
        let (order, k) = (order.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            let g = acquire(&mut c, &k, s, 30_000).await.unwrap();
            order.lock().unwrap().push(i);
            c.release(ReleaseRequest {
                key: k,
                token: g.token,
                session_id: s,
                ..Default::default()
            })
            .await
            .unwrap();
            ka.abort();
        }));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    holder
        .release(ReleaseRequest {
            key: key.clone(),
            token: first.token,
            session_id: hs,
            ..Default::default()
        })
        .await
        .unwrap();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![1, 2, 3]);
}

/// A durable entry outlives its request (the owning arbiter restarted), so a release hands
/// the key to that entry's session while nobody is asking; the session's next Acquire gets
/// the grant back at the handoff's revision, as after a lost answer, not HELD.
#[tokio::test]
async fn a_handoff_to_an_entry_whose_request_died_is_its_sessions_grant() {
    use lock_integration::registry::FAIR_PREFIX;
    let (mut stack, _reg) = Stack::with_test_registry().await.unwrap();
    let key = format!("{FAIR_PREFIX}/orphan");
    let (mut holder, hs) = waiter(&stack, 0).await;
    let _ka0 = keep_alive(holder.clone(), hs);
    let first = acquire(&mut holder, &key, hs, 0).await.unwrap();
    let owner = lock_integration::answered_by(
        &holder
            .inspect(InspectRequest { key: key.clone() })
            .await
            .unwrap(),
    )
    .unwrap();

    let (w, ws) = waiter(&stack, 1).await;
    let _ka1 = keep_alive(w.clone(), ws);
    let (mut w2, k) = (w.clone(), key.clone());
    let pending = tokio::spawn(async move { acquire(&mut w2, &k, ws, 60_000).await });
    until_waiters(&holder, &key, 1).await.unwrap();
    let arbiter = stack.arbiters.iter_mut().find(|a| a.id == owner).unwrap();
    arbiter.restart().unwrap();
    assert!(
        pending.await.unwrap().is_err(),
        "the wait died with its arbiter"
    );

    let released_at = holder
        .release(ReleaseRequest {
            key: key.clone(),
            token: first.token,
            session_id: hs,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .released_at_revision;
    let i = inspect(&mut holder, &key).await.unwrap();
    assert!(i.held, "handed on to the waiting entry");
    assert_eq!(i.holder_spiffe_id, waiter_id(1));
    assert_eq!(i.waiters, 0, "its entry went with the handoff");

    let mut w = w;
    let g = acquire(&mut w, &key, ws, 0).await.unwrap();
    let t = FencingToken::from_u64(g.token).unwrap();
    assert_eq!(
        i64::try_from(t.revision()).unwrap(),
        released_at,
        "the grant is the handoff's write"
    );
    assert!(g.token > first.token);
}

/// Found by the release gate: an epoch advance deletes every durable queue entry; a waiter
/// whose entry was gone answered HELD for a free key. It takes a place again and gets it.
#[tokio::test]
async fn a_durable_waiter_outlives_an_epoch_advance() {
    use lock_integration::registry::FAIR_PREFIX;
    let (stack, _reg) = Stack::with_test_registry().await.unwrap();
    let key = format!("{FAIR_PREFIX}/advance");
    let (mut holder, hs) = waiter(&stack, 0).await;
    let _ka0 = keep_alive(holder.clone(), hs);
    acquire(&mut holder, &key, hs, 0).await.unwrap();
    let (mut c, s) = waiter(&stack, 1).await;
    let _ka1 = keep_alive(c.clone(), s);
    let k = key.clone();
    let waiting = tokio::spawn(async move { acquire(&mut c, &k, s, 30_000).await });
    until_waiters(&holder, &key, 1).await.unwrap();

    stack.advance_epoch(1).await.unwrap();
    let granted = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .unwrap()
        .unwrap()
        .expect("the waiter gets the key the advance freed");
    assert_eq!(FencingToken::from_u64(granted.token).unwrap().epoch(), 2);
}

/// Found by the gate (issue 17): after an epoch advance, an arbiter that has not re-read
/// the epoch record yet refused the release of a hold another arbiter had granted in the
/// new epoch (STALE_TOKEN, the hold still live). A token from a later epoch than the cache
/// means the cache is behind: the release re-reads it and commits.
#[tokio::test]
async fn a_release_reaches_an_arbiter_whose_epoch_cache_is_behind() {
    use lock_integration::{StackOptions, as_from_edge};
    let reg = tempfile::tempdir().unwrap();
    let registry = lock_integration::registry::write_test_registry(reg.path()).unwrap();
    let stack = Stack::start(StackOptions {
        arbiters: 2,
        registry,
        ..Default::default()
    })
    .await
    .unwrap();
    let me = waiter_id(0);
    let key = format!("{FAST_PREFIX}/epoch-cache");
    let mut a = stack.arbiter_direct(0).await.unwrap();
    let mut b = stack.arbiter_direct(1).await.unwrap();
    let open = |k: &str| as_from_edge(OpenSessionRequest { key: k.into() }, Some(k), Some(&me));
    let session = a
        .open_session(open(&key))
        .await
        .unwrap()
        .into_inner()
        .session_id;
    let acq = |k: &str| {
        as_from_edge(
            AcquireRequest {
                key: k.into(),
                session_id: session,
                wait_millis: 0,
                ..Default::default()
            },
            Some(k),
            Some(&me),
        )
    };
    let rel = |k: &str, token: u64| {
        as_from_edge(
            ReleaseRequest {
                key: k.into(),
                token,
                session_id: session,
                ..Default::default()
            },
            Some(k),
            Some(&me),
        )
    };
    // Both arbiters cache epoch 1.
    for (c, k) in [(&mut a, format!("{key}/a")), (&mut b, format!("{key}/b"))] {
        let t = c.acquire(acq(&k)).await.unwrap().into_inner().token;
        c.release(rel(&k, t)).await.unwrap();
    }
    stack.advance_epoch(1).await.unwrap();
    // Arbiter 0 learns the new epoch from its grant's failed compare; arbiter 1 has not.
    let token = a.acquire(acq(&key)).await.unwrap().into_inner().token;
    assert_eq!(FencingToken::from_u64(token).unwrap().epoch(), 2);
    b.release(rel(&key, token))
        .await
        .expect("a live hold's release is not refused for the arbiter's stale cache");
    // A live hold's revision under the epoch before the advance is still refused.
    let token = a.acquire(acq(&key)).await.unwrap().into_inner().token;
    let revision = FencingToken::from_u64(token).unwrap().revision();
    let old = FencingToken::pack(1, revision).unwrap().as_u64();
    let status = b.release(rel(&key, old)).await.unwrap_err();
    assert_eq!(reason_of(&status).map(|(r, _)| r), Some(Reason::StaleToken));
    b.release(rel(&key, token)).await.unwrap();
}

/// A durable key's queue is its own: the waiters of a longer key under it (`…/nest/inner`
/// under `…/nest`) are neither counted as `…/nest`'s waiters nor handed `…/nest` when it
/// is released. (Both were so while the queue's entries lived at `/q/<key>/<lease>`, a
/// prefix that also holds `/q/<key>/inner/<lease>`: the release handed `…/nest` to a
/// session that had asked only for `…/nest/inner`.)
#[tokio::test]
async fn a_durable_queue_holds_only_its_own_keys_waiters() {
    use lock_integration::registry::FAIR_PREFIX;
    let (stack, _reg) = Stack::with_test_registry().await.unwrap();
    let outer = format!("{FAIR_PREFIX}/nest");
    let inner = format!("{FAIR_PREFIX}/nest/inner");
    let (mut holder, hs) = waiter(&stack, 0).await;
    let _ka0 = keep_alive(holder.clone(), hs);
    let outer_grant = acquire(&mut holder, &outer, hs, 0).await.unwrap();
    let inner_grant = acquire(&mut holder, &inner, hs, 0).await.unwrap();

    // A waiter of the inner key, queued first.
    let (mut w1, s1) = waiter(&stack, 1).await;
    let _ka1 = keep_alive(w1.clone(), s1);
    let inner_wait = {
        let k = inner.clone();
        tokio::spawn(async move { acquire(&mut w1, &k, s1, 30_000).await })
    };
    until_waiters(&holder, &inner, 1).await.unwrap();
    let mut look = holder.clone();
    assert_eq!(
        inspect(&mut look, &outer).await.unwrap().waiters,
        0,
        "the inner key's waiter was counted as the outer key's"
    );

    // A waiter of the outer key, queued second: the outer key's release is its grant.
    let (mut w2, s2) = waiter(&stack, 2).await;
    let _ka2 = keep_alive(w2.clone(), s2);
    let outer_wait = {
        let k = outer.clone();
        tokio::spawn(async move { acquire(&mut w2, &k, s2, 30_000).await })
    };
    until_waiters(&holder, &outer, 1).await.unwrap();
    holder
        .release(ReleaseRequest {
            key: outer.clone(),
            token: outer_grant.token,
            session_id: hs,
            ..Default::default()
        })
        .await
        .unwrap();
    let granted = tokio::time::timeout(Duration::from_secs(10), outer_wait)
        .await
        .expect("the outer key's waiter was not granted")
        .unwrap();
    assert!(granted.is_ok(), "{granted:?}");
    let seen = inspect(&mut look, &outer).await.unwrap();
    assert_eq!(
        seen.holder_spiffe_id,
        waiter_id(2),
        "the outer key went to a session that never asked for it"
    );
    assert!(
        !inner_wait.is_finished(),
        "the inner key's waiter stopped waiting"
    );

    // The inner key's release is its own waiter's grant.
    holder
        .release(ReleaseRequest {
            key: inner.clone(),
            token: inner_grant.token,
            session_id: hs,
            ..Default::default()
        })
        .await
        .unwrap();
    let granted = tokio::time::timeout(Duration::from_secs(10), inner_wait)
        .await
        .expect("the inner key's waiter was not granted")
        .unwrap();
    assert!(granted.is_ok(), "{granted:?}");
    assert_eq!(
        inspect(&mut look, &inner).await.unwrap().holder_spiffe_id,
        waiter_id(1)
    );
}
