//! The release gate, short version (issue 7): every fault kind once under load with zero
//! violations, and each deliberately injected arbiter bug caught. `make gate` runs the
//! long version.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use lock_gate::{GateOptions, GateReport, faults};
use std::time::Duration;

/// One gate at a time: each brings up three etcd members, two arbiters and Envoy.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn run(opts: GateOptions) -> GateReport {
    let _turn = ONE_AT_A_TIME.lock().await;
    let report = lock_gate::run(&opts).await.expect("the gate could not run");
    println!("{}", report.summary());
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_kind_with_zero_violations() {
    let report = run(GateOptions {
        duration: Duration::from_secs(55),
        // Every kind at least once, however long that takes (a slow machine extends the
        // run instead of skipping a fault).
        min_faults: faults::ALL.len(),
        ..GateOptions::default()
    })
    .await;
    for kind in faults::ALL {
        assert!(
            report.faults.iter().any(|f| f.fault == kind),
            "{} was not injected",
            kind.name()
        );
    }
    assert!(report.grants >= 300, "too little load to mean anything");
    assert!(
        report.passed(),
        "violations under faults; history kept in {}",
        report.dir.display()
    );
}

/// The bugs exist only in debug builds (`arbiter --inject-bug`).
#[cfg(debug_assertions)]
fn with_bug(bug: &str, seconds: u64, faults: Vec<faults::Fault>) -> GateOptions {
    GateOptions {
        duration: Duration::from_secs(seconds),
        faults,
        inject_bugs: vec![bug.into()],
        postgres: false,
        ..GateOptions::default()
    }
}

fn found(report: &GateReport, check: &str) -> bool {
    report.violations.iter().any(|v| v.check == check)
}

#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catches_a_grant_made_on_a_watch_event() {
    let report = run(with_bug("grant-on-watch-event", 15, vec![])).await;
    assert!(!report.passed());
    // The grant created no holder record, and a second holder got the key meanwhile.
    assert!(found(&report, "backed"), "no unbacked grant reported");
    assert!(found(&report, "exclusion") || !report.not_linearizable.is_empty());
}

#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catches_a_release_without_the_token_compare() {
    let report = run(with_bug("release-without-token-compare", 15, vec![])).await;
    assert!(!report.passed());
    // A replayed release deleted the session's newer grant; another client then held the
    // key while the first still did.
    assert!(found(&report, "exclusion") || !report.not_linearizable.is_empty());
    assert!(
        !found(&report, "backed"),
        "every grant was still a transaction"
    );
}

#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catches_a_grant_without_the_epoch_compare() {
    let advances = vec![faults::Fault::EpochAdvance];
    let report = run(with_bug("grant-without-epoch-compare", 25, advances)).await;
    assert!(!report.passed());
    // After an advance an arbiter with the old epoch cached minted old-epoch tokens: smaller
    // than tokens already granted for the same key.
    assert!(found(&report, "token-order") || !report.not_linearizable.is_empty());
}
