//! Tiers and entity shards (issue 24, ADR-07 and ADR-09), on real clusters: a coord etcd
//! cluster and entity shards `e1`, `e2` (single-member each), arbiters with `--shards`,
//! Envoy with the filter.
//!
//! - Tier routing: a `tier: coord` class's holds are on the coord cluster; entity keys are
//!   on exactly the shard the map homes them on; each cluster mints tokens in its own
//!   epoch, allocated from the coord cluster; sessions carry their cluster's tag, and the
//!   client library opens one where the key lives (WRONG_SESSION_PLACE).
//!
//! Moves under load are the gate's (`integration/gate/src/shards.rs`, `gate shards`).

use lock_config::shards::{COORD, ShardsDoc, lease_tag, tag_of};
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
    let rec: lock_arbiter::layout::EpochRecord =
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
