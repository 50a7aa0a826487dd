//! Issue 20, Workload API mode: lock-client and lockctl take their X.509-SVID and bundle
//! from the SPIFFE Workload API (the dev CA's `devca workload-api`, the protocol a SPIRE
//! agent serves), and a rotation pushed over its stream is picked up by the next call
//! without a failed one.

use lock_client::{Config, Credentials, LockClient, workload_api_source};
use lock_config::proto::v1::InspectRequest;
use lock_integration::pki::{LEDGER, OPERATOR};
use lock_integration::stack::lockctl;
use lock_integration::workload_api::WorkloadApi;
use lock_integration::{Stack, StackOptions};
use std::time::{Duration, Instant};

/// TLS handshakes Envoy's lock.v1 listener completed.
fn handshakes(stack: &Stack) -> u64 {
    stack
        .envoy
        .stats_matching(r"^listener\.127\.0\.0\.1_[0-9]+\.ssl\.handshake$")
        .unwrap()
        .into_iter()
        .map(|(_, n)| n)
        .sum()
}

#[tokio::test]
async fn a_workload_api_client_keeps_working_through_rotations() {
    let stack = Stack::start(StackOptions::default()).await.unwrap();
    // SVIDs valid 4 s, rotated every 2 s: after 9 s the first one has expired, so calls
    // that still succeed on new connections present rotated SVIDs.
    let api = WorkloadApi::start(
        &stack.pki,
        &stack.dir.join("agent"),
        LEDGER,
        Duration::from_secs(4),
    )
    .unwrap();
    let source = workload_api_source(&api.endpoint()).await.unwrap();
    let first = source.updated().last();
    let client = LockClient::new(Config {
        endpoint: stack.endpoint(),
        credentials: Credentials::WorkloadApi {
            source: source.clone(),
            server_name: "localhost".into(),
        },
        instance: None,
    })
    .unwrap();

    let held = client
        .acquire("pay/ledger/wl-held", Duration::from_secs(5), || {})
        .await
        .unwrap();
    let mut operator = stack.workload(OPERATOR).await.unwrap();
    let seen = operator
        .inspect(InspectRequest {
            key: "pay/ledger/wl-held".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(seen.holder_spiffe_id, LEDGER);

    let handshakes_before = handshakes(&stack);
    let start = Instant::now();
    let mut calls = 0;
    while start.elapsed() < Duration::from_secs(9) && calls < 200 {
        let key = format!("pay/ledger/wl-{calls}");
        let hold = client
            .acquire(&key, Duration::from_secs(2), || {})
            .await
            .unwrap_or_else(|e| panic!("call {calls} at {:?}: {e}", start.elapsed()));
        hold.release().await.unwrap();
        calls += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let rotations = source.updated().last() - first;
    eprintln!(
        "workload api: {calls} acquire/release pairs over {:?}, {rotations} rotations, every call granted",
        start.elapsed()
    );
    assert!(rotations >= 3, "{rotations} rotations pushed in 9 s");
    assert!(
        handshakes(&stack) >= handshakes_before + 3,
        "each rotation made a new connection with the new SVID"
    );
    assert!(held.can_start(), "the hold lived through the rotations");
    held.release().await.unwrap();
    client.shutdown().await.unwrap();
}

#[tokio::test]
async fn lockctl_takes_its_svid_from_spiffe_endpoint_socket() {
    let stack = Stack::start(StackOptions::default()).await.unwrap();
    let api = WorkloadApi::start(
        &stack.pki,
        &stack.dir.join("agent"),
        LEDGER,
        Duration::from_secs(3600),
    )
    .unwrap();
    let endpoint = stack.endpoint();
    let socket = api.endpoint();
    let env = [
        ("LOCK_ENDPOINT", endpoint.as_str()),
        ("SPIFFE_ENDPOINT_SOCKET", socket.as_str()),
    ];
    let out = lockctl(&["acquire", "pay/ledger/wl-cli"], &env).unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The identity is the Workload API's: the ledger may not take orders/.
    let out = lockctl(&["acquire", "orders/wl-cli"], &env).unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("NOT_GRANTED"));
}
