//! Issue 51: one etcd watch stream per arbiter for every waiting queue head and every
//! Observe (`arbiter/src/store/watch_hub.rs`). Both kinds of watcher on the one stream get
//! what they got on a stream each: a head its key's release, an Observe every change. And
//! what a busy Observe costs a head's wake on the shared stream (a measurement).

use lock_config::proto::v1::ObserveRequest;
use lock_integration::registry::{FAST_PREFIX, waiter_id};
use lock_integration::{Stack, no_fence, until_waiters};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Deletes `key`'s holder record straight in etcd: only a watch can tell a waiting head (no
/// release passes through an arbiter to hand the key on).
async fn delete_holder(stack: &Stack, key: &str) {
    let mut etcd = stack.etcd_client().await.unwrap();
    let deleted = etcd.delete(format!("/l/{key}"), None).await.unwrap();
    assert_eq!(deleted.deleted(), 1, "{key} was held");
}

/// A head waiting on `key` (held by `holder`) and an Observe of `key` on one arbiter: one
/// etcd watch stream carries both, the head is granted when the holder record goes, and
/// the Observe sees the release and the head's grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_and_an_observe_share_one_etcd_watch_stream() {
    use lock_client::Change;
    let (stack, _reg) = lock_integration::stack_with_bugs(1, &[]).await;
    let key = format!("{FAST_PREFIX}/hub");
    let streams_before = stack.etcd.streams_started("Watch").unwrap();
    let observer = stack.lock_client(&waiter_id(3)).unwrap();
    let mut observing = observer.observe(&key);
    let next = async |o: &mut lock_client::Observation| {
        tokio::time::timeout(Duration::from_secs(10), o.next())
            .await
            .expect("a change in time")
            .expect("the observation goes on")
            .change
    };
    assert_eq!(next(&mut observing).await, Change::Current);
    let holder = stack.lock_client(&waiter_id(1)).unwrap();
    let held = holder
        .acquire(&key, Duration::from_secs(5), no_fence())
        .await
        .unwrap();
    assert_eq!(next(&mut observing).await, Change::Granted);
    let waiter = stack.lock_client(&waiter_id(2)).unwrap();
    let waiting = {
        let (waiter, key) = (waiter.clone(), key.clone());
        tokio::spawn(async move {
            waiter
                .acquire(&key, Duration::from_secs(20), no_fence())
                .await
        })
    };
    let inspector = stack.workload(&waiter_id(0)).await.unwrap();
    until_waiters(&inspector, &key, 1).await.unwrap();
    delete_holder(&stack, &key).await;
    let granted = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the head woken by its watch")
        .unwrap()
        .unwrap();
    assert_ne!(next(&mut observing).await, Change::Current);
    assert_eq!(next(&mut observing).await, Change::Granted);
    let streams = stack.etcd.streams_started("Watch").unwrap() - streams_before;
    assert_eq!(streams, 1, "etcd watch streams for a head and an Observe");
    granted.release().await.unwrap();
    let _ = held.release().await; // its record is gone: refused
    for c in [observer, holder, waiter] {
        c.shutdown().await.unwrap();
    }
}

/// Percentiles of `samples` (ms), sorted in place.
fn summary(samples: &mut [f64]) -> String {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    format!(
        "p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms",
        at(0.5),
        at(0.9),
        at(1.0)
    )
}

/// What busy Observes cost a queue head's wake when they share its etcd watch stream (the
/// question of one stream or two). ROUNDS times: a head waits on a key whose holder record
/// is then deleted straight in etcd, and the time from the delete to its grant is taken;
/// first with nothing else on the stream, then with N Observes (`LOCK_OBSERVERS`, 200) of
/// another key that a client takes and releases without pause. A measurement: `--ignored
/// --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement"]
async fn what_busy_observes_cost_a_heads_wake() {
    const ROUNDS: usize = 40;
    let observers: usize = std::env::var("LOCK_OBSERVERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    let (stack, _reg) = lock_integration::stack_with_bugs(1, &[]).await;
    let holder = stack.lock_client(&waiter_id(1)).unwrap();
    let waiter = stack.lock_client(&waiter_id(2)).unwrap();
    let inspector = stack.workload(&waiter_id(0)).await.unwrap();
    let wakes = async |key: &str| {
        let mut ms = Vec::new();
        for _ in 0..ROUNDS {
            let held = holder
                .acquire(key, Duration::from_secs(5), no_fence())
                .await
                .unwrap();
            let waiting = {
                let (waiter, key) = (waiter.clone(), key.to_owned());
                tokio::spawn(async move {
                    waiter
                        .acquire(&key, Duration::from_secs(20), no_fence())
                        .await
                })
            };
            until_waiters(&inspector, key, 1).await.unwrap();
            delete_holder(&stack, key).await;
            let deleted = Instant::now();
            let granted = waiting.await.unwrap().unwrap();
            ms.push(deleted.elapsed().as_secs_f64() * 1000.0);
            granted.release().await.unwrap();
            // Its record is gone: the release is refused. Made here, not on drop, so the
            // next round's acquire is not taken for a nested one of this hold.
            let _ = held.release().await;
        }
        ms
    };
    let mut quiet = wakes(&format!("{FAST_PREFIX}/wake-quiet")).await;

    // N Observes of a busy key, each read to the end by a task of its own.
    let busy = format!("{FAST_PREFIX}/busy");
    let mut direct = stack.arbiter_direct(0).await.unwrap();
    let id = waiter_id(3);
    let notes = Arc::new(AtomicU64::new(0));
    let mut readers = Vec::new();
    for _ in 0..observers {
        let request = lock_integration::as_from_edge(
            ObserveRequest {
                key: busy.clone(),
                ..Default::default()
            },
            Some(&busy),
            Some(&id),
        );
        let mut stream = direct.observe(request).await.unwrap().into_inner();
        let notes = notes.clone();
        readers.push(tokio::spawn(async move {
            while let Ok(Some(_)) = stream.message().await {
                notes.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let churn = {
        let (client, stop, busy) = (
            stack.lock_client(&waiter_id(4)).unwrap(),
            stop.clone(),
            busy,
        );
        tokio::spawn(async move {
            let mut changes = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let hold = client
                    .acquire(&busy, Duration::from_secs(5), no_fence())
                    .await
                    .unwrap();
                hold.release().await.unwrap();
                changes += 2;
            }
            changes
        })
    };
    let started = Instant::now();
    let before = notes.load(Ordering::Relaxed);
    let mut loaded = wakes(&format!("{FAST_PREFIX}/wake-busy")).await;
    stop.store(true, Ordering::Relaxed);
    let secs = started.elapsed().as_secs_f64();
    let changes = churn.await.unwrap();
    let seen = notes.load(Ordering::Relaxed) - before;
    println!("a head's wake, {ROUNDS} rounds, from its holder record's delete to its grant:");
    println!("  alone on the stream: {}", summary(&mut quiet));
    println!(
        "  beside {observers} Observes of a key changing {:.0}/s ({:.0} Observe answers/s): {}",
        changes as f64 / secs,
        seen as f64 / secs,
        summary(&mut loaded)
    );
    for r in readers {
        r.abort();
    }
}
