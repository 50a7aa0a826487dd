//! Issue 34: link faults (`link.rs` relays between the arbiters and etcd) where a lock
//! service's promises are easiest to break.
//!
//! The durable head that gives up: a release hands the key to the queue's head in its own
//! transaction (issue 18). If the head's deadline passes while that transaction's news is
//! still on its way to the head's arbiter, the head must not be told "no" while the store
//! says it holds. The arbiter withdraws and reads the holder record back before answering
//! (`durable.rs`, `leave`); with the read-back left out (`--inject-bug
//! durable-leave-without-read-back`) the same race leaves a grant nobody knows it has.
//!
//! The FIFO grant that lands late (found by the gate's bridge partition): a grant
//! transaction held on its way to etcd, while its waiter is handed the key by a release,
//! is answered with that grant, and releases it. Then the held transaction arrives. The
//! arbiter settles an attempt whose answer was lost (`grant.rs`: the attempt's own fence,
//! put before anything is answered) so it can no longer commit; without that
//! (`--inject-bug grant-without-settle`) it commits, a hold on a session whose every
//! request was answered.

use lock_config::Reason;
use lock_config::proto::v1::*;
use lock_integration::link::{Lane, Link, Shape};
use lock_integration::registry::{FAIR_PREFIX, SLOW_PREFIX, waiter_id};
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

/// Who the holder and the head are: two identities, or two processes of one (sibling
/// replicas of a Deployment, told apart by their instance).
#[derive(Clone, Copy)]
enum Pair {
    TwoIdentities,
    Siblings,
}

async fn stage(bugs: &[&str], pair: Pair) -> Race {
    let reg = tempfile::tempdir().unwrap();
    let registry = lock_integration::registry::write_test_registry(reg.path()).unwrap();
    let stack = Stack::start(StackOptions {
        registry,
        relayed_links: true,
        arbiter_args: lock_integration::inject_bugs(bugs),
        ..StackOptions::default()
    })
    .await
    .unwrap();
    let key = format!("{FAIR_PREFIX}/handoff-race");
    let (holder_id, head_id) = match pair {
        Pair::TwoIdentities => (waiter_id(0), waiter_id(1)),
        Pair::Siblings => (waiter_id(0), waiter_id(0)),
    };
    // Sessions opened at the arbiter each side uses, with an instance each; renewals go
    // through Envoy. The acquires and the release go straight to an arbiter each (with the
    // edge's headers, as the filter sets them): the head waits on arbiter 0, the holder
    // releases through arbiter 1.
    let holder = stack.workload(&holder_id).await.unwrap();
    let hs = open_as(&stack, 1, &key, &holder_id, "pod-h").await;
    let _ka_h = lock_integration::keep_alive(holder.clone(), hs, Duration::from_millis(1000));
    let mut releaser = stack.arbiter_direct(1).await.unwrap();
    let held = releaser
        .acquire(as_from_edge(
            AcquireRequest {
                key: key.clone(),
                session_id: hs,
                wait_millis: 0,
                ..Default::default()
            },
            Some(&key),
            Some(&holder_id),
        ))
        .await
        .unwrap()
        .into_inner();

    let head = stack.workload(&head_id).await.unwrap();
    let head_session = open_as(&stack, 0, &key, &head_id, "pod-w").await;
    let _ka = lock_integration::keep_alive(head.clone(), head_session, Duration::from_millis(1000));
    let asked = Instant::now();
    let waiting = {
        let mut direct = stack.arbiter_direct(0).await.unwrap();
        let key = key.clone();
        let id = head_id.clone();
        tokio::spawn(async move {
            let req = AcquireRequest {
                key: key.clone(),
                session_id: head_session,
                wait_millis: WAIT.as_millis() as u64,
                ..Default::default()
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
                ..Default::default()
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
        .get(format!("{}{key}", lock_store::layout::HOLDER_PREFIX), None)
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
    for pair in [Pair::TwoIdentities, Pair::Siblings] {
        told_the_truth(stage(&[], pair).await);
    }
}

fn told_the_truth(race: Race) {
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
    let race = stage(&["durable-leave-without-read-back"], Pair::Siblings).await;
    race.print();
    assert_eq!(race.store_holder_lease, Some(race.head_session));
    let refused = race
        .head_told
        .expect_err("without the read-back the head is refused");
    assert_eq!(reason_of(&refused).map(|r| r.0), Some(Reason::HeldDeadline));
}

/// One staging of the late FIFO grant: what the waiter was told, and the store's holder
/// of the key once the held proposal could have been applied.
struct LateGrant {
    waiter_told: Result<AcquireResponse, tonic::Status>,
    waiter_session: i64,
    /// The lease of the key's holder record at the end.
    store_holder_lease: Option<i64>,
    /// Settlements arbiter 0 ran during the staging: one means W's answer was lost.
    settlements: u64,
}

/// `lock_arbiter_grant_settlements_total`, every outcome, on arbiter 0.
fn settlements(stack: &Stack) -> u64 {
    let text = stack.arbiters[0].metrics().unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("lock_arbiter_grant_settlements_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Opens a session for `key` at arbiter `i` as process `instance` of identity `id`.
async fn open_as(stack: &Stack, i: usize, key: &str, id: &str, instance: &str) -> i64 {
    let mut req = as_from_edge(OpenSessionRequest { key: key.into() }, Some(key), Some(id));
    req.metadata_mut()
        .insert("lock-instance", instance.parse().unwrap());
    let mut direct = stack.arbiter_direct(i).await.unwrap();
    // A loaded machine can miss the arbiters' 1 s store timeout here, before any fault
    // (seen in a CI run beside a soak): NO_QUORUM is retried, as a client would.
    for _ in 0..7 {
        match direct.open_session(clone_request(&req)).await {
            Err(s) if s.code() == tonic::Code::Unavailable => {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            r => return r.unwrap().into_inner().session_id,
        }
    }
    direct
        .open_session(req)
        .await
        .unwrap()
        .into_inner()
        .session_id
}

fn clone_request<T: Clone>(r: &tonic::Request<T>) -> tonic::Request<T> {
    let mut c = tonic::Request::new(r.get_ref().clone());
    *c.metadata_mut() = r.metadata().clone();
    c
}

/// A call through arbiter `i` as the edge would forward it, retried (at most four times)
/// while the store is unavailable: a call that reached the member cut from the leader.
async fn until_answered<T: Clone, R>(
    stack: &Stack,
    i: usize,
    key: &str,
    id: &str,
    msg: T,
    call: impl AsyncFn(
        &mut lock_integration::Client,
        tonic::Request<T>,
    ) -> Result<tonic::Response<R>, tonic::Status>,
) -> Result<R, tonic::Status> {
    let mut direct = stack.arbiter_direct(i).await.unwrap();
    let mut last = None;
    // Bounded: eight tries a quarter second apart, past a loaded machine's slow store.
    for _ in 0..8 {
        match call(&mut direct, as_from_edge(msg.clone(), Some(key), Some(id))).await {
            Ok(r) => return Ok(r.into_inner()),
            Err(s) if s.code() == tonic::Code::Unavailable => {
                last = Some(s);
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(s) => return Err(s),
        }
    }
    Err(last.unwrap_or_else(|| tonic::Status::unavailable("no try")))
}

/// Two processes of one identity (sibling replicas, told apart by their instance). H holds
/// the key. W asks through arbiter 0, whose links to etcd are all cut one way, so W's
/// grant transaction waits in one relay; the member it was headed for (F) is then cut from
/// the leader (the gate's bridge partition) and the relay delivers: F forwards the
/// proposal into a connection that holds it. H releases through arbiter 0, which takes
/// W's offer; arbiter 0 then loses its connection to F (and reconnects to the leader), so
/// W's transaction's answer is lost and the release's handoff hands the key to W. W is
/// answered and releases what it was given through arbiter 1. Then F and the leader are
/// mended and the held proposal reaches the leader, which applies it to a free key.
///
/// None: the staging did not come about (the grant went to the leader itself), try again.
async fn stage_late_grant(stack: &Stack, trial: usize) -> Option<LateGrant> {
    let key = format!("{SLOW_PREFIX}/late-grant-{trial}");
    let id = waiter_id(2);
    let hs = open_as(stack, 1, &key, &id, "pod-h").await;
    // Opened at arbiter 0, so it knows W's session without reading etcd when W asks.
    let ws = open_as(stack, 0, &key, &id, "pod-w").await;
    let acquire = AcquireRequest {
        key: key.clone(),
        session_id: hs,
        wait_millis: 0,
        ..Default::default()
    };
    let held_by_h = until_answered(stack, 1, &key, &id, acquire, async |c, r| {
        c.acquire(r).await
    })
    .await
    .expect("H takes the free key");
    let Some(leader) = stack.leader().await else {
        println!("trial {trial}: no leader; again");
        return None;
    };
    let links = &stack.etcd_links[0];
    for l in links {
        l.set(Shape {
            up: Lane::cut(),
            down: Lane::default(),
        });
    }
    let before: Vec<u64> = links.iter().map(Link::up_bytes).collect();
    let settled_before = settlements(stack);
    let waiting = {
        let mut direct = stack.arbiter_direct(0).await.unwrap();
        let (key, id) = (key.clone(), id.clone());
        tokio::spawn(async move {
            let req = AcquireRequest {
                key: key.clone(),
                session_id: ws,
                wait_millis: 8000,
                ..Default::default()
            };
            direct
                .acquire(as_from_edge(req, Some(&key), Some(&id)))
                .await
                .map(tonic::Response::into_inner)
        })
    };
    // The link W's grant transaction took: the first to read anything.
    let deadline = Instant::now() + Duration::from_secs(5);
    let f = loop {
        if let Some(j) = (0..links.len()).find(|&j| links[j].up_bytes() > before[j]) {
            break j;
        }
        assert!(
            Instant::now() < deadline,
            "W's grant transaction was never sent"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let lab = stack.lab.as_ref().expect("members in network namespaces");
    let partitioned = f != leader;
    if partitioned {
        lab.cut(leader, f).unwrap();
    }
    for l in links {
        l.heal();
    }
    // F has the transaction and forwards its proposal to the leader, into the cut.
    tokio::time::sleep(Duration::from_millis(200)).await;
    // H's release takes W's offer at once; its handoff waits for the group commit that
    // W's transaction is in.
    let releasing = {
        let mut direct = stack.arbiter_direct(0).await.unwrap();
        let release = ReleaseRequest {
            key: key.clone(),
            token: held_by_h.token,
            session_id: hs,
            ..Default::default()
        };
        let (key, id) = (key.clone(), id.clone());
        tokio::spawn(async move {
            direct
                .release(as_from_edge(release, Some(&key), Some(&id)))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Arbiter 0 loses F: W's transaction's answer with it (its proposal is already on its
    // way to the leader), and its calls that way reach the leader from now on.
    let addr = |m: usize| stack.members().nth(m).map(|m| m.client_addr).unwrap();
    if partitioned {
        links[f].reroute(addr(leader));
    }
    let released = releasing.await.unwrap();
    let waiter_told = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("W was answered")
        .unwrap();
    if let Ok(grant) = &waiter_told {
        let release = ReleaseRequest {
            key: key.clone(),
            token: grant.token,
            session_id: ws,
            ..Default::default()
        };
        until_answered(stack, 1, &key, &id, release, async |c, r| {
            c.release(r).await
        })
        .await
        .expect("W releases what it was given");
    }
    if partitioned {
        lab.mend(leader, f).unwrap();
        links[f].reroute(addr(f));
    }
    if !partitioned || released.is_err() {
        println!(
            "trial {trial}: {}; again",
            if partitioned {
                format!(
                    "H's release failed ({:?})",
                    released.err().map(|s| s.message().to_owned())
                )
            } else {
                "W's grant went to the leader itself".to_owned()
            }
        );
        // Leave the key free for nobody: whatever W holds goes with its session.
        let _ = stack
            .arbiter_direct(0)
            .await
            .unwrap()
            .close_session(as_from_edge(
                CloseSessionRequest { session_id: ws },
                Some(&key),
                Some(&id),
            ))
            .await;
        return None;
    }
    // The held proposal is retransmitted once the route is back (TCP's back-off after a
    // few seconds of blackhole is seconds): look for its hold for a while.
    let mut etcd = stack.etcd_client().await.unwrap();
    let holder = format!("{}{key}", lock_store::layout::HOLDER_PREFIX);
    let look_until = Instant::now() + Duration::from_secs(8);
    let store_holder_lease = loop {
        let r = etcd.get(holder.as_str(), None).await.unwrap();
        let lease = r.kvs().first().map(|kv| kv.lease());
        if lease.is_some() || Instant::now() >= look_until {
            break lease;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    Some(LateGrant {
        waiter_told,
        waiter_session: ws,
        store_holder_lease,
        settlements: settlements(stack) - settled_before,
    })
}

/// Stages the late grant until a staging shows what `came_about` asks (a staging does
/// not always: the held proposal may reach the leader before the cut, or be dropped by it).
async fn late_grant(bugs: &[&str], came_about: fn(&LateGrant) -> bool) -> LateGrant {
    let reg = tempfile::tempdir().unwrap();
    let registry = lock_integration::registry::write_test_registry(reg.path()).unwrap();
    let mut arbiter_args = vec!["--store-timeout-ms".to_owned(), "1000".to_owned()];
    arbiter_args.extend(lock_integration::inject_bugs(bugs));
    // Three members in network namespaces (a bridge partition), the arbiters' links to
    // them relayed (to see which member a call went to).
    let stack = Stack::start(StackOptions {
        registry,
        relayed_links: true,
        etcd_members: 3,
        isolatable_etcd: true,
        arbiter_args,
        ..StackOptions::default()
    })
    .await
    .unwrap();
    for trial in 0..12 {
        if let Some(staged) = stage_late_grant(&stack, trial).await {
            println!(
                "trial {trial}: W told {}; settlements {}; the store's holder afterwards: {}",
                match &staged.waiter_told {
                    Ok(_) => "granted".to_owned(),
                    Err(s) => format!("{:?} {}", s.code(), s.message()),
                },
                staged.settlements,
                match staged.store_holder_lease {
                    None => "none",
                    Some(l) if l == staged.waiter_session => "W's session",
                    Some(_) => "another session",
                }
            );
            if came_about(&staged) {
                return staged;
            }
        }
    }
    panic!("twelve stagings, none came about");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_grant_held_in_flight_cannot_land_after_its_waiter_was_answered() {
    // Counted once W's grant answer was lost (a settlement ran): the race's premise.
    let staged = late_grant(&[], |s| s.settlements > 0).await;
    match &staged.waiter_told {
        // Settled: the held transaction can no longer commit; W released what it was
        // handed, and nothing holds the key.
        Ok(_) => assert_eq!(
            staged.store_holder_lease, None,
            "a hold appeared after W had released its grant"
        ),
        // The settlement itself was held (its three tries took the held link): W was told
        // its grant may yet take effect, and W holds what it was handed, or the late one.
        Err(s) => {
            assert_eq!(reason_of(s).map(|r| r.0), Some(Reason::NoQuorum), "{s:?}");
            assert!(s.message().contains("may still take effect"), "{s:?}");
        }
    }
}

/// The same staging without the settlement: the held transaction commits after W was
/// answered and had released, a hold on W's session that no request of W's explains.
#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_settlement_the_late_grant_lands() {
    // Without the settlement nothing tells a lost answer apart: the staging counts once
    // the late transaction has committed on W's session after W was handed the key.
    let staged = late_grant(&["grant-without-settle"], |s| {
        s.waiter_told.is_ok() && s.store_holder_lease == Some(s.waiter_session)
    })
    .await;
    assert_eq!(staged.settlements, 0, "the bug skips the settlement");
}
