//! Classes change without a restart (issue 23, item 3): the arbiters poll their registry
//! folder; a valid new version applies to new requests while the queue and the hold stay
//! (waiters keep their place); an invalid one is refused, reported, and the last good set
//! keeps serving.

use lock_config::Reason;
use lock_config::proto::v1::*;
use lock_integration::reason_of;
use lock_integration::registry::{SLOW_PREFIX, SLOW_TTL, waiter_id};
use lock_integration::{Client, Stack, inspect};
use std::path::Path;
use std::time::{Duration, Instant};

const SLOW_CLASS: &str = "  prefixes: [pay/slow]\n  purpose: correctness\n  tier: entity\n  enforcement: fenced\n  resource: integration-test-fixture\n  schemaVersion: \"0\"\n  ttlSeconds: ";

/// Rewrites the test registry's pay-slow TTL (temp file + rename, as a ConfigMap swaps).
fn set_slow_ttl(dir: &Path, from: u32, to: u32) -> u64 {
    let mut changed = false;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let text = std::fs::read_to_string(&p).unwrap();
        let old = format!("{SLOW_CLASS}{from}\n");
        if text.contains(&old) {
            let tmp = p.with_extension("tmp");
            std::fs::write(&tmp, text.replace(&old, &format!("{SLOW_CLASS}{to}\n"))).unwrap();
            std::fs::rename(&tmp, &p).unwrap();
            changed = true;
        }
    }
    assert!(changed, "no pay-slow class with ttl {from}");
    let sources = lock_store::registry_files::read_sources(dir).unwrap();
    lock_config::registry::sources_version(&sources)
}

/// Each arbiter's `/status`, until `done` holds for all of them (bounded).
fn until_status(stack: &Stack, what: &str, done: impl Fn(&serde_json::Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let all: Vec<serde_json::Value> = stack
            .arbiters
            .iter()
            .map(|a| {
                let body = lock_integration::admin_get(a.admin, "/status").unwrap();
                let json = body.split("\r\n\r\n").last().unwrap_or_default().to_owned();
                serde_json::from_str(&json).unwrap_or_default()
            })
            .collect();
        if all.iter().all(&done) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {all:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

async fn session(c: &mut Client, key: &str) -> OpenSessionResponse {
    c.open_session(OpenSessionRequest { key: key.into() })
        .await
        .unwrap()
        .into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classes_reload_live_and_an_invalid_registry_is_refused() {
    let (stack, reg) = Stack::with_test_registry().await.unwrap();
    let dir = reg.path().join("registry");
    let key = format!("{SLOW_PREFIX}/reload");

    // A holder and two waiters queued behind it, in order.
    let mut holder = stack.workload(&waiter_id(0)).await.unwrap();
    let h = session(&mut holder, &key).await;
    assert_eq!(h.ttl_seconds, SLOW_TTL);
    let g = holder
        .acquire(AcquireRequest {
            key: key.clone(),
            session_id: h.session_id,
            wait_millis: 0,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut waiting = Vec::new();
    for w in 1..=2 {
        let mut c = stack.workload(&waiter_id(w)).await.unwrap();
        let s = session(&mut c, &key).await;
        let k = key.clone();
        waiting.push(tokio::spawn(async move {
            let r = c
                .acquire(AcquireRequest {
                    key: k,
                    session_id: s.session_id,
                    wait_millis: 60_000,
                    ..Default::default()
                })
                .await;
            (
                w,
                Instant::now(),
                r.map(|g| (g.into_inner(), s.session_id)),
                c,
            )
        }));
        let deadline = Instant::now() + Duration::from_secs(10);
        while inspect(&mut holder, &key).await.unwrap().waiters < w as u32 {
            assert!(Instant::now() < deadline, "waiter {w} never queued");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    // Reload: pay-slow's TTL 30 -> 45, seen by every arbiter.
    let new_ttl = SLOW_TTL + 15;
    let version = lock_config::ecds::version_text(set_slow_ttl(&dir, SLOW_TTL, new_ttl));
    until_status(&stack, "reloaded", |s| s["registry_version"] == version);

    // New sessions get the new TTL; the old session keeps its hold, and a new Acquire on it
    // is told the class's TTL changed.
    let mut fresh = stack.workload(&waiter_id(3)).await.unwrap();
    assert_eq!(session(&mut fresh, &key).await.ttl_seconds, new_ttl);
    let e = holder
        .acquire(AcquireRequest {
            key: format!("{SLOW_PREFIX}/other"),
            session_id: h.session_id,
            wait_millis: 0,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        reason_of(&e).map(|r| r.0),
        Some(Reason::WrongSessionTtl),
        "{e:?}"
    );
    let seen = inspect(&mut holder, &key).await.unwrap();
    assert!(seen.held);
    assert_eq!(seen.waiters, 2, "the queue survived the reload");

    // The waiters kept their place: the holder's release goes to the first, the first's to
    // the second.
    holder
        .release(ReleaseRequest {
            key: key.clone(),
            token: g.token,
            session_id: h.session_id,
            ..Default::default()
        })
        .await
        .unwrap();
    let first = waiting.remove(0).await.unwrap();
    let (w, at1, granted, mut c1) = first;
    assert_eq!(w, 1);
    let (g1, s1) = granted.expect("the first waiter is granted");
    assert!(g1.token > g.token);
    c1.release(ReleaseRequest {
        key: key.clone(),
        token: g1.token,
        session_id: s1,
        ..Default::default()
    })
    .await
    .unwrap();
    let (w, at2, granted, _) = waiting.remove(0).await.unwrap();
    assert_eq!(w, 2);
    let (g2, _) = granted.expect("the second waiter is granted");
    assert!(g2.token > g1.token && at2 >= at1);

    // An invalid registry (a TTL below the range): refused and reported; the last good
    // set keeps serving.
    let bad = lock_config::ecds::version_text(set_slow_ttl(&dir, new_ttl, 1));
    until_status(&stack, "refused", |s| {
        s["registry_refused_version"] == bad && s["registry_version"] == version
    });
    assert_eq!(session(&mut fresh, &key).await.ttl_seconds, new_ttl);
    for a in &stack.arbiters {
        let text = a.metrics().unwrap();
        assert!(
            text.contains("lock_arbiter_registry_reloads_refused_total 1"),
            "{text}"
        );
        let log = a.proc.log_text();
        assert!(log.contains("registry reload refused"), "{log}");
    }

    // Fixed: served again, the refusal cleared.
    let good = lock_config::ecds::version_text(set_slow_ttl(&dir, 1, SLOW_TTL));
    until_status(&stack, "fixed", |s| {
        s["registry_version"] == good && s["registry_refused_version"].is_null()
    });
    assert_eq!(session(&mut fresh, &key).await.ttl_seconds, SLOW_TTL);
}
