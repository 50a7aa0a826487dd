//! `lockctl etcd defrag` (issue 38, item 7; ADR-05/10) on a real 3-member cluster with TLS
//! and auth on: it refuses while a member is down and touches nothing; with every member
//! up it defragments each one, followers first and the leader last, under a light write
//! load that sees no failed call, and every member's database file shrinks.

use etcd_client::{CompactionOptions, DeleteOptions, PutOptions, Txn, TxnOp};
use lock_integration::etcd::Etcd;
use lock_integration::stack::lockctl_etcd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

async fn db_size(m: &Etcd) -> i64 {
    m.client_as("root")
        .await
        .unwrap()
        .status()
        .await
        .unwrap()
        .db_size()
}

/// Waits (bounded) until every member answers and follows one leader; returns the leader's
/// member name.
async fn settled(members: &[Etcd]) -> String {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let mut seen = Vec::new();
        for m in members {
            if let Ok((id, leader)) = m.status().await {
                seen.push((m.name.clone(), id, leader));
            }
        }
        let leader = seen.first().map(|s| s.2).unwrap_or(0);
        if seen.len() == members.len()
            && leader != 0
            && seen.iter().all(|s| s.2 == leader)
            && let Some(s) = seen.iter().find(|s| s.1 == leader)
        {
            return s.0.clone();
        }
        assert!(
            Instant::now() < until,
            "the cluster did not settle: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defrag_goes_member_by_member_leader_last_and_refuses_while_one_is_down() {
    let dir = tempfile::tempdir().unwrap();
    let mut members = Etcd::start_cluster(dir.path(), "df", 3).unwrap();
    settled(&members).await;
    let urls: Vec<String> = members.iter().map(|m| m.client_url.clone()).collect();
    let urls = urls.join(",");

    // Free pages to give back: 4,000 values of 4 KiB written, deleted and compacted.
    let mut root = members[0].client().await.unwrap();
    let value = vec![b'x'; 4096];
    for batch in 0..40 {
        let puts: Vec<TxnOp> = (0..100)
            .map(|i| TxnOp::put(format!("/bloat/{batch}/{i}"), value.clone(), None))
            .collect();
        root.txn(Txn::new().and_then(puts)).await.unwrap();
    }
    let deleted = root
        .delete("/bloat/", Some(DeleteOptions::new().with_prefix()))
        .await
        .unwrap();
    let rev = deleted.header().unwrap().revision();
    root.compact(rev, Some(CompactionOptions::new().with_physical()))
        .await
        .unwrap();
    let mut before = Vec::new();
    for m in &members {
        before.push(db_size(m).await);
    }
    assert!(before.iter().all(|b| *b > 16 << 20), "{before:?}");

    // One member down: refused, naming it, and no member touched.
    members[2].kill();
    let down = lockctl_etcd(
        &["etcd", "defrag", "--etcd", &urls],
        &members[0].pki,
        "root",
    )
    .unwrap();
    let said = String::from_utf8_lossy(&down.stderr).to_string();
    assert_eq!(down.status.code(), Some(1), "{said}");
    assert!(
        said.contains("df2") && said.contains("not healthy"),
        "{said}"
    );
    for (m, b) in members[..2].iter().zip(&before) {
        assert_eq!(db_size(m).await, *b, "{} was touched", m.name);
    }
    members[2].restart().unwrap();
    let leader = settled(&members).await;

    // A light write load on every member for the whole run (each call bounded).
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let load = {
        let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
        let mut c = members[1].client().await.unwrap();
        tokio::spawn(async move {
            for i in 0..6000u64 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let put = c.put(format!("/l/load/{}", i % 50), "v", Some(PutOptions::new()));
                match tokio::time::timeout(Duration::from_secs(5), put).await {
                    Ok(Ok(_)) => ok.fetch_add(1, Ordering::Relaxed),
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let pki = members[0].pki.clone();
    let run_urls = urls.clone();
    let out = tokio::task::spawn_blocking(move || {
        lockctl_etcd(&["etcd", "defrag", "--etcd", &run_urls], &pki, "root").unwrap()
    })
    .await
    .unwrap();
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{printed}");
    let done: Vec<&str> = printed
        .lines()
        .filter(|l| l.starts_with("defragmented "))
        .collect();
    assert_eq!(done.len(), 3, "{printed}");
    assert!(
        done[2].starts_with(&format!("defragmented {leader} ")),
        "the leader ({leader}) goes last:\n{printed}"
    );
    for (m, b) in members.iter().zip(&before) {
        let after = db_size(m).await;
        assert!(after < b / 2, "{}: {b} -> {after}", m.name);
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    eprintln!("load during the defragmentation: {ok} writes, {failed} failed");
    assert!(ok > 0);
    assert_eq!(failed, 0);
}
