//! The longest hold per class (ADR-22): the elected tailer reads every holder record a
//! page at a time, all pages at one revision (a consistent picture, however long the
//! scan), and sets `lock_audit_longest_hold_seconds{class}`. A lock held for hours is
//! usually a leak (a holder alive and renewing but never releasing): the alert
//! `LockHeldLong` takes it to the class's owners, who may then ask for a force release.
//!
//! Ages are by the wall clock (the record's `acquired_at_ms` against this process's
//! clock): good to the minute, which is all a six-hour alert needs; a clock step skews
//! one scan, never a decision (nothing here grants or refuses anything).

use crate::metrics::{ClassLabel, METRICS};
use etcd_client::{Client, GetOptions};
use lock_store::layout::{HOLDER_PREFIX, Holder, decode};
use std::collections::BTreeMap;
use std::time::Duration;

/// Holder records read per request.
pub const PAGE: i64 = 500;

/// The age in seconds of the oldest hold of each class (pure): `holds` are (class,
/// acquired at, ms since the epoch); a hold stamped in the future counts as 0 s old.
pub fn longest_per_class(holds: &[(String, u64)], now_ms: u64) -> BTreeMap<String, f64> {
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    for (class, at) in holds {
        let age = now_ms.saturating_sub(*at) as f64 / 1000.0;
        let e = out.entry(class.clone()).or_insert(0.0);
        if age > *e {
            *e = age;
        }
    }
    out
}

/// Every hold's (class, acquired at), read in pages at the first page's revision.
pub async fn scan(client: &mut Client) -> Result<Vec<(String, u64)>, etcd_client::Error> {
    let end = lock_store::etcd_roles::prefix_range_end(HOLDER_PREFIX.as_bytes());
    let mut from = HOLDER_PREFIX.as_bytes().to_vec();
    let mut revision = 0;
    let mut holds = Vec::new();
    loop {
        let mut opts = GetOptions::new().with_range(end.clone()).with_limit(PAGE);
        if revision > 0 {
            opts = opts.with_revision(revision);
        }
        let resp = client.get(from.clone(), Some(opts)).await?;
        if revision == 0 {
            revision = resp.header().map_or(0, |h| h.revision());
        }
        for kv in resp.kvs() {
            // An undecodable record is still a hold: of no known class.
            let h = decode::<Holder>(kv.value()).unwrap_or_default();
            holds.push((h.class, h.acquired_at_ms));
        }
        match resp.kvs().last() {
            Some(last) if resp.more() => {
                from = last.key().to_vec();
                from.push(0);
            }
            _ => return Ok(holds),
        }
    }
}

/// Sets the gauge from `longest`: classes with no hold now lose their series.
pub fn publish(longest: &BTreeMap<String, f64>) {
    METRICS.longest_hold.clear();
    for (class, age) in longest {
        METRICS
            .longest_hold
            .get_or_create(&ClassLabel {
                class: class.clone(),
            })
            .set(*age);
    }
}

/// Scans every `every` while this tailer leads; returns only on an etcd error.
pub async fn run(mut client: Client, every: Duration) -> etcd_client::Error {
    loop {
        match scan(&mut client).await {
            Ok(holds) => publish(&longest_per_class(&holds, now_ms())),
            Err(e) => return e,
        }
        tokio::time::sleep(every).await;
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (name, holds as (class, acquired at ms), now ms, oldest age per class).
    type Case = (
        &'static str,
        Vec<(String, u64)>,
        u64,
        Vec<(&'static str, f64)>,
    );

    #[test]
    fn the_oldest_hold_of_each_class() {
        let h = |c: &str, at: u64| (c.to_owned(), at);
        let cases: Vec<Case> = vec![
            ("no holds: no series", vec![], 10_000, vec![]),
            (
                "the oldest of two",
                vec![h("ledger", 4_000), h("ledger", 1_000)],
                10_000,
                vec![("ledger", 9.0)],
            ),
            (
                "per class",
                vec![h("ledger", 1_000), h("batch", 8_000)],
                10_000,
                vec![("batch", 2.0), ("ledger", 9.0)],
            ),
            (
                "stamped ahead of this clock: 0 s, not negative",
                vec![h("ledger", 12_000)],
                10_000,
                vec![("ledger", 0.0)],
            ),
        ];
        for (name, holds, now, want) in cases {
            let got = longest_per_class(&holds, now);
            let want: BTreeMap<String, f64> =
                want.into_iter().map(|(c, a)| (c.to_owned(), a)).collect();
            assert_eq!(got, want, "{name}");
        }
    }
}
