//! Tiers and entity shards (issue 24, ADR-07 and ADR-09), on real clusters: a coord etcd
//! cluster and entity shards `e1`, `e2` (single-member each), arbiters with `--shards`,
//! Envoy with the filter.
//!
//! - Tier routing: a `tier: coord` class's holds are on the coord cluster; entity keys are
//!   on exactly the shard the map homes them on; each cluster mints tokens in its own
//!   epoch, allocated from the coord cluster; sessions carry their cluster's tag, and the
//!   client library opens one where the key lives (WRONG_SESSION_PLACE).
//! - A move under load (the shard gate): workers straight at both arbiters take and
//!   release keys while `lockctl shards add e3` moves about a third of them; per key,
//!   every grant's token is above the one before and no grant overlaps another.
//! - The same load with one arbiter built to grant without the shard fence
//!   (`--inject-bug shard-fence-off`): the checks catch it.

use lock_config::FencingToken;
use lock_config::Reason;
use lock_config::proto::v1::{AcquireRequest, OpenSessionRequest, ReleaseRequest};
use lock_config::shards::{COORD, ShardsDoc, lease_tag, tag_of};
use lock_integration::arbiter::Arbiter;
use lock_integration::etcd::Etcd;
use lock_integration::stack::lockctl_etcd;
use lock_integration::{Stack, StackOptions, as_from_edge, reason_of};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const WORKER: &str = "spiffe://dev.lock.local/ns/orders/sa/worker";

/// The dev registry and a coord-tier class (`orders/leader`).
fn registry(dir: &Path) -> PathBuf {
    let out = dir.join("registry");
    std::fs::create_dir_all(&out).unwrap();
    for e in std::fs::read_dir(lock_integration::paths::dev_registry()).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, out.join(p.file_name().unwrap())).unwrap();
    }
    std::fs::write(
        out.join("coord.yaml"),
        "apiVersion: lock.dev/v1alpha1
kind: LockClass
metadata: {name: orders-leader}
spec:
  namespace: orders
  prefixes: [orders/leader]
  purpose: efficiency
  enforcement: advisory
  ttlSeconds: 30
  tier: coord
",
    )
    .unwrap();
    out
}

async fn sharded_stack(dir: &Path) -> Stack {
    Stack::start(StackOptions {
        registry: registry(dir),
        entity_shards: 2,
        ..Default::default()
    })
    .await
    .unwrap()
}

async fn doc(stack: &Stack) -> ShardsDoc {
    let mut c = stack.etcd_client().await.unwrap();
    let r = c.get("/sys/shards", None).await.unwrap();
    serde_json::from_slice(r.kvs()[0].value()).unwrap()
}

/// The lease of `key`'s holder record on `cluster`, if it has one.
async fn holder_lease(cluster: &Etcd, key: &str) -> Option<i64> {
    let mut c = cluster.client().await.unwrap();
    let r = c.get(format!("/l/{key}"), None).await.unwrap();
    r.kvs().first().map(|kv| kv.lease())
}

async fn epoch_of(cluster: &Etcd) -> u16 {
    let mut c = cluster.client().await.unwrap();
    let r = c.get("/sys/epoch", None).await.unwrap();
    let v: serde_json::Value = serde_json::from_slice(r.kvs()[0].value()).unwrap();
    u16::try_from(v["epoch"].as_u64().unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tiers_and_shards_put_each_key_on_one_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let stack = sharded_stack(dir.path()).await;
    let clusters: Vec<(&str, &Etcd)> = std::iter::once((COORD, &stack.etcd))
        .chain([("e1", &stack.shards[0]), ("e2", &stack.shards[1])])
        .collect();
    // Every cluster its own epoch, allocated from the coord cluster: never one twice.
    let mut epochs = BTreeMap::new();
    for (name, c) in &clusters {
        epochs.insert(*name, epoch_of(c).await);
    }
    let mut distinct: Vec<u16> = epochs.values().copied().collect();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "{epochs:?}");

    let client = stack.lock_client(WORKER).unwrap();
    let map = doc(&stack).await.current;
    // The coord tier, then entity keys, through the real client: it keeps one session per
    // cluster and learns where a key lives from WRONG_SESSION_PLACE.
    let mut keys = vec!["orders/leader/election".to_owned()];
    keys.extend((0..24).map(|i| format!("orders/k{i}/x")));
    let mut per_cluster: BTreeMap<&str, usize> = BTreeMap::new();
    let mut holds = Vec::new();
    for key in &keys {
        let hold = client
            .acquire(key, Duration::from_secs(5), || {})
            .await
            .unwrap_or_else(|e| panic!("{key}: {e}"));
        let want = if key.starts_with("orders/leader") {
            COORD
        } else {
            map.shard_of(key)
        };
        for (name, c) in &clusters {
            let lease = holder_lease(c, key).await;
            if *name == want {
                let lease = lease.unwrap_or_else(|| panic!("{key} not held on {name}"));
                assert_eq!(tag_of(lease), lease_tag(name), "{key}: session tag");
                assert_eq!(hold.token().epoch(), epochs[name], "{key}: token epoch");
            } else {
                assert_eq!(lease, None, "{key} also held on {name}");
            }
        }
        *per_cluster.entry(want).or_default() += 1;
        holds.push(hold);
    }
    assert_eq!(per_cluster.len(), 3, "every cluster used: {per_cluster:?}");
    for h in holds {
        h.release().await.unwrap();
    }
    for key in &keys {
        for (name, c) in &clusters {
            assert_eq!(holder_lease(c, key).await, None, "{key} left on {name}");
        }
    }
    client.shutdown().await.unwrap();
    println!("holds per cluster: {per_cluster:?}, epochs {epochs:?}");
}

/// What the workers saw, checked as they go: per key, who holds it now (in this test's
/// clients) and the last token granted.
#[derive(Default)]
struct Ledger {
    holding: Mutex<HashMap<String, usize>>,
    last: Mutex<HashMap<String, FencingToken>>,
    violations: Mutex<Vec<String>>,
    grants_by_epoch: Mutex<BTreeMap<u16, usize>>,
    moving: AtomicUsize,
    /// MOVING answers to requests sent after the move had completed: none may be.
    moving_after: AtomicUsize,
    moved_at: Mutex<Option<Instant>>,
    leaked: AtomicUsize,
    replaced_sessions: AtomicUsize,
    errors: AtomicUsize,
    /// Other refusals and errors by kind (for the report).
    other: Mutex<BTreeMap<String, usize>>,
}

impl Ledger {
    fn granted(&self, worker: usize, key: &str, token: FencingToken) {
        if let Ok(mut h) = self.holding.lock()
            && let Some(other) = h.insert(key.to_owned(), worker)
        {
            self.violation(format!(
                "{key}: granted to worker {worker} while worker {other} holds it"
            ));
        }
        if let Ok(mut last) = self.last.lock()
            && let Some(before) = last.insert(key.to_owned(), token)
            && token <= before
        {
            self.violation(format!(
                "{key}: token went back from epoch {} to epoch {}",
                before.epoch(),
                token.epoch()
            ));
        }
        if let Ok(mut g) = self.grants_by_epoch.lock() {
            *g.entry(token.epoch()).or_default() += 1;
        }
    }

    fn releasing(&self, worker: usize, key: &str) {
        if let Ok(mut h) = self.holding.lock()
            && h.get(key) == Some(&worker)
        {
            h.remove(key);
        }
    }

    fn error(&self, what: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut o) = self.other.lock() {
            *o.entry(what).or_default() += 1;
        }
    }

    fn violation(&self, v: String) {
        if let Ok(mut all) = self.violations.lock() {
            all.push(v);
        }
    }
}

type Rpc = lock_client::proto::lock_client::LockClient<tonic::transport::Channel>;

/// One worker straight at an arbiter (as the edge would forward): a session per cluster,
/// opened where the key lives; random keys; bounded in count and time.
async fn worker(
    id: usize,
    mut rpc: Rpc,
    keys: Arc<Vec<String>>,
    ledger: Arc<Ledger>,
    stop: Arc<Mutex<Instant>>,
) {
    // Workers pair up on an identity: a pair's contention is answered LEAKED_HOLD (same
    // identity, another session), everyone else's is waited for in the queue.
    let me = format!("{WORKER}-{}", id % 3);
    let me = Some(me.as_str());
    let mut sessions: HashMap<u8, i64> = HashMap::new();
    let mut places: HashMap<String, u8> = HashMap::new();
    let mut n = id as u64;
    for _ in 0..20_000 {
        // Checked between operations only: a worker never stops holding a key unreleased.
        if stop.lock().map_or(true, |until| Instant::now() >= *until) {
            break;
        }
        n = n
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let key = &keys[(n >> 33) as usize % keys.len()];
        let session = match places.get(key).and_then(|t| sessions.get(t)) {
            Some(s) => *s,
            None => {
                let req = as_from_edge(OpenSessionRequest { key: key.clone() }, Some(key), me);
                match rpc.open_session(req).await {
                    Ok(r) => {
                        let s = r.into_inner().session_id;
                        sessions.insert(tag_of(s), s);
                        places.insert(key.clone(), tag_of(s));
                        s
                    }
                    Err(e) => {
                        ledger.error(format!("open: {}", e.message()));
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                }
            }
        };
        let req = AcquireRequest {
            key: key.clone(),
            session_id: session,
            wait_millis: 500,
        };
        let sent = Instant::now();
        match rpc.acquire(as_from_edge(req, Some(key), me)).await {
            Ok(r) => {
                let raw = r.into_inner().token;
                let Ok(token) = FencingToken::from_u64(raw) else {
                    ledger.violation(format!("{key}: a malformed token"));
                    continue;
                };
                ledger.granted(id, key, token);
                tokio::time::sleep(Duration::from_millis(5)).await;
                ledger.releasing(id, key);
                let rel = ReleaseRequest {
                    key: key.clone(),
                    token: raw,
                    session_id: session,
                };
                if rpc.release(as_from_edge(rel, Some(key), me)).await.is_err() {
                    ledger.errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(status) => match reason_of(&status) {
                Some((Reason::WrongSessionPlace, meta)) => {
                    let cluster = meta.get("cluster").cloned().unwrap_or_default();
                    places.insert(key.clone(), lease_tag(&cluster));
                    ledger.replaced_sessions.fetch_add(1, Ordering::Relaxed);
                }
                Some((Reason::Moving, _)) => {
                    ledger.moving.fetch_add(1, Ordering::Relaxed);
                    if ledger
                        .moved_at
                        .lock()
                        .is_ok_and(|at| at.is_some_and(|at| sent > at))
                    {
                        ledger.moving_after.fetch_add(1, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Some((Reason::SessionExpired, _)) => {
                    sessions.retain(|_, s| *s != session);
                }
                Some((Reason::Held | Reason::HeldDeadline, _)) => {}
                Some((Reason::LeakedHold, _)) => {
                    ledger.leaked.fetch_add(1, Ordering::Relaxed);
                }
                _ => {
                    ledger.error(format!("acquire: {}", status.message()));
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
        }
    }
}

struct Outcome {
    ledger: Arc<Ledger>,
    moved: std::process::Output,
    new_epoch: u16,
}

/// Workers at `arbiters` (alternating) for the whole run; at 2 s `lockctl shards add e3`.
async fn move_under_load(stack: &Stack, arbiters: &[&Arbiter], dir: &Path) -> Outcome {
    let e3 = Etcd::start_sharing(dir, "e3", stack.etcd.pki.clone()).unwrap();
    let keys: Arc<Vec<String>> = Arc::new((0..40).map(|i| format!("orders/k{i}/x")).collect());
    let ledger = Arc::new(Ledger::default());
    let until = Instant::now() + Duration::from_secs(60);
    let stop = Arc::new(Mutex::new(until));
    let mut tasks = Vec::new();
    for i in 0..6 {
        let a = arbiters[i % arbiters.len()];
        let channel = lock_integration::arbiter_channel(
            a.addr,
            Some(&stack.pki.edge_svid()),
            &stack.pki.bundle(),
        )
        .unwrap();
        let (keys, ledger, stop) = (keys.clone(), ledger.clone(), stop.clone());
        tasks.push(tokio::spawn(worker(
            i,
            Rpc::new(channel),
            keys,
            ledger,
            stop,
        )));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let coord = stack.etcd_urls();
    let shard = format!("e3={}", e3.client_url);
    let pki = stack.etcd.pki.clone();
    let moved = tokio::task::spawn_blocking(move || {
        lockctl_etcd(
            &["shards", "add", &shard, "--etcd", &coord, "--wait", "30"],
            &pki,
            "operator",
        )
        .unwrap()
    })
    .await
    .unwrap();
    *ledger.moved_at.lock().unwrap() = Some(Instant::now());
    // Load goes on for 4 s after the move.
    *stop.lock().unwrap() = Instant::now() + Duration::from_secs(4);
    for t in tasks {
        t.await.unwrap();
    }
    let new_epoch = epoch_of(&e3).await;
    // Nothing lost: every worker released what it was granted, so no hold is left on any
    // cluster (a grant handed to a waiter that had already been refused would be).
    for c in std::iter::once(&stack.etcd)
        .chain(&stack.shards)
        .chain([&e3])
    {
        let mut cl = c.client().await.unwrap();
        let r = cl
            .get("/l/", Some(etcd_client::GetOptions::new().with_prefix()))
            .await
            .unwrap();
        for kv in r.kvs() {
            ledger.violation(format!(
                "{} left held on {} (created at {}, written at {})",
                kv.key_str().unwrap_or("?"),
                c.name,
                kv.create_revision(),
                kv.mod_revision()
            ));
        }
    }
    drop(e3);
    Outcome {
        ledger,
        moved,
        new_epoch,
    }
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_move_under_load_keeps_tokens_rising_and_one_holder_per_key() {
    let dir = tempfile::tempdir().unwrap();
    let stack = sharded_stack(dir.path()).await;
    let arbiters: Vec<&Arbiter> = stack.arbiters.iter().collect();
    let out = move_under_load(&stack, &arbiters, dir.path()).await;
    let l = &out.ledger;
    let violations = l.violations.lock().unwrap().clone();
    let by_epoch = l.grants_by_epoch.lock().unwrap().clone();
    println!(
        "{}\ngrants by epoch {by_epoch:?}; MOVING answers {}; LEAKED_HOLD {}; sessions re-placed {}; other errors {} {:?}",
        text(&out.moved),
        l.moving.load(Ordering::Relaxed),
        l.leaked.load(Ordering::Relaxed),
        l.replaced_sessions.load(Ordering::Relaxed),
        l.errors.load(Ordering::Relaxed),
        l.other.lock().unwrap()
    );
    assert!(out.moved.status.success(), "{}", text(&out.moved));
    assert!(violations.is_empty(), "{violations:#?}");
    // Grants resume everywhere once the move is done (a cached fence from the middle of
    // the move must not keep refusing).
    assert_eq!(l.moving_after.load(Ordering::Relaxed), 0);
    // The moved keys were granted on e3 after the move, in its (higher) epoch.
    assert!(
        by_epoch.get(&out.new_epoch).copied().unwrap_or(0) > 0,
        "no grant on the new shard: {by_epoch:?}"
    );
    assert!(by_epoch.keys().all(|e| *e <= out.new_epoch), "{by_epoch:?}");
    assert!(
        doc(&stack)
            .await
            .current
            .shards
            .iter()
            .any(|s| s.name == "e3")
    );
}

/// The same move with one arbiter that grants without the shard fence: it keeps granting
/// moved keys on their old shard, and the ledger sees two holders or a token going back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_shard_gate_catches_a_grant_without_the_fence() {
    let dir = tempfile::tempdir().unwrap();
    let stack = sharded_stack(dir.path()).await;
    let registry = dir.path().join("registry");
    let buggy = Arbiter::start_with(
        dir.path(),
        "arbiter-bug",
        &stack.etcd_access(),
        &registry,
        &stack.pki,
        &["--shards", "--inject-bug", "shard-fence-off"],
    )
    .unwrap();
    let arbiters = vec![&stack.arbiters[0], &buggy];
    let out = move_under_load(&stack, &arbiters, dir.path()).await;
    let violations = out.ledger.violations.lock().unwrap().clone();
    println!(
        "{}\n{} violations, e.g. {:?}",
        text(&out.moved),
        violations.len(),
        violations.first()
    );
    assert!(out.moved.status.success(), "{}", text(&out.moved));
    assert!(!violations.is_empty(), "the injected bug went unseen");
}
