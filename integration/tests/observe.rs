//! Issue 35, item 1: Observe through Envoy. A key's holder now, then every change (granted,
//! released, closed, expired, forced, revoked by an epoch advance), resumed after a reconnect, or
//! a gap said out loud once the store has compacted it. The token reaches the holder's own
//! session only: not another identity, not a sibling replica of the same identity (two
//! processes, one SVID). At the edge, an Observe of a key without a grant is refused with
//! the very bytes every other NOT_GRANTED carries, and never reaches an arbiter.

use lock_client::{Change, Hold, LockClient, Observation, Observed};
use lock_config::Reason;
use lock_config::proto::v1::*;
use lock_integration::h2raw::{H2Client, Part, Reply, grpc_frame};
use lock_integration::pki::{LEDGER, OPERATOR};
use lock_integration::registry::{FAST_PREFIX, FAST_TTL, waiter_id};
use lock_integration::{Stack, StackOptions};
use prost::Message as _;
use std::time::Duration;

/// The next change, within `secs`.
async fn next(o: &mut Observation, secs: u64) -> Observed {
    tokio::time::timeout(Duration::from_secs(secs), o.next())
        .await
        .expect("a change in time")
        .expect("the observation goes on")
}

fn holder_of(o: &Observed) -> (&str, Option<&str>) {
    let h = o.holder.as_ref().expect("a holder");
    (h.spiffe_id.as_str(), h.instance.as_deref())
}

/// Two replicas of one identity (one SVID, instances a1 and a2), each with a session in the
/// key's class: a1 holds the key. Returns (a1, a2, a1's hold).
async fn replicas_with_a1_holding(stack: &Stack, key: &str) -> (LockClient, LockClient, Hold) {
    let svid = stack.pki.svid("replica", &waiter_id(1)).unwrap();
    let a1 = stack.lock_client_with(&svid, Some("a1")).unwrap();
    let a2 = stack.lock_client_with(&svid, Some("a2")).unwrap();
    // a2's own session in the class, with nothing held on it.
    let other = format!("{key}-other");
    a2.acquire(&other, Duration::from_secs(5), lock_integration::no_fence())
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let hold = a1
        .acquire(key, Duration::from_secs(5), lock_integration::no_fence())
        .await
        .unwrap();
    (a1, a2, hold)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_follows_a_key_and_its_token_reaches_only_the_holders_session() {
    let (stack, _reg) = lock_integration::stack_with_bugs(1, &[]).await;
    let key = format!("{FAST_PREFIX}/observed");
    // Another identity, granted the same prefix.
    let o = stack.lock_client(&waiter_id(3)).unwrap();
    let mut watching = o.observe(&key);
    let first = next(&mut watching, 10).await;
    assert_eq!((first.change, first.held), (Change::Current, false));

    let (a1, a2, hold) = replicas_with_a1_holding(&stack, &key).await;
    let token = hold.token().as_u64();
    let granted = next(&mut watching, 10).await;
    assert_eq!(granted.change, Change::Granted);
    assert_eq!(holder_of(&granted), (waiter_id(1).as_str(), Some("a1")));
    assert_eq!(granted.token, None, "another identity never sees the token");
    let parts = lock_config::FencingToken::from_u64(token).unwrap();
    let h = granted.holder.as_ref().unwrap();
    assert_eq!(
        (h.epoch, h.grant_revision),
        (parts.epoch(), parts.revision() as i64)
    );

    // The holder's own process sees its token; its sibling (same SVID) does not.
    let own = next(&mut a1.observe(&key), 10).await;
    assert_eq!((own.change, own.held), (Change::Current, true));
    assert_eq!(own.token.map(|t| t.as_u64()), Some(token));
    let sibling = next(&mut a2.observe(&key), 10).await;
    assert_eq!((sibling.change, sibling.held), (Change::Current, true));
    assert_eq!(
        sibling.token, None,
        "a sibling replica never sees the token"
    );

    // The release, seen; then the observer goes away.
    hold.release().await.unwrap();
    let released = next(&mut watching, 10).await;
    assert_eq!((released.change, released.held), (Change::Released, false));
    assert_eq!(holder_of(&released).0, waiter_id(1));
    let away_at = (watching.revision(), watching.store_epoch());
    drop(watching);

    // While nobody watches: a2 takes the key and closes its session. The hold is kept
    // until then (a dropped Hold is released in the background, racing the close).
    let a2_hold = a2
        .acquire(&key, Duration::from_secs(5), lock_integration::no_fence())
        .await
        .unwrap();
    a2.shutdown().await.unwrap();
    drop(a2_hold);
    // Resumed after the last revision seen: both changes, in order, nothing else.
    let mut resumed = o.observe(&key).resume_after(away_at.0, away_at.1);
    let g = next(&mut resumed, 10).await;
    assert_eq!((g.change, holder_of(&g).1), (Change::Granted, Some("a2")));
    let c = next(&mut resumed, 10).await;
    assert_eq!((c.change, holder_of(&c).1), (Change::Closed, Some("a2")));
    assert!(g.revision > away_at.0 && c.revision > g.revision);
    // A resume point of another store's history (its epoch: a shard's, a restored
    // store's) resumes nothing here: the gap is said, from now.
    let mut elsewhere = o.observe(&key).resume_after(away_at.0, away_at.1 + 7);
    let fresh = next(&mut elsewhere, 10).await;
    assert_eq!((fresh.change, fresh.gap), (Change::Current, true));

    // A session never renewed: its hold expires with it.
    let mut lapsing = stack.workload(&waiter_id(4)).await.unwrap();
    let session = lapsing
        .open_session(lock_client::stub::keyed(
            OpenSessionRequest { key: key.clone() },
            &key,
        ))
        .await
        .unwrap()
        .into_inner()
        .session_id;
    lapsing
        .acquire(lock_client::stub::keyed(
            AcquireRequest {
                key: key.clone(),
                session_id: session,
                wait_millis: 0,
                ..Default::default()
            },
            &key,
        ))
        .await
        .unwrap();
    let g = next(&mut resumed, 10).await;
    assert_eq!(
        (g.change, holder_of(&g).0),
        (Change::Granted, waiter_id(4).as_str())
    );
    let e = next(&mut resumed, u64::from(FAST_TTL) * 3).await;
    assert_eq!(
        (e.change, holder_of(&e).0),
        (Change::Expired, waiter_id(4).as_str())
    );

    // An epoch advance revokes the hold; the next grant is in the new epoch.
    let hold = a1
        .acquire(&key, Duration::from_secs(5), lock_integration::no_fence())
        .await
        .unwrap();
    assert_eq!(next(&mut resumed, 10).await.change, Change::Granted);
    stack.advance_epoch(1).await.unwrap();
    let r = next(&mut resumed, 10).await;
    assert_eq!((r.change, r.held), (Change::Revoked, false));
    assert_eq!(r.holder.as_ref().unwrap().epoch, 1);
    drop(hold);
    let later = o
        .acquire(&key, Duration::from_secs(10), lock_integration::no_fence())
        .await
        .unwrap();
    let g = next(&mut resumed, 10).await;
    assert_eq!(
        (g.change, g.holder.as_ref().unwrap().epoch),
        (Change::Granted, 2)
    );
    assert_eq!(later.token().epoch(), 2);
    later.release().await.unwrap();
    assert_eq!(next(&mut resumed, 10).await.change, Change::Released);

    // Two operators force-release a hold (lock-admin's own filing and approval).
    let forced_hold = a1
        .acquire(&key, Duration::from_secs(5), lock_integration::no_fence())
        .await
        .unwrap();
    assert_eq!(next(&mut resumed, 10).await.change, Change::Granted);
    lock_integration::admin::force_release(&stack.etcd_access(), &key, "observe test")
        .await
        .unwrap()
        .unwrap();
    let f = next(&mut resumed, 10).await;
    assert_eq!((f.change, holder_of(&f).1), (Change::Forced, Some("a1")));
    drop(forced_hold);
    // The force record lives on (24 h): a later end is still its own cause.
    let after_force = o
        .acquire(&key, Duration::from_secs(5), lock_integration::no_fence())
        .await
        .unwrap();
    assert_eq!(next(&mut resumed, 10).await.change, Change::Granted);
    after_force.release().await.unwrap();
    assert_eq!(
        next(&mut resumed, 10).await.change,
        Change::Released,
        "an end after a force release is not forced"
    );

    // Compacted past the resume point: the observation says so, and starts from now.
    let mut etcd = stack.etcd_client().await.unwrap();
    let now = etcd
        .get("/", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    etcd.compact(now, None).await.unwrap();
    let mut gapped = o.observe(&key).resume_after(away_at.0, 0);
    let fresh = next(&mut gapped, 10).await;
    assert_eq!(
        (fresh.change, fresh.gap, fresh.held),
        (Change::Current, true, false)
    );

    // lockctl observe: the current holder as a line, never a token.
    let svid = stack.pki.svid("lockctl-observer", &waiter_id(3)).unwrap();
    let out = stack
        .lockctl_as(&svid, &["observe", &key, "--count", "1"])
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains("change=current held=false"), "{text}");
    a1.shutdown().await.unwrap();
    o.shutdown().await.unwrap();
}

/// The injected bug hands the holder's token to every observer: the sibling sees it.
#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_token_handed_to_all_a_sibling_replica_reads_it() {
    let (stack, _reg) = lock_integration::stack_with_bugs(1, &["observe-token-to-all"]).await;
    let key = format!("{FAST_PREFIX}/observed-bug");
    let (a1, a2, hold) = replicas_with_a1_holding(&stack, &key).await;
    let sibling = next(&mut a2.observe(&key), 10).await;
    assert_eq!(sibling.token, Some(hold.token()));
    a1.shutdown().await.unwrap();
    a2.shutdown().await.unwrap();
}

/// What an Observe of keys the ledger has no grant for gets at the edge, in raw HTTP/2
/// with a hand-made request: held, free and nonexistent keys must get one and the same
/// reply, the reply an Acquire of such a key gets, and nothing may reach an arbiter.
async fn observe_denial_faults(filter_switches: &[&str]) -> Vec<String> {
    let stack = Stack::start(StackOptions {
        arbiters: 1,
        filter_switches: filter_switches.iter().map(|s| (*s).to_owned()).collect(),
        ..StackOptions::default()
    })
    .await
    .unwrap();
    // The operator holds orders/held.
    let mut op = stack.workload(OPERATOR).await.unwrap();
    let s = op
        .open_session(OpenSessionRequest {
            key: "orders/held".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .session_id;
    op.acquire(AcquireRequest {
        key: "orders/held".into(),
        session_id: s,
        wait_millis: 0,
        ..Default::default()
    })
    .await
    .unwrap();
    let ledger = stack.pki.svid("observer-ledger", LEDGER).unwrap();
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
    let before = upstream();
    let mut faults = Vec::new();
    let shape = |r: &Reply| (r.grpc_status, r.grpc_message.clone(), r.details.clone());
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
    for key in ["orders/held", "orders/free", "nope/x"] {
        // With and without the key in metadata (the fast path decides on headers).
        for metadata in [false, true] {
            let req = ObserveRequest {
                key: key.into(),
                after_revision: 0,
                session_id: s,
                after_store_epoch: 0,
            };
            let encoded = lock_config::edge_headers::encode_key(key);
            let headers: Vec<(&str, &str)> = if metadata {
                vec![("lock-key", encoded.as_str())]
            } else {
                Vec::new()
            };
            let reply = c
                .call(
                    "Observe",
                    &headers,
                    &[Part::Data(grpc_frame(&req.encode_to_vec())), Part::End],
                )
                .await
                .unwrap();
            if shape(&reply) != shape(&reference) {
                faults.push(format!(
                    "Observe {key} (metadata {metadata}): {:?} {:?}, not the NOT_GRANTED every denial is",
                    reply.reason, reply.grpc_message
                ));
            }
        }
    }
    let after = upstream();
    if after != before {
        faults.push(format!("{} Observe(s) reached an arbiter", after - before));
    }
    faults
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observe_without_a_grant_is_refused_at_the_edge_like_every_denial() {
    let faults = observe_denial_faults(&[]).await;
    assert!(faults.is_empty(), "{faults:#?}");
}

/// The same probe with the filter treating Observe as a session call (no key decision):
/// the requests reach the arbiter, and the replies are no longer the edge's denial.
#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_catches_a_filter_that_does_not_key_observe() {
    let faults = observe_denial_faults(&["observe-unkeyed"]).await;
    assert!(
        faults.iter().any(|f| f.contains("reached an arbiter")),
        "{faults:#?}"
    );
}

/// What an Observe stream costs the arbiter: N streams opened straight at it, its RSS and
/// etcd's watcher count before and after. A measurement, not a test of a bound: run it
/// with `--ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement"]
async fn what_an_observe_stream_costs_the_arbiter() {
    let (stack, _reg) = lock_integration::stack_with_bugs(1, &[]).await;
    let pid = stack.arbiters[0].proc.pid().unwrap();
    // kB, as the measurement reports it.
    let rss = || lock_integration::process::rss(pid).unwrap() / 1024;
    let id = waiter_id(3);
    let mut streams = Vec::new();
    // Warm: one stream first, so the connection and its buffers are counted before.
    let mut direct = stack.arbiter_direct(0).await.unwrap();
    let open = |i: usize| {
        let key = format!("{FAST_PREFIX}/cost/{i}");
        lock_integration::as_from_edge(
            ObserveRequest {
                key: key.clone(),
                after_revision: 0,
                session_id: 0,
                after_store_epoch: 0,
            },
            Some(&key),
            Some(&id),
        )
    };
    streams.push(direct.observe(open(0)).await.unwrap().into_inner());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = rss();
    const N: usize = 500;
    for i in 1..=N {
        let mut s = direct.observe(open(i)).await.unwrap().into_inner();
        s.message().await.unwrap();
        streams.push(s);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rss();
    println!(
        "{N} Observe streams: arbiter RSS {before} kB -> {after} kB, {:.1} kB per stream",
        (after.saturating_sub(before)) as f64 / N as f64
    );
}

/// The key's only arbiter drains and restarts under an observation (a rolling update):
/// its stream ends DRAINING, lock-client reconnects after the last revision it saw, and the
/// release made meanwhile arrives, in order, with no gap said.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observation_resumes_across_its_arbiters_restart() {
    let (mut stack, _reg) = lock_integration::stack_with_bugs(1, &[]).await;
    let key = format!("{FAST_PREFIX}/observed-restart");
    let o = stack.lock_client(&waiter_id(3)).unwrap();
    let mut watching = o.observe(&key);
    assert_eq!(next(&mut watching, 10).await.change, Change::Current);
    let a = stack.lock_client(&waiter_id(1)).unwrap();
    let hold = a
        .acquire(&key, Duration::from_secs(5), lock_integration::no_fence())
        .await
        .unwrap();
    let granted = next(&mut watching, 10).await;
    assert_eq!(granted.change, Change::Granted);
    let drained = stack.arbiters[0].drain_and_restart().unwrap();
    hold.release().await.unwrap();
    let released = next(&mut watching, 30).await;
    assert_eq!(
        (
            released.change,
            released.gap,
            released.holder.map(|h| h.grant_revision)
        ),
        (Change::Released, false, Some(granted.revision)),
        "after a drain of {drained:?}"
    );
    a.shutdown().await.unwrap();
    o.shutdown().await.unwrap();
}

/// What one change costs etcd with many observers of its key: N observations of one key,
/// one grant and one expiry-free release, and the arbiter's etcd range reads meanwhile
/// (`lock_arbiter_etcd_request_seconds_count{operation="range"}`). A measurement: `--ignored
/// --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement"]
async fn what_a_change_costs_etcd_with_many_observers() {
    let (stack, _reg) = lock_integration::stack_with_bugs(1, &[]).await;
    let key = format!("{FAST_PREFIX}/many-observers");
    let o = stack.lock_client(&waiter_id(3)).unwrap();
    const N: usize = 50;
    let mut observations = Vec::new();
    for _ in 0..N {
        let mut w = o.observe(&key);
        assert_eq!(next(&mut w, 10).await.change, Change::Current);
        observations.push(w);
    }
    let ranges = || {
        let text = stack.arbiters[0].metrics().unwrap();
        text.lines()
            .filter(|l| {
                l.starts_with("lock_arbiter_etcd_request_seconds_count")
                    && l.contains("operation=\"range\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    let a = stack.lock_client(&waiter_id(1)).unwrap();
    let before = ranges();
    let hold = a
        .acquire(&key, Duration::from_secs(5), lock_integration::no_fence())
        .await
        .unwrap();
    hold.release().await.unwrap();
    for w in &mut observations {
        assert_eq!(next(w, 10).await.change, Change::Granted);
        assert_eq!(next(w, 10).await.change, Change::Released);
    }
    let after = ranges();
    println!(
        "{N} observers of one key, one grant and one release: {} etcd range reads at the arbiter",
        after - before
    );
    a.shutdown().await.unwrap();
    o.shutdown().await.unwrap();
}
