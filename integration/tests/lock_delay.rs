//! Issue 53, item 2: lock-delay for advisory classes, and what it buys, measured the way a
//! user meets it. A `lockctl run` holder whose command writes to a resource that logs every
//! write (a file: an advisory resource refuses nothing) is frozen with SIGSTOP on lockctl's
//! and the command's process groups until its session expires, and woken a little after.
//! A second `lockctl run --wait` waits for the key. The test counts the frozen holder's
//! writes that land after the successor's first write (late writes), and when the
//! successor was granted against when the end was seen in etcd.
//!
//! Three keys at once on one stack: `pay-delay` (lockDelaySeconds 10) with the two holders
//! as two processes of one identity (replicas) and as two identities, and `pay-nodelay`
//! (the same class without a delay: the layer switched off) as the control. With the delay
//! the successor is not granted before the delay has passed since the end, and the woken
//! holder's last writes (it finishes its work for lockctl's 3 s grace) land first; without
//! it, the successor is granted at once and those writes land after its grant. The counts are printed (the docs quote a run).
//!
//! An epoch advance, which ends every hold without a release, starts the delay too.
//!
//! Times asserted are the feature's own rule (the delay, 10 s) with a second of slack for
//! observing the end, never performance.

use lock_integration::Stack;
use lock_integration::pki::SvidFiles;
use lock_integration::process::eventually;
use lock_integration::registry::{DELAY_PREFIX, DELAY_SECONDS, NODELAY_PREFIX, waiter_id};
use rustix::process::{Pid, Signal};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

/// How long after the end is seen the frozen holder is woken: inside the delay.
const WAKE_AFTER: Duration = Duration::from_secs(2);

fn now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

/// `lockctl run KEY ... -- sh -c LOOP` as `who`, in a process group of its own, whose
/// command writes its pid to `pid` and then `NAME <ns>` lines to `log` every 50 ms. The
/// command finishes its work on SIGTERM (it ignores it) until lockctl's grace of 3 s ends
/// with SIGKILL: the in-flight work a real holder completes after it is told to stop.
fn holder(stack: &Stack, who: &SvidFiles, key: &str, name: &str, dir: &Path, wait: bool) -> Child {
    let body = format!(
        "trap '' TERM; echo $$ > {pid}; while :; do echo \"{name} $(date +%s%N)\" >> {log}; sleep 0.05; done",
        pid = dir.join(format!("{name}.pid")).display(),
        log = dir.join("writes").display(),
    );
    let mut args = vec!["run", key, "--grace", "3s"];
    if wait {
        args.extend(["--wait", "120s"]);
    }
    args.extend(["--", "sh", "-c", &body]);
    let mut cmd = stack.lockctl_cmd(who, &args).unwrap();
    cmd.process_group(0);
    cmd.spawn().unwrap()
}

async fn read_pid(path: PathBuf) -> i32 {
    eventually(Duration::from_secs(60), || {
        let path = path.clone();
        async move { Ok(std::fs::read_to_string(&path)?.trim().parse::<i32>()?) }
    })
    .await
    .unwrap()
}

fn signal_group(pgid: i32, sig: Signal) {
    if let Some(p) = Pid::from_raw(pgid) {
        let _ = rustix::process::kill_process_group(p, sig);
    }
}

/// The end of `key`'s hold as etcd commits it: the holder record's delete, on a watch
/// opened while it is held. Returns the wall time it was seen.
async fn end_seen(mut watch: etcd_client::WatchStream) -> i128 {
    loop {
        let resp = tokio::time::timeout(Duration::from_secs(120), watch.message())
            .await
            .expect("the frozen hold never ended")
            .unwrap()
            .expect("watch closed");
        if resp
            .events()
            .iter()
            .any(|e| e.event_type() == etcd_client::EventType::Delete)
        {
            return now_ns();
        }
    }
}

struct Measured {
    /// From the end seen to the successor's first write.
    granted_after: Duration,
    /// The frozen holder's writes after the successor's first.
    late_writes: usize,
    /// The frozen holder's writes after it was woken.
    writes_after_wake: usize,
}

async fn scenario(stack: &Stack, key: &str, first: &SvidFiles, second: &SvidFiles) -> Measured {
    let dir = tempfile::tempdir().unwrap();
    let mut h1 = holder(stack, first, key, "h1", dir.path(), false);
    let h1_child = read_pid(dir.path().join("h1.pid")).await;
    let mut etcd = stack.etcd_client().await.unwrap();
    let mut h2 = holder(stack, second, key, "h2", dir.path(), true);
    // The successor queued: Inspect counts it.
    eventually(Duration::from_secs(30), || async {
        let mut c = stack.workload(&waiter_id(7)).await?;
        let w = lock_integration::inspect(&mut c, key).await?.waiters;
        anyhow::ensure!(w >= 1, "{w} waiting");
        Ok(())
    })
    .await
    .unwrap();
    let watch = etcd.watch(format!("/l/{key}"), None).await.unwrap();
    let end = tokio::spawn(end_seen(watch));
    // Freeze the whole holder: lockctl (its renewals) and its command.
    let h1_pgid = i32::try_from(h1.id()).unwrap();
    signal_group(h1_pgid, Signal::STOP);
    signal_group(h1_child, Signal::STOP);
    let ended_at = end.await.unwrap();
    tokio::time::sleep(WAKE_AFTER).await;
    let woken_at = now_ns();
    signal_group(h1_child, Signal::CONT);
    signal_group(h1_pgid, Signal::CONT);
    // The successor's command starts once it is granted.
    let h2_child = read_pid(dir.path().join("h2.pid")).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    signal_group(h2_child, Signal::KILL);
    signal_group(i32::try_from(h2.id()).unwrap(), Signal::TERM);
    signal_group(h1_child, Signal::KILL);
    signal_group(h1_pgid, Signal::TERM);
    let _ = h2.wait();
    let _ = h1.wait();
    let log = std::fs::read_to_string(dir.path().join("writes")).unwrap();
    let writes: Vec<(&str, i128)> = log
        .lines()
        .filter_map(|l| {
            let (who, at) = l.split_once(' ')?;
            Some((who, at.trim().parse().ok()?))
        })
        .collect();
    let granted = writes
        .iter()
        .find(|(w, _)| *w == "h2")
        .map(|(_, at)| *at)
        .expect("the successor never wrote");
    let h1_after = |t: i128| {
        writes
            .iter()
            .filter(|(w, at)| *w == "h1" && *at > t)
            .count()
    };
    Measured {
        granted_after: Duration::from_nanos(u64::try_from(granted - ended_at).unwrap_or(0)),
        late_writes: h1_after(granted),
        writes_after_wake: h1_after(woken_at),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_advisory_key_is_not_granted_inside_its_lock_delay() {
    let (stack, _reg) = Stack::with_test_registry().await.unwrap();
    let svid = |n: &str, i: usize| stack.pki.svid(n, &waiter_id(i)).unwrap();
    let (r1, r2) = (svid("delay-r1", 3), svid("delay-r2", 3));
    let (a, b) = (svid("delay-a", 4), svid("delay-b", 5));
    let (n1, n2) = (svid("nodelay-r1", 6), svid("nodelay-r2", 6));
    let (replicas_key, identities_key, control_key) = (
        format!("{DELAY_PREFIX}/replicas"),
        format!("{DELAY_PREFIX}/identities"),
        format!("{NODELAY_PREFIX}/replicas"),
    );
    let (replicas, identities, control) = tokio::join!(
        scenario(&stack, &replicas_key, &r1, &r2),
        scenario(&stack, &identities_key, &a, &b),
        scenario(&stack, &control_key, &n1, &n2),
    );
    for (what, m) in [
        ("delay 10 s, two replicas of one identity", &replicas),
        ("delay 10 s, two identities", &identities),
        ("no delay (control)", &control),
    ] {
        println!(
            "{what}: successor granted {:.1} s after the end was seen; frozen holder's writes after waking: {}, after the successor's grant: {}",
            m.granted_after.as_secs_f64(),
            m.writes_after_wake,
            m.late_writes
        );
    }
    let delay = Duration::from_secs(u64::from(DELAY_SECONDS));
    let slack = Duration::from_secs(1);
    for m in [&replicas, &identities] {
        assert!(
            m.granted_after + slack >= delay,
            "granted {:?} after the end, inside the {delay:?} delay",
            m.granted_after
        );
        assert_eq!(
            m.late_writes, 0,
            "a late write landed after the successor's grant"
        );
    }
    // The control shows what the delay changed: granted at once, inside what would have
    // been the delay.
    assert!(
        control.granted_after < delay,
        "without a delay the successor waited {:?}",
        control.granted_after
    );
    assert!(
        control.late_writes > 0,
        "without a delay the woken holder's last writes should land after the successor's grant"
    );

    // Nothing is left behind: every marker went with its release or its delay's lease.
    eventually(Duration::from_secs(30), || async {
        let mut etcd = stack.etcd_client().await?;
        let left = etcd
            .get("/d/", Some(etcd_client::GetOptions::new().with_prefix()))
            .await?;
        anyhow::ensure!(left.kvs().is_empty(), "{} markers left", left.kvs().len());
        Ok(())
    })
    .await
    .unwrap();
}

/// A released hold does not delay the next grant, and a queued waiter is handed the key
/// by the release as on any class: lock-delay is only for ends without a release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_hold_is_not_delayed() {
    let (stack, _reg) = Stack::with_test_registry().await.unwrap();
    let key = format!("{DELAY_PREFIX}/released");
    let a = stack.lock_client(&waiter_id(1)).unwrap();
    let b = stack.lock_client(&waiter_id(2)).unwrap();
    let hold = a.acquire(&key, Duration::ZERO, || {}).await.unwrap();
    let waiting = tokio::spawn({
        let key = key.clone();
        async move { b.acquire(&key, Duration::from_secs(30), || {}).await }
    });
    eventually(Duration::from_secs(30), || async {
        let mut c = stack.workload(&waiter_id(7)).await?;
        let w = lock_integration::inspect(&mut c, &key).await?.waiters;
        anyhow::ensure!(w >= 1, "{w} waiting");
        Ok(())
    })
    .await
    .unwrap();
    let released = std::time::Instant::now();
    hold.release().await.unwrap();
    let next = waiting.await.unwrap().unwrap();
    let handed_after = released.elapsed();
    assert!(
        handed_after < Duration::from_secs(u64::from(DELAY_SECONDS)),
        "a released key waited {handed_after:?}"
    );
    // A no-wait acquire right after a release is granted too.
    next.release().await.unwrap();
    let c = stack.lock_client(&waiter_id(3)).unwrap();
    c.acquire(&key, Duration::ZERO, || {})
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// An epoch advance (after a restore) ends every hold without a release: a delayed key is
/// not granted again before its delay, and a key of the class without one is at once.
/// The advance goes through lock-admin's own two-person code, as an operator runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_epoch_advance_ends_a_hold_without_a_release() {
    let (stack, _reg) = Stack::with_test_registry().await.unwrap();
    let delayed = format!("{DELAY_PREFIX}/advanced");
    let control = format!("{NODELAY_PREFIX}/advanced");
    let a = stack.lock_client(&waiter_id(1)).unwrap();
    let _held = a.acquire(&delayed, Duration::ZERO, || {}).await.unwrap();
    let _held_too = a.acquire(&control, Duration::ZERO, || {}).await.unwrap();
    stack.advance_epoch(1).await.unwrap();
    let advanced = std::time::Instant::now();
    let b = stack.lock_client(&waiter_id(2)).unwrap();
    let wait = Duration::from_secs(60);
    let (d, c) = tokio::join!(
        async {
            let h = b.acquire(&delayed, wait, || {}).await.unwrap();
            (advanced.elapsed(), h)
        },
        async {
            let h = b.acquire(&control, wait, || {}).await.unwrap();
            (advanced.elapsed(), h)
        },
    );
    println!(
        "after the advance: the delayed key granted in {:.1} s, the control in {:.1} s",
        d.0.as_secs_f64(),
        c.0.as_secs_f64()
    );
    let delay = Duration::from_secs(u64::from(DELAY_SECONDS));
    assert!(d.0 >= delay, "granted {:?} after the advance", d.0);
    assert!(c.0 < delay, "the control waited {:?}", c.0);
    d.1.release().await.unwrap();
    c.1.release().await.unwrap();
}
