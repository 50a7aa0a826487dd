//! The authoriser's cost with many grants, measured by one function both natively (the
//! `bench` binary) and inside a wasm engine (`authoriser_cost.wasm`, built with the filter
//! and run by `make bench` under V8), so the two figures are comparable.

use lock_config::filter_config::{FilterConfig, FilterConfigError, FilterGrant};
use lock_config::{KeyError, LockKey};
use std::time::{Duration, Instant};

/// What one run measured.
#[derive(Debug, Clone)]
pub struct AuthoriserCost {
    pub grants: usize,
    /// Building the lookup structures from the configuration (what a grants push costs).
    pub compile: Duration,
    pub lookups: usize,
    /// Mean time of one `authorise` call, half of them granted and half refused.
    pub per_lookup_ns: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum CostError {
    #[error("the benchmark configuration is refused: {0}")]
    Config(#[from] FilterConfigError),
    #[error("a benchmark key is refused: {0}")]
    Key(#[from] KeyError),
    #[error("lookup results are wrong: {granted} of {lookups} granted, expected half")]
    WrongResults { granted: usize, lookups: usize },
}

/// `grants` identities with one prefix each (`pay/p{i % 1000}/x{i}`); `lookups` calls over
/// 1,000 probes spread across them, even probes inside the identity's prefix, odd outside.
pub fn measure(grants: usize, lookups: usize) -> Result<AuthoriserCost, CostError> {
    let n = grants.max(1);
    let identity = |i: usize| format!("spiffe://dev.lock.local/ns/pay/sa/svc-{i}");
    let config = FilterConfig {
        region: "local".into(),
        trust_domains: vec!["dev.lock.local".into()],
        namespaces: [("pay".to_owned(), "local".to_owned())].into(),
        grants: (0..n)
            .map(|i| FilterGrant {
                spiffe_id: identity(i),
                prefixes: vec![format!("pay/p{}/x{i}", i % 1000)],
                rate: None,
                validate_rate: None,
            })
            .collect(),
        default_rate: None,
        unsafe_test_switches: Vec::new(),
    };
    let t = Instant::now();
    let compiled = config.compile()?;
    let compile = t.elapsed();
    let probes: Vec<(String, LockKey)> = (0..1000)
        .map(|j| {
            let i = (j * 7919) % n;
            let key = if j % 2 == 0 {
                format!("pay/p{}/x{i}/42", i % 1000)
            } else {
                format!("pay/p{}/y{i}", i % 1000)
            };
            LockKey::parse(&key).map(|k| (identity(i), k))
        })
        .collect::<Result<_, _>>()?;
    let t = Instant::now();
    let mut granted = 0usize;
    for (id, key) in probes.iter().cycle().take(lookups) {
        granted += usize::from(
            compiled
                .authoriser
                .authorise(std::hint::black_box(id), key)
                .is_some(),
        );
    }
    let elapsed = t.elapsed();
    if granted != lookups.div_ceil(2) {
        return Err(CostError::WrongResults { granted, lookups });
    }
    Ok(AuthoriserCost {
        grants: n,
        compile,
        lookups,
        per_lookup_ns: elapsed.as_nanos() as f64 / lookups.max(1) as f64,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn half_the_probes_are_granted() {
        let c = measure(2_000, 10_001).unwrap();
        assert_eq!(c.grants, 2_000);
        assert_eq!(c.lookups, 10_001);
        assert!(c.per_lookup_ns > 0.0);
    }
}
