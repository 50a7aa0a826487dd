//! A compaction past the revision queued waiters' watches started at (issue 52): etcd
//! compacts its history (an operator, or `--auto-compaction-retention`) while waiters are
//! queued; each waiter, durable (`fairness: durable`, its queue entry in etcd) and memory,
//! is still granted when the holder releases: no hang, no error.

use lock_config::proto::v1::*;
use lock_integration::registry::{FAIR_PREFIX, FAST_PREFIX, waiter_id};
use lock_integration::{Client, Stack, acquire, until_waiters};
use std::time::Duration;

async fn session(stack: &Stack, i: usize, key: &str) -> (Client, i64) {
    let mut c = stack.workload(&waiter_id(i)).await.unwrap();
    let s = c
        .open_session(OpenSessionRequest { key: key.into() })
        .await
        .unwrap()
        .into_inner()
        .session_id;
    (c, s)
}

/// Keeps a session alive in the background (the classes here have a 5 s TTL).
fn keep_alive(c: Client, session_id: i64) -> tokio::task::JoinHandle<()> {
    lock_integration::keep_alive(c, session_id, Duration::from_millis(1000))
}

/// The store's current revision.
async fn head(stack: &Stack) -> i64 {
    let mut c = stack.etcd_client().await.unwrap();
    c.get("/sys/epoch", None)
        .await
        .unwrap()
        .header()
        .map_or(0, |h| h.revision())
}

#[tokio::test]
async fn waiters_are_granted_after_a_compaction_past_their_watch_revision() {
    let (stack, _reg) = Stack::with_test_registry().await.unwrap();
    // One key of each fairness, both held by one session.
    let keys = [
        format!("{FAIR_PREFIX}/compacted"),
        format!("{FAST_PREFIX}/compacted"),
    ];
    let (mut holder, hs) = session(&stack, 0, &keys[0]).await;
    let _ka = keep_alive(holder.clone(), hs);
    let mut held = Vec::new();
    for key in &keys {
        held.push(acquire(&mut holder, key, hs, 0).await.unwrap().token);
    }
    let queued_at = head(&stack).await;

    // Two waiters on each key, with a long wait: the first watches the holder record, the
    // second (durable) its predecessor's queue entry; all from revisions before the
    // compaction below.
    let mut waits = Vec::new();
    for (k, key) in keys.iter().enumerate() {
        for n in 1..=2 {
            let i = k * 2 + n;
            let (mut c, s) = session(&stack, i, key).await;
            let ka = keep_alive(c.clone(), s);
            let key = key.clone();
            waits.push(tokio::spawn(async move {
                let answer = acquire(&mut c, &key, s, 60_000).await;
                let token = answer
                    .as_ref()
                    .map(|g| g.token)
                    .map_err(|e| format!("waiter {i} on {key}: {e:?}"))?;
                c.release(ReleaseRequest {
                    key: key.clone(),
                    token,
                    session_id: s,
                    ..Default::default()
                })
                .await
                .map_err(|e| format!("waiter {i} releasing {key}: {e:?}"))?;
                ka.abort();
                Ok::<_, String>((i, token))
            }));
            until_waiters(&holder, &keys[k], n as u32).await.unwrap();
        }
    }

    // Writes elsewhere move the revision on, then etcd compacts (physically) past every
    // revision the waiters read or watch from.
    let mut etcd = stack.etcd_client().await.unwrap();
    for n in 0..5 {
        etcd.put(format!("/test/compaction/{n}"), "x", None)
            .await
            .unwrap();
    }
    let compact_to = head(&stack).await;
    assert!(compact_to > queued_at, "{compact_to} <= {queued_at}");
    etcd.compact(
        compact_to,
        Some(etcd_client::CompactionOptions::new().with_physical()),
    )
    .await
    .unwrap();
    // The history before is gone: a read there is refused as compacted.
    let old = etcd
        .get(
            keys[0].as_str(),
            Some(etcd_client::GetOptions::new().with_revision(queued_at)),
        )
        .await
        .unwrap_err();
    assert!(old.to_string().contains("compacted"), "{old}");

    // Still queued after the compaction, then released: each is granted in turn.
    until_waiters(&holder, &keys[0], 2).await.unwrap();
    until_waiters(&holder, &keys[1], 2).await.unwrap();
    for (key, token) in keys.iter().zip(&held) {
        holder
            .release(ReleaseRequest {
                key: key.clone(),
                token: *token,
                session_id: hs,
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let mut granted = Vec::new();
    for w in waits {
        let done = tokio::time::timeout(Duration::from_secs(30), w)
            .await
            .expect("a waiter hung after the compaction")
            .unwrap();
        granted.push(done.unwrap());
    }
    // Each key handed on in arrival order: each token above the one before it on that key.
    for (k, token) in held.iter().enumerate() {
        let (first, second) = (granted[k * 2], granted[k * 2 + 1]);
        assert!(
            *token < first.1 && first.1 < second.1,
            "{}: tokens {token} {} {}",
            keys[k],
            first.1,
            second.1
        );
    }
}
