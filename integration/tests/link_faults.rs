//! Issue 34: link faults (`link.rs` relays between the arbiters and etcd) where a lock
//! service's promises are easiest to break.
//!
//! The durable head that gives up: a release hands the key to the queue's head in its own
//! transaction (issue 18). If the head's deadline passes while that transaction's news is
//! still on its way to the head's arbiter, the head must not be told "no" while the store
//! says it holds. The arbiter withdraws and reads the holder record back before answering
//! (`durable.rs`, `leave`); with the read-back left out (`--inject-bug
//! durable-leave-without-read-back`) the same race leaves a grant nobody knows it has.

use lock_config::Reason;
use lock_config::proto::v1::*;
use lock_integration::link::{Lane, Shape};
use lock_integration::registry::{FAIR_PREFIX, waiter_id};
use lock_integration::{Stack, StackOptions, as_from_edge, reason_of, until_waiters};
use std::time::{Duration, Instant};

/// How late etcd's news reaches every arbiter while the race is staged.
const NEWS_DELAY: Duration = Duration::from_millis(1500);
/// The head's wait.
const WAIT: Duration = Duration::from_millis(4000);

/// What the head was told, how long it took, and whose lease the store's holder record
/// is on afterwards.
struct Race {
    head_told: Result<AcquireResponse, tonic::Status>,
    took: Duration,
    head_session: i64,
    store_holder_lease: Option<i64>,
}

impl Race {
    /// What happened, without the token (a capability, never in output).
    fn print(&self) {
        println!(
            "head answered after {:?}: {}; the store's holder is the head: {}",
            self.took,
            match &self.head_told {
                Ok(_) => "granted".to_owned(),
                Err(s) => format!("{:?} {}", s.code(), s.message()),
            },
            self.store_holder_lease == Some(self.head_session)
        );
    }
}

async fn stage(bugs: &[&str]) -> Race {
    let reg = tempfile::tempdir().unwrap();
    let registry = lock_integration::registry::write_test_registry(reg.path()).unwrap();
    let mut arbiter_args = Vec::new();
    for b in bugs {
        arbiter_args.extend(["--inject-bug".to_owned(), (*b).to_owned()]);
    }
    let stack = Stack::start(StackOptions {
        registry,
        relayed_links: true,
        arbiter_args,
        ..StackOptions::default()
    })
    .await
    .unwrap();
    let key = format!("{FAIR_PREFIX}/handoff-race");
    let session = |c: &mut lock_integration::Client| {
        let mut c = c.clone();
        let key = key.clone();
        async move {
            c.open_session(OpenSessionRequest { key })
                .await
                .unwrap()
                .into_inner()
                .session_id
        }
    };
    // Sessions and renewals go through Envoy; the acquires and the release go straight to
    // an arbiter each (with the edge's headers, as the filter sets them): the head waits
    // on arbiter 0, the holder releases through arbiter 1.
    let holder = stack.workload(&waiter_id(0)).await.unwrap();
    let hs = session(&mut holder.clone()).await;
    let _ka_h = lock_integration::keep_alive(holder.clone(), hs, Duration::from_millis(1000));
    let holder_id = waiter_id(0);
    let mut releaser = stack.arbiter_direct(1).await.unwrap();
    let held = releaser
        .acquire(as_from_edge(
            AcquireRequest {
                key: key.clone(),
                session_id: hs,
                wait_millis: 0,
            },
            Some(&key),
            Some(&holder_id),
        ))
        .await
        .unwrap()
        .into_inner();

    let head = stack.workload(&waiter_id(1)).await.unwrap();
    let head_session = session(&mut head.clone()).await;
    let _ka = lock_integration::keep_alive(head.clone(), head_session, Duration::from_millis(1000));
    let asked = Instant::now();
    let waiting = {
        let mut direct = stack.arbiter_direct(0).await.unwrap();
        let key = key.clone();
        let id = waiter_id(1);
        tokio::spawn(async move {
            let req = AcquireRequest {
                key: key.clone(),
                session_id: head_session,
                wait_millis: WAIT.as_millis() as u64,
            };
            let r = direct
                .acquire(as_from_edge(req, Some(&key), Some(&id)))
                .await
                .map(tonic::Response::into_inner);
            (r, asked.elapsed())
        })
    };
    until_waiters(&holder, &key, 1).await.unwrap();

    // From now on etcd hears arbiter 0 at once and it hears etcd late: the release's
    // handoff (through arbiter 1, whose links are clean) commits at once, and the head's
    // arbiter learns of it only after the head's deadline.
    for l in &stack.etcd_links[0] {
        l.set(Shape {
            up: Lane::default(),
            down: Lane {
                delay: NEWS_DELAY,
                ..Lane::default()
            },
        });
    }
    let release_at = asked + WAIT - NEWS_DELAY / 2;
    tokio::time::sleep_until(release_at.into()).await;
    let released = releaser
        .release(as_from_edge(
            ReleaseRequest {
                key: key.clone(),
                token: held.token,
                session_id: hs,
            },
            Some(&key),
            Some(&holder_id),
        ))
        .await;
    assert!(released.is_ok(), "the holder's release: {released:?}");
    let (head_told, took) = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the head was answered")
        .unwrap();
    for l in &stack.etcd_links[0] {
        l.heal();
    }
    // The store's word, once every link is clean again.
    let mut etcd = stack.etcd_client().await.unwrap();
    let r = etcd
        .get(
            format!("{}{key}", lock_arbiter::layout::HOLDER_PREFIX),
            None,
        )
        .await
        .unwrap();
    Race {
        head_told,
        took,
        head_session,
        store_holder_lease: r.kvs().first().map(|kv| kv.lease()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_head_whose_deadline_passes_during_the_handoff_is_told_the_truth() {
    let race = stage(&[]).await;
    race.print();
    // The race happened: the head's answer came after its deadline, and the store handed
    // it the key.
    assert!(
        race.took >= WAIT,
        "answered before the deadline ({:?})",
        race.took
    );
    assert_eq!(
        race.store_holder_lease,
        Some(race.head_session),
        "the release handed the key to the head"
    );
    // The answer agrees with the store: the grant, read back after the withdrawal.
    let grant = race.head_told.expect("the head holds; it must be told so");
    assert!(grant.token > 0);
}

/// The same race with the read-back left out: the head is told "no" while the store says
/// it holds (the disagreement the test above would fail on, and the gate's checks flag).
#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_read_back_the_head_is_refused_a_hold_it_has() {
    let race = stage(&["durable-leave-without-read-back"]).await;
    race.print();
    assert_eq!(race.store_holder_lease, Some(race.head_session));
    let refused = race
        .head_told
        .expect_err("without the read-back the head is refused");
    assert_eq!(reason_of(&refused).map(|r| r.0), Some(Reason::HeldDeadline));
}
