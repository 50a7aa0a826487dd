//! ValidateToken's rate budget through the real Envoy and filter (ADR-16, issue 52): it
//! draws from a bucket of its own, sized by the grant's `validateRate` (or, unset, by the
//! grant's `rate` numbers). An identity that spends its ValidateToken budget is refused
//! RATE_LIMITED with `retry_after_ms` while its Acquire and Inspect budget is untouched,
//! and another identity is unaffected.

use lock_config::Reason;
use lock_config::proto::v1::*;
use lock_integration::reason_of;
use lock_integration::registry::{
    FAST_PREFIX, LIMITED, VALIDATE_BURST, VALIDATE_LIMITED, waiter_id,
};
use lock_integration::{Client, Stack, acquire, inspect};
use std::time::Instant;

async fn validate(c: &mut Client, key: &str) -> Result<ValidateTokenResponse, tonic::Status> {
    let req = ValidateTokenRequest {
        key: key.into(),
        token: 1,
    };
    c.validate_token(lock_client::stub::keyed(req, key))
        .await
        .map(tonic::Response::into_inner)
}

/// ValidateTokens until one is refused: how many passed, and the refusal's retry_after_ms
/// (checked to be RATE_LIMITED). Panics when none is refused in `tries`.
async fn spend_validate(c: &mut Client, key: &str, tries: usize) -> (u64, u64) {
    let mut passed = 0;
    for _ in 0..tries {
        match validate(c, key).await {
            Ok(_) => passed += 1,
            Err(s) => {
                let (r, meta) = reason_of(&s).unwrap();
                assert_eq!(
                    (s.code(), r),
                    (tonic::Code::ResourceExhausted, Reason::RateLimited),
                    "{s:?}"
                );
                let retry: u64 = meta["retry_after_ms"].parse().unwrap();
                assert!((1..=1000).contains(&retry), "retry_after_ms {retry}");
                return (passed, retry);
            }
        }
    }
    panic!("{tries} ValidateTokens passed ({passed}): no budget of its own was enforced");
}

#[tokio::test]
async fn validate_token_spends_its_own_budget_and_no_other() {
    let (stack, _reg) = Stack::with_test_registry().await.unwrap();
    let key = format!("{FAST_PREFIX}/validate-budget");
    let mut small = stack.workload(VALIDATE_LIMITED).await.unwrap();
    let mut other = stack.workload(&waiter_id(0)).await.unwrap();

    // The grant budget in use first (3 of its burst of 20).
    for n in 0..3 {
        inspect(&mut small, &key)
            .await
            .unwrap_or_else(|s| panic!("Inspect {n}: {s:?}"));
    }

    // ValidateToken's budget (burst 2, then 1/s) spent: refused RATE_LIMITED.
    let started = Instant::now();
    let (passed, _) = spend_validate(&mut small, &key, 10).await;
    let elapsed = started.elapsed().as_secs();
    assert!(
        passed >= u64::from(VALIDATE_BURST) && passed <= u64::from(VALIDATE_BURST) + elapsed + 1,
        "{passed} ValidateTokens passed in {elapsed} s with validateRate burst {VALIDATE_BURST}, 1/s"
    );

    // The Acquire/Inspect budget is untouched: Inspect, a session, an Acquire and its
    // Release all pass right after.
    for n in 0..3 {
        inspect(&mut small, &key)
            .await
            .unwrap_or_else(|s| panic!("Inspect {n} after ValidateToken's budget ran out: {s:?}"));
    }
    let session = small
        .open_session(OpenSessionRequest { key: key.clone() })
        .await
        .expect("OpenSession after ValidateToken's budget ran out")
        .into_inner()
        .session_id;
    let grant = acquire(&mut small, &key, session, 0)
        .await
        .expect("Acquire after ValidateToken's budget ran out");
    small
        .release(ReleaseRequest {
            key: key.clone(),
            token: grant.token,
            session_id: session,
            ..Default::default()
        })
        .await
        .expect("Release after ValidateToken's budget ran out");

    // Another identity on the same Envoy is unaffected, ValidateToken and Inspect alike.
    for n in 0..5 {
        validate(&mut other, &key)
            .await
            .unwrap_or_else(|s| panic!("other identity's ValidateToken {n}: {s:?}"));
        inspect(&mut other, &key)
            .await
            .unwrap_or_else(|s| panic!("other identity's Inspect {n}: {s:?}"));
    }
}

/// Without `validateRate`, ValidateToken gets the grant's `rate` numbers (LIMITED: burst
/// 3, 1/s), in a bucket of its own: each budget runs out by itself.
#[tokio::test]
async fn unset_validate_rate_is_the_grant_rate_in_a_bucket_of_its_own() {
    let (stack, _reg) = Stack::with_test_registry().await.unwrap();
    let key = format!("{FAST_PREFIX}/validate-default");
    let mut limited = stack.workload(LIMITED).await.unwrap();

    // The grant budget spent by Inspects.
    let mut inspected = 0;
    loop {
        match inspect(&mut limited, &key).await {
            Ok(_) => inspected += 1,
            Err(s) => {
                assert_eq!(reason_of(&s).unwrap().0, Reason::RateLimited, "{s:?}");
                break;
            }
        }
        assert!(inspected < 10, "the grant budget was never spent");
    }
    // ValidateToken still passes (its own bucket), then runs out after about the grant's
    // burst (3), not unlimited.
    let started = Instant::now();
    let (passed, _) = spend_validate(&mut limited, &key, 10).await;
    let elapsed = started.elapsed().as_secs();
    assert!(
        (3..=3 + elapsed + 1).contains(&passed),
        "{passed} ValidateTokens passed in {elapsed} s with the grant's burst 3, 1/s"
    );
}
