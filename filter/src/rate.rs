//! Per-identity token buckets (ADR-19, issue 4), refilled lazily from the host clock.
//!
//! The state lives in proxy-wasm shared data so every Envoy worker thread draws from one
//! bucket per identity; updates are compare-and-swap with bounded retries and fail closed.
//! Keys are `lock-rl/<spiffe id>` and exist only for identities that hold a grant, so their
//! number is bounded by the configuration. This module is the pure part: encoding and
//! arithmetic with an explicit clock.

use lock_config::registry::RateBudget;

/// Fixed point: tokens are counted in thousandths so refills of a fraction accumulate.
const MILLI: u64 = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    pub millitokens: u64,
    /// Host clock (ns) of the last refill; never moves backwards.
    pub refilled_ns: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Refused; the next token is expected after this many milliseconds.
    Limited {
        retry_after_ms: u64,
    },
}

impl Bucket {
    pub fn full(budget: RateBudget, now_ns: u64) -> Self {
        Self {
            millitokens: u64::from(budget.burst) * MILLI,
            refilled_ns: now_ns,
        }
    }

    pub fn encode(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.millitokens.to_le_bytes());
        b[8..].copy_from_slice(&self.refilled_ns.to_le_bytes());
        b
    }

    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let m = bytes.get(..8)?.try_into().ok()?;
        let t = bytes.get(8..16)?.try_into().ok()?;
        Some(Self {
            millitokens: u64::from_le_bytes(m),
            refilled_ns: u64::from_le_bytes(t),
        })
    }

    /// Refills for the time since the last refill and takes one token if there is one.
    /// A clock that steps backwards refills nothing and does not move `refilled_ns` back.
    pub fn take(self, budget: RateBudget, now_ns: u64) -> (Verdict, Bucket) {
        let cap = u64::from(budget.burst) * MILLI;
        let rate = u64::from(budget.per_second);
        let elapsed_ns = now_ns.saturating_sub(self.refilled_ns);
        // millitokens gained = elapsed_s * rate * 1000 = elapsed_ns * rate / 1e6
        let gained = u64::try_from(u128::from(elapsed_ns) * u128::from(rate) / 1_000_000)
            .unwrap_or(u64::MAX);
        let millitokens = self.millitokens.saturating_add(gained).min(cap);
        let refilled_ns = self.refilled_ns.max(now_ns);
        if millitokens >= MILLI {
            let next = Bucket {
                millitokens: millitokens - MILLI,
                refilled_ns,
            };
            return (Verdict::Allow, next);
        }
        let missing = MILLI - millitokens;
        // ms until `missing` millitokens accrue at `rate` tokens/s, rounded up.
        let retry_after_ms = if rate == 0 {
            u64::MAX
        } else {
            missing.div_ceil(rate)
        };
        (
            Verdict::Limited { retry_after_ms },
            Bucket {
                millitokens,
                refilled_ns,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const B: RateBudget = RateBudget {
        per_second: 10,
        burst: 3,
    };
    const S: u64 = 1_000_000_000;

    #[test]
    fn burst_then_limited_then_refilled() {
        let mut b = Bucket::full(B, 0);
        for _ in 0..3 {
            let (v, n) = b.take(B, 0);
            assert_eq!(v, Verdict::Allow);
            b = n;
        }
        let (v, b2) = b.take(B, 0);
        assert_eq!(
            v,
            Verdict::Limited {
                retry_after_ms: 100
            }
        );
        // 100 ms later one token has accrued.
        let (v, _) = b2.take(B, S / 10);
        assert_eq!(v, Verdict::Allow);
    }

    #[test]
    fn clock_stepping_back_refills_nothing() {
        let b = Bucket {
            millitokens: 0,
            refilled_ns: 10 * S,
        };
        let (v, n) = b.take(B, 5 * S);
        assert!(matches!(v, Verdict::Limited { .. }));
        assert_eq!(n.refilled_ns, 10 * S);
    }

    #[test]
    fn encoding_round_trips() {
        let b = Bucket {
            millitokens: 1234,
            refilled_ns: 987_654_321,
        };
        assert_eq!(Bucket::decode(&b.encode()), Some(b));
        assert_eq!(Bucket::decode(&[1, 2, 3]), None);
    }

    proptest! {
        // Over any schedule, allowed requests never exceed burst + rate * elapsed.
        #[test]
        fn never_more_than_the_budget(steps in proptest::collection::vec(0u64..200_000_000, 1..200)) {
            let mut b = Bucket::full(B, 0);
            let (mut now, mut allowed) = (0u64, 0u64);
            for dt in steps {
                now += dt;
                let (v, n) = b.take(B, now);
                b = n;
                if v == Verdict::Allow { allowed += 1; }
            }
            let bound = u64::from(B.burst) + now * u64::from(B.per_second) / S;
            prop_assert!(allowed <= bound, "{allowed} > {bound}");
        }
    }
}
