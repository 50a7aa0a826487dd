//! Issue 36: the explorer's read model at 100,000 holds in one namespace. Every page is
//! bounded (at most 500 rows, a bounded number of store calls), the pages together hold
//! every hold exactly once, and the size and time of each page are reported.

use lock_integration::etcd::Etcd;
use lock_store::layout::{Holder, SessionRecord, encode, lease_hex, session_key};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const HELD: usize = 100_000;
const SHARED: usize = 1_000;
const PAGE: usize = lock_explorer::MAX_PAGE;

fn holder(lease: &str, i: usize) -> Vec<u8> {
    encode(&Holder {
        spiffe_id: format!("spiffe://dev.lock.local/ns/scale/sa/w{}", i % 8),
        instance: Some(format!("pod-{}", i % 3)),
        session: lease.to_owned(),
        class: "scale".into(),
        acquired_at_ms: 1_700_000_000_000,
    })
}

/// Puts `pairs` in transactions of 120 (etcd's max-txn-ops is 128), eight at once.
async fn put_all(etcd: &etcd_client::Client, pairs: Vec<(String, Vec<u8>)>) {
    let txns: Vec<etcd_client::Txn> = pairs
        .chunks(120)
        .map(|c| {
            etcd_client::Txn::new().and_then(
                c.iter()
                    .map(|(k, v)| etcd_client::TxnOp::put(k.as_str(), v.clone(), None))
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    let mut txns = txns.into_iter();
    loop {
        let batch: Vec<_> = txns.by_ref().take(8).collect();
        if batch.is_empty() {
            return;
        }
        let mut calls = tokio::task::JoinSet::new();
        for t in batch {
            let mut kv = etcd.kv_client();
            calls.spawn(async move { kv.txn(t).await.map(drop) });
        }
        while let Some(done) = calls.join_next().await {
            done.unwrap().unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_namespace_of_100_000_holds_is_read_a_bounded_page_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(dir.path(), "explorer-scale").unwrap();
    let root = etcd.client_as("root").await.unwrap();
    let lease = root.lease_client().grant(600, None).await.unwrap().id();
    let hex = lease_hex(lease);
    let started = Instant::now();
    let mut pairs = vec![(
        session_key(lease),
        encode(&SessionRecord {
            spiffe_id: "spiffe://dev.lock.local/ns/scale/sa/w0".into(),
            instance: None,
            ttl_seconds: 600,
            closing: false,
        }),
    )];
    pairs.extend((0..HELD).map(|i| (format!("/l/scale/k{i:06}"), holder(&hex, i))));
    pairs.extend((0..SHARED).map(|i| (format!("/r/scale/r{i:04}//s/{hex}"), holder(&hex, i))));
    // The first key's durable queue: its count is read, its entries are not.
    pairs.extend((0..50).map(|i| (format!("/q/scale/k000000//{i:016x}"), b"{}".to_vec())));
    put_all(&root, pairs).await;
    eprintln!(
        "wrote {HELD} holds, {SHARED} shared in {:?}",
        started.elapsed()
    );

    let urls = std::slice::from_ref(&etcd.client_url);
    let tls = lock_store::etcd_tls::load(urls, &etcd.pki.files("operator")).unwrap();
    let store = lock_store::Etcd::connect(urls, Duration::from_secs(10), tls.as_ref())
        .await
        .unwrap();

    let (names, more) = lock_explorer::namespaces(&store, None, 10).await.unwrap();
    assert_eq!((names, more), (vec!["scale".to_owned()], None));
    let counted = lock_explorer::held_count(&store, "scale").await.unwrap();
    assert_eq!(counted, (HELD as u64, SHARED as u64));

    let mut seen = BTreeSet::new();
    let mut after: Option<String> = None;
    let (mut pages, mut most_bytes, mut slowest) = (0, 0, Duration::ZERO);
    let mut total = Duration::ZERO;
    // Bounded: more pages than the holds can fill is a failure, not a hang.
    while pages < (HELD + SHARED) / PAGE + 3 {
        let t = Instant::now();
        let page = lock_explorer::page(&store, "scale", after.as_deref(), PAGE, 1)
            .await
            .unwrap();
        let rows = lock_explorer::rows(&page.seen, &lock_explorer::Rules::default());
        let took = t.elapsed();
        let bytes = serde_json::to_vec(&rows).unwrap().len();
        pages += 1;
        total += took;
        slowest = slowest.max(took);
        most_bytes = most_bytes.max(bytes);
        assert!(rows.len() <= PAGE, "page {pages}: {} rows", rows.len());
        if pages == 1 {
            assert_eq!(rows[0].durable_waiters, 50, "the queue counted");
        }
        for r in &rows {
            assert!(
                seen.insert((r.key.clone(), r.mode)),
                "{} twice (page {pages})",
                r.key
            );
        }
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(seen.len(), HELD + SHARED, "every hold, once");
    assert!(after.is_some());
    // A row is a few hundred bytes: a page stays far below a megabyte however many the
    // namespace holds.
    assert!(most_bytes < 512 * 1024, "{most_bytes} bytes in one page");
    eprintln!(
        "explorer at {} holds: {pages} pages of <= {PAGE}, largest {most_bytes} bytes of \
         rows (JSON), slowest page {slowest:?}, mean {:?}, all pages {total:?}",
        HELD + SHARED,
        total / pages as u32,
    );
}
