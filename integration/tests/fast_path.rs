//! Issue 19: the edge's fast path through real Envoy. A client that sends the key as
//! `lock-key` metadata is decided on its headers; the arbiter is then the check that the
//! body's key is the one the edge admitted, and refuses any other before etcd sees it.

use lock_client::stub::keyed;
use lock_config::Reason;
use lock_config::proto::v1::*;
use lock_integration::registry::{FAST_PREFIX, waiter_id};
use lock_integration::{Stack, StackOptions, as_from_edge, reason_of};
use tonic::Status;

/// The statuses of the five keyed calls, each with `body_key` in its body and its headers
/// from `req` (a route: the fast path with another metadata key, or straight to the
/// arbiter with another `x-lock-key`).
macro_rules! keyed_calls {
    ($client:expr, $body_key:expr, $session:expr, $token:expr, $req:expr) => {{
        let k = $body_key.to_owned();
        let mut out: Vec<Result<(), Status>> = Vec::new();
        out.push(
            $client
                .open_session($req(OpenSessionRequest { key: k.clone() }))
                .await
                .map(drop),
        );
        out.push(
            $client
                .acquire($req(AcquireRequest {
                    key: k.clone(),
                    session_id: $session,
                    wait_millis: 0,
                    ..Default::default()
                }))
                .await
                .map(drop),
        );
        out.push(
            $client
                .release($req(ReleaseRequest {
                    key: k.clone(),
                    token: $token,
                    session_id: $session,
                    ..Default::default()
                }))
                .await
                .map(drop),
        );
        out.push(
            $client
                .validate_token($req(ValidateTokenRequest {
                    key: k.clone(),
                    token: $token,
                }))
                .await
                .map(drop),
        );
        out.push(
            $client
                .inspect($req(InspectRequest { key: k.clone() }))
                .await
                .map(drop),
        );
        out
    }};
}

#[tokio::test]
async fn a_granted_metadata_key_cannot_carry_another_body_key_to_etcd() {
    // The arbiters' health reads (a Range every 500 ms) would land among the etcd calls
    // this test counts: here they read once at start and not again.
    let reg = tempfile::tempdir().unwrap();
    let stack = Stack::start(StackOptions {
        registry: lock_integration::registry::write_test_registry(reg.path()).unwrap(),
        arbiter_args: vec!["--health-every-ms".into(), "600000".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let me = waiter_id(0);
    let mut c = stack.workload(&me).await.unwrap();
    let granted = format!("{FAST_PREFIX}/fast-path");
    let session = c
        .open_session(keyed(
            OpenSessionRequest {
                key: granted.clone(),
            },
            &granted,
        ))
        .await
        .unwrap()
        .into_inner()
        .session_id;
    let token = c
        .acquire(keyed(
            AcquireRequest {
                key: granted.clone(),
                session_id: session,
                wait_millis: 0,
                ..Default::default()
            },
            &granted,
        ))
        .await
        .unwrap()
        .into_inner()
        .token;

    // The refusal an arbiter gives a body key other than its `x-lock-key`, straight.
    let mut direct = stack.arbiter_direct(0).await.unwrap();
    let direct_refusal = direct
        .inspect(as_from_edge(
            InspectRequest {
                key: "nope/x".into(),
            },
            Some(&granted),
            Some(&me),
        ))
        .await
        .unwrap_err();
    assert_eq!(
        reason_of(&direct_refusal).unwrap().0,
        Reason::MalformedRequest
    );

    let writes = |s: &Stack| {
        ["Txn", "Range", "LeaseGrant", "DeleteRange"].map(|m| s.etcd.rpc_count(m).unwrap())
    };
    let before = writes(&stack);
    // Not granted at all, and granted but another key (a grant does not let one key's
    // admission stand for another's).
    for body_key in ["nope/x".to_owned(), format!("{FAST_PREFIX}/another")] {
        let statuses = keyed_calls!(c, &body_key, session, token, |m| keyed(m, &granted));
        for (i, s) in statuses.into_iter().enumerate() {
            let status = s.expect_err("a body key other than the admitted one must be refused");
            assert_eq!(
                (status.code(), status.message()),
                (direct_refusal.code(), direct_refusal.message()),
                "call {i} with body key {body_key}: the arbiter's mismatch refusal"
            );
        }
    }
    assert_eq!(writes(&stack), before, "etcd saw none of them");
}

/// The other order: an ungranted metadata key with a granted body key is refused at the
/// edge, and the refusal is byte-identical (code, message, details) to the body path's
/// for the same ungranted key.
#[tokio::test]
async fn an_ungranted_metadata_key_is_refused_as_on_the_body_path() {
    let (stack, _reg) = Stack::with_test_registry().await.unwrap();
    let mut c = stack.workload(&waiter_id(0)).await.unwrap();
    let granted = format!("{FAST_PREFIX}/fast-path");
    let upstream = |s: &Stack| s.envoy.stat("cluster.arbiters.upstream_rq_total").unwrap();
    let before = upstream(&stack);
    for ungranted in ["nope/x", "pay/ledger/1", "archive/somewhere"] {
        let body_path = c
            .inspect(InspectRequest {
                key: ungranted.into(),
            })
            .await
            .unwrap_err();
        let fast = c
            .inspect(keyed(
                InspectRequest {
                    key: granted.clone(),
                },
                ungranted,
            ))
            .await
            .unwrap_err();
        assert_eq!(
            reason_of(&fast).unwrap().0,
            Reason::NotGranted,
            "{ungranted}"
        );
        assert_eq!(
            (fast.code(), fast.message(), fast.details()),
            (body_path.code(), body_path.message(), body_path.details()),
            "{ungranted}: the same refusal on both paths"
        );
    }
    assert_eq!(
        upstream(&stack),
        before,
        "refused at the edge: nothing forwarded"
    );
}
