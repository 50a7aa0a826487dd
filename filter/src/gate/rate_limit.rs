//! The identity's rate budget: a token bucket per identity (and one more for its
//! ValidateToken calls, ADR-16) in Envoy's shared data, so every worker thread draws from
//! the same one; a token is taken by compare-and-swap.

use crate::error::EdgeError;
use crate::host::{Host, SharedDataError};
use crate::rate::{Bucket, Verdict};

/// Compare-and-swap attempts on one identity's bucket before failing closed.
const MAX_CAS_ATTEMPTS: usize = 8;
/// Shared-data key prefix of the per-identity buckets.
pub const RATE_KEY_PREFIX: &str = "lock-rl/";
/// Shared-data key prefix of the per-identity ValidateToken buckets.
pub const VALIDATE_RATE_KEY_PREFIX: &str = "lock-rl-validate/";

/// Takes one token from the identity's bucket, shared by all worker threads.
pub(super) fn rate_limit(
    host: &mut impl Host,
    bucket: &str,
    identity: &str,
    budget: lock_config::registry::RateBudget,
) -> Result<(), EdgeError> {
    let key = format!("{bucket}{identity}");
    for _ in 0..MAX_CAS_ATTEMPTS {
        let now = host.now_ns();
        let (data, cas) = host.shared_data(&key);
        let bucket = data
            .as_deref()
            .and_then(Bucket::decode)
            .unwrap_or_else(|| Bucket::full(budget, now));
        let (verdict, next) = bucket.take(budget, now);
        match host.set_shared_data(&key, &next.encode(), cas) {
            Ok(()) => {
                return match verdict {
                    Verdict::Allow => Ok(()),
                    Verdict::Limited { retry_after_ms } => {
                        Err(EdgeError::RateLimited { retry_after_ms })
                    }
                };
            }
            Err(SharedDataError::CasMismatch) => continue,
            Err(SharedDataError::Other) => break,
        }
    }
    // Contention or a host error: fail closed, and say when to come back.
    Err(EdgeError::RateLimited {
        retry_after_ms: 100,
    })
}
