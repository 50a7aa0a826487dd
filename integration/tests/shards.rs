//! Tiers and entity shards (issue 24, ADR-07 and ADR-09), on real clusters: a coord etcd
//! cluster and entity shards `e1`, `e2` (single-member each), arbiters with `--shards`,
//! Envoy with the filter.
//!
//! - Tier routing: a `tier: coord` class's holds are on the coord cluster; entity keys are
//!   on exactly the shard the map homes them on; each cluster mints tokens in its own
//!   epoch, allocated from the coord cluster; sessions carry their cluster's tag, and the
//!   client library opens one where the key lives (WRONG_SESSION_PLACE).
//!
//! - Epoch advances: the two-person advance (lock-admin's own code) of a shard takes its
//!   epoch from the coord cluster's allocator, never E+1, so no two clusters ever serve one
//!   epoch (ADR-03, 09); shown failing with the old rule (the debug-only bug
//!   `advance-without-coord`).
//!
//! Moves under load are the gate's (`integration/gate/src/shards.rs`, `gate shards`).

use lock_config::shards::{COORD, ShardsDoc, lease_tag, tag_of};
use lock_force::request::Refusal;
use lock_force::store::ForceError;
use lock_integration::admin;
use lock_integration::etcd::Etcd;
use lock_integration::{Stack, StackOptions};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

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

/// Every cluster's epoch now: coord, e1, e2.
async fn epochs(stack: &Stack) -> [u16; 3] {
    [
        epoch_of(&stack.etcd).await,
        epoch_of(&stack.shards[0]).await,
        epoch_of(&stack.shards[1]).await,
    ]
}

/// No two of `epochs` alike.
fn apart(epochs: &[u16]) -> bool {
    let mut sorted = epochs.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    sorted.len() == epochs.len()
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
    let all: Vec<u16> = epochs.values().copied().collect();
    assert!(apart(&all) && all.len() == 3, "{epochs:?}");

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

fn lockctl(stack: &Stack, args: &[&str]) -> (bool, String) {
    lockctl_as(stack, "operator", args)
}

/// `lockctl shards ARGS` with etcd user `user`'s certificate.
fn lockctl_as(stack: &Stack, user: &str, args: &[&str]) -> (bool, String) {
    let coord = stack.etcd_urls();
    let mut all = vec!["shards"];
    all.extend_from_slice(args);
    all.extend(["--etcd", coord.as_str()]);
    let out = lock_integration::stack::lockctl_etcd(&all, &stack.etcd.pki, user).unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Draining e2 moves its keys to e1, whose epoch (2) is below e2's (3): the move would
/// need an advance of e1, which ends e1's holds. Refused before anything is written unless
/// the operator accepts it; accepted, e1's epoch jumps above every epoch so far, e1's
/// holds end, and e2's keys are granted on e1 with larger tokens than e2 ever gave.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drain_that_needs_an_epoch_advance_is_refused_unless_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let stack = sharded_stack(dir.path()).await;
    let client = stack.lock_client(WORKER).unwrap();
    let map = doc(&stack).await.current;
    let on = |shard: &str| {
        (0..200)
            .map(|i| format!("orders/d{i}/x"))
            .find(|k| map.shard_of(k) == shard)
            .unwrap()
    };
    let (k1, k2) = (on("e1"), on("e2"));
    let h1 = client
        .acquire(&k1, Duration::from_secs(5), || {})
        .await
        .unwrap();
    let h2 = client
        .acquire(&k2, Duration::from_secs(5), || {})
        .await
        .unwrap();
    let before = h2.token();
    h2.release().await.unwrap();

    let (ok, text) = lockctl(&stack, &["drain", "e2", "--wait", "5"]);
    assert!(!ok, "{text}");
    assert!(text.contains("--advance-destination"), "{text}");
    assert_eq!(doc(&stack).await.current.version, 1, "nothing written");
    assert_eq!(doc(&stack).await.pending, None);

    // Accepted, but an advance writes /sys/epoch: not the operator's (ADR-03). Refused
    // before anything is written.
    let drain = ["drain", "e2", "--wait", "5", "--advance-destination"];
    let (ok, text) = lockctl(&stack, &drain);
    assert!(!ok, "{text}");
    assert!(text.contains("etcd root"), "{text}");
    assert_eq!(doc(&stack).await.pending, None, "nothing written");
    assert!(holder_lease(&stack.shards[0], &k1).await.is_some());
    // Root's certificate (break-glass): the advance is recorded as such.
    let (ok, text) = lockctl_as(&stack, "root", &drain);
    assert!(ok, "{text}");
    assert!(text.contains("epochs advanced: e1 2->4"), "{text}");
    let after = doc(&stack).await.current;
    assert_eq!(after.version, 2);
    assert!(after.shards.iter().all(|s| s.name != "e2"));
    // e1's hold ended with the advance, which its epoch record names as break-glass.
    assert_eq!(holder_lease(&stack.shards[0], &k1).await, None);
    let mut e1 = stack.shards[0].client().await.unwrap();
    let rec = e1.get("/sys/epoch", None).await.unwrap();
    let rec: lock_store::layout::EpochRecord =
        serde_json::from_slice(rec.kvs()[0].value()).unwrap();
    let by = rec.advanced_by.expect("the advance names who ran it");
    assert!(
        by.break_glass && by.reason.contains("e1 receives"),
        "{by:?}"
    );
    drop(h1);
    // e2's key now lives on e1, with a token above every one e2 gave.
    let again = client
        .acquire(&k2, Duration::from_secs(5), || {})
        .await
        .unwrap();
    assert!(
        again.token() > before,
        "{:?} !> {:?}",
        again.token(),
        before
    );
    assert_eq!(again.token().epoch(), 4);
    assert!(holder_lease(&stack.shards[0], &k2).await.is_some());
    again.release().await.unwrap();
    let (ok, text) = lockctl(&stack, &["show"]);
    assert!(ok && text.contains("map version 2"), "{text}");
    client.shutdown().await.unwrap();
}

/// The two-person advance on a sharded estate: each shard's new epoch comes from the coord
/// cluster's allocator, above every epoch any cluster has had, so the clusters' epochs stay
/// apart; a shard's lock-admin that was not given the coord cluster is refused rather than
/// take E+1; the coord cluster's own lock-admin allocates from the coord cluster itself; and
/// the arbiters serve the new epochs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_person_advances_of_two_shards_take_epochs_apart() {
    let dir = tempfile::tempdir().unwrap();
    let stack = sharded_stack(dir.path()).await;
    assert_eq!(epochs(&stack).await, [1, 2, 3], "coord, e1, e2 as set up");
    let e1 = &stack.shards[0];

    // e1's lock-admin without the coord cluster: refused at filing, nothing written.
    let alone = admin::advance_epoch(&e1.access(&e1.client_url), 2, "no coord")
        .await
        .unwrap();
    match alone {
        Err(ForceError::Refused(Refusal::CoordRequired { shard })) => assert_eq!(shard, "e1"),
        other => panic!("a shard advanced without the coord cluster: {other:?}"),
    }
    // Break-glass (root) on e1 without --coord: refused by the same rule.
    let out = lock_integration::stack::lockctl_etcd(
        &[
            "epoch",
            "advance",
            "break-glass",
            "--etcd",
            &e1.client_url,
            "--from",
            "2",
            "--reason",
            "no coord",
            "--operator",
            "carol",
        ],
        &stack.etcd.pki,
        "root",
    )
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("entity shard e1"), "{err}");
    assert_eq!(epochs(&stack).await, [1, 2, 3]);

    // Both shards through lock-admin given the coord cluster. E+1 would give e1 epoch 3,
    // e2's; the allocator (at 3) gives 4, then 5.
    let r1 = stack.advance_shard_epoch(0, 2).await.unwrap();
    let r2 = stack.advance_shard_epoch(1, 3).await.unwrap();
    assert_eq!((r1.epoch, r2.epoch), (4, 5));
    let by = r1.advanced_by.expect("the record names both operators");
    assert!(!by.break_glass && !by.approver.is_empty(), "{by:?}");
    // The coord cluster's own lock-admin (no --coord): from its own allocator.
    assert_eq!(stack.advance_epoch(1).await.unwrap().epoch, 6);
    let now = epochs(&stack).await;
    assert_eq!(now, [6, 4, 5]);
    assert!(apart(&now), "{now:?}");

    // The arbiters serve the new epochs: a key on each shard is granted in its shard's.
    let client = stack.lock_client(WORKER).unwrap();
    let map = doc(&stack).await.current;
    for (shard, want) in [("e1", 4), ("e2", 5)] {
        let key = (0..200)
            .map(|i| format!("orders/a{i}/x"))
            .find(|k| map.shard_of(k) == shard)
            .unwrap();
        let hold = client
            .acquire(&key, Duration::from_secs(10), || {})
            .await
            .unwrap();
        assert_eq!(hold.token().epoch(), want, "{key} on {shard}");
        hold.release().await.unwrap();
    }
    client.shutdown().await.unwrap();
}

/// The test above, failing with the old rule: lock-admin's advance taking E+1 on its own
/// shard (the debug-only bug `advance-without-coord`) moves e1 to epoch 3, e2's.
#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_old_rule_puts_two_shards_in_one_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let stack = sharded_stack(dir.path()).await;
    let e1 = &stack.shards[0];
    let coord = stack.etcd_access();
    let rec = admin::advance_epoch_with(&e1.access(&e1.client_url), Some(&coord), 2, "old", true)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rec.epoch, 3);
    let now = epochs(&stack).await;
    assert_eq!(now, [1, 3, 3]);
    assert!(!apart(&now), "{now:?}");
}
