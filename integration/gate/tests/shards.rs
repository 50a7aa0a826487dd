//! The gate across shards (`lock_gate::shards`), short: a coord cluster and two entity
//! shards, two arbiters, six workers, two shard moves under load (add e3, then pin the
//! namespace to it), then both shards the keys left advanced through the two-person path.
//! Zero violations; with one arbiter granting without the shard fence (`--inject-bug
//! shard-fence-off`), caught; with lock-admin's advance taking E+1 (`--inject-bug
//! advance-without-coord`, the old rule), caught as two clusters serving one epoch.

use lock_gate::shards::{ShardBug, ShardGateOptions, run, summary};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shard_moves_under_load_with_zero_violations() {
    let r = run(ShardGateOptions {
        phase: Duration::from_secs(3),
        ..Default::default()
    })
    .await
    .unwrap();
    println!("{}", summary(&r, &r.history));
    assert!(r.moves_ok, "{:?}", r.moves);
    assert!(r.violations.is_empty(), "{:#?}", r.violations);
    // The keys moved: grants in three epochs (e1, e2, then e3 after the moves), the
    // newest the largest.
    assert_eq!(r.grants_by_epoch.len(), 3, "{:?}", r.grants_by_epoch);
    assert!(r.grants > 100, "{}", r.grants);
    // e1 and e2 advanced above every epoch so far (e3's 4): from the coord's allocator.
    assert_eq!(r.advances.len(), 2, "{:?}", r.advances);
    assert!(
        r.advances[0].contains("e1: epoch 2 -> 5"),
        "{:?}",
        r.advances
    );
    assert!(
        r.advances[1].contains("e2: epoch 3 -> 6"),
        "{:?}",
        r.advances
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_shard_gate_catches_a_grant_without_the_fence() {
    let r = run(ShardGateOptions {
        phase: Duration::from_secs(3),
        inject_bug: Some(ShardBug::ShardFenceOff),
        ..Default::default()
    })
    .await
    .unwrap();
    println!("{}", summary(&r, &r.history));
    assert!(!r.violations.is_empty(), "the injected bug went unseen");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_shard_gate_catches_two_clusters_in_one_epoch() {
    let r = run(ShardGateOptions {
        phase: Duration::from_secs(3),
        inject_bug: Some(ShardBug::AdvanceWithoutCoord),
        ..Default::default()
    })
    .await
    .unwrap();
    println!("{}", summary(&r, &r.history));
    assert!(r.moves_ok, "{:?}", r.moves);
    // The old rule: e1 2 -> 3 (e2's epoch), e2 3 -> 4 (e3's).
    assert!(
        r.advances[0].contains("e1: epoch 2 -> 3"),
        "{:?}",
        r.advances
    );
    let shared: Vec<&String> = r
        .violations
        .iter()
        .filter(|v| v.contains("no two clusters may serve one epoch"))
        .collect();
    assert_eq!(shared.len(), 2, "{:#?}", r.violations);
    assert!(
        shared[0].starts_with("epoch 3 served by e1 and e2"),
        "{shared:?}"
    );
    assert!(
        shared[1].starts_with("epoch 4 served by e2 and e3"),
        "{shared:?}"
    );
}
