//! Issue 34, item 2: clock faults. The arbiters and `lockctl` run under libfaketime
//! (Debian's, unpacked by the project's scripts) with a wall-clock offset read from a file,
//! so the test steps the wall clock ten minutes forward, then ten back, in the middle of a
//! hold and of a wait, as an NTP step or an operator might; the monotonic clock stays as the
//! kernel keeps it. Every deadline the lock keeps is monotonic, so nothing moves: the hold
//! is renewed across the steps and `lockctl run` reports it covered the whole command (the
//! client's fence deadline is send time + TTL on the monotonic clock), and the waiter waits
//! through them and is granted the key when the holder lets go. The debug-only
//! `wall-clock-deadline` bug (the wait's deadline in wall time) is caught: the forward step
//! ends the wait at once.

use lock_config::proto::v1::{AcquireRequest, OpenSessionRequest};
use lock_integration::Stack;
use lock_integration::paths::workspace_root;
use lock_integration::registry::{FAST_PREFIX, waiter_id};
use lock_integration::stack::StackOptions;
use std::path::Path;
use std::time::{Duration, Instant};

/// libfaketime's environment: the wall clock offset by the file's content (`+0`, `+10m`,
/// `-10m`), re-read on every call; the monotonic clock left alone.
fn faketime(offset: &Path) -> Vec<(String, String)> {
    let lib = walk(&workspace_root().join(".deps/faketime"))
        .into_iter()
        .find(|p| p.ends_with("libfaketimeMT.so.1"))
        .expect("libfaketime: run integration/scripts/install-deps.sh (make test does)");
    vec![
        ("LD_PRELOAD".into(), lib.display().to_string()),
        (
            "FAKETIME_TIMESTAMP_FILE".into(),
            offset.display().to_string(),
        ),
        ("FAKETIME_NO_CACHE".into(), "1".into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
    ]
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

async fn wait_for_file(p: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !p.exists() {
        assert!(Instant::now() < deadline, "{} never appeared", p.display());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A hold of ~8 s (past the class's 5 s TTL) and a waiter behind it, while the wall clock
/// steps +10 min and then -10 min; the waiter another identity, or (`replica`) a second
/// process of the holder's, as replicas of one Deployment are. Returns the holder's exit
/// code and the waiter's answer (its refusal's reason).
async fn steps(bugs: &[&str], replica: bool) -> (Option<i32>, Result<(), String>) {
    let dir = tempfile::tempdir().unwrap();
    let offset = dir.path().join("offset");
    std::fs::write(&offset, "+0\n").unwrap();
    let env = faketime(&offset);
    let mut arbiter_args = Vec::new();
    for b in bugs {
        arbiter_args.extend(["--inject-bug".to_owned(), (*b).to_owned()]);
    }
    let stack = Stack::start(StackOptions {
        registry: lock_integration::registry::write_test_registry(dir.path()).unwrap(),
        arbiter_env: env.clone(),
        arbiter_args,
        ..StackOptions::default()
    })
    .await
    .unwrap();
    let key = format!("{FAST_PREFIX}/clock");
    let a = stack.pki.svid("clock-a", &waiter_id(1)).unwrap();
    let b = stack.pki.svid("clock-b", &waiter_id(2)).unwrap();
    let started = dir.path().join("started");
    let script = format!("touch {}; sleep 8", started.display());
    let mut holder = stack
        .lockctl_cmd(&a, &["run", &key, "--", "sh", "-c", &script])
        .unwrap();
    holder.envs(env.iter().map(|(k, v)| (k, v)));
    let mut holder = holder.spawn().unwrap();
    wait_for_file(&started).await;
    // The waiter speaks lock.v1 itself (lock-client would retry a wait the arbiter ended
    // early within its own deadline, hiding an arbiter that ends waits by wall time).
    let waiter = waiter_id(if replica { 1 } else { 2 });
    let mut w = stack.workload(&waiter).await.unwrap();
    // Its own process instance (issue 32): a sibling of the holder waits, never a leak.
    let mut open = tonic::Request::new(OpenSessionRequest { key: key.clone() });
    open.metadata_mut().insert(
        lock_config::instance::INSTANCE_HEADER,
        "clock-waiter".parse().expect("ascii"),
    );
    let session_id = w.open_session(open).await.unwrap().into_inner().session_id;
    // Renewed through the steps, as lock-client would (the class's TTL is 5 s).
    let renewing = lock_integration::keep_alive(w.clone(), session_id, Duration::from_secs(1));
    let asked = key.clone();
    let waiter = tokio::spawn(async move {
        let r = w
            .acquire(AcquireRequest {
                key: asked,
                session_id,
                wait_millis: 30_000,
                ..Default::default()
            })
            .await;
        r.map(|_| ()).map_err(|s| {
            lock_integration::reason_of(&s)
                .map_or(format!("{:?}", s.code()), |(r, _)| r.as_str().to_owned())
        })
    });
    // Queued at the arbiter before the clock moves.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = stack.lockctl_as(&b, &["inspect", &key]).unwrap();
        if String::from_utf8_lossy(&out.stdout).contains("waiters=1") {
            break;
        }
        assert!(Instant::now() < deadline, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for step in ["+10m", "-10m", "+0"] {
        std::fs::write(&offset, format!("{step}\n")).unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let held = holder.wait().unwrap().code();
    let waited = waiter.await.unwrap();
    renewing.abort();
    (held, waited)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wall_clock_steps_move_no_deadline() {
    let (held, waited) = steps(&[], false).await;
    assert_eq!(
        held,
        Some(0),
        "the hold covered the whole command across the steps"
    );
    assert_eq!(
        waited,
        Ok(()),
        "the waiter waited through the steps and got the key"
    );
}

/// The same with the waiter a second process of the holder's identity (replicas).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wall_clock_steps_move_no_deadline_for_replicas_of_one_identity() {
    let (held, waited) = steps(&[], true).await;
    assert_eq!(held, Some(0), "the hold covered the whole command");
    assert_eq!(waited, Ok(()), "the sibling waited through the steps");
}

/// The bugs exist only in debug builds (`arbiter --inject-bug`).
#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catches_a_wait_deadline_kept_in_wall_time() {
    let (_, waited) = steps(&["wall-clock-deadline"], false).await;
    // HELD, ended by its deadline (the wire reason; the wait had 30 s and got about one).
    assert_eq!(waited, Err("HELD".to_owned()));
}
