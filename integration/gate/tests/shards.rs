//! The gate across shards (`lock_gate::shards`), short: a coord cluster and two entity
//! shards, two arbiters, six workers, two shard moves under load (add e3, then pin the
//! namespace to it). Zero violations; and with one arbiter granting without the shard
//! fence (`--inject-bug shard-fence-off`), caught.

use lock_gate::shards::{ShardGateOptions, run, summary};
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_shard_gate_catches_a_grant_without_the_fence() {
    let r = run(ShardGateOptions {
        phase: Duration::from_secs(3),
        inject_bug: true,
        ..Default::default()
    })
    .await
    .unwrap();
    println!("{}", summary(&r, &r.history));
    assert!(!r.violations.is_empty(), "the injected bug went unseen");
}
