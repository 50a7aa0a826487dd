//! Issue 53, item 3: every primitive from the shell, through Envoy, each lockctl a process
//! of its own. `acquire --wait` queues in the key's FIFO queue (renewing its session while
//! it waits) and gets the key when its holder releases; several keys are one set
//! (AcquireAll) released with `release --token TOKEN KEY...` (ReleaseAll); `--shared`
//! takes reader holds that share a key and exclude a writer; `run --shared` and `run K1
//! K2` run their command under the hold with `$LOCK_TOKEN` (and `$LOCK_KEYS` for a set).

use lock_integration::Stack;
use lock_integration::pki::SvidFiles;
use lock_integration::registry::{
    BENCH_SHARED_PREFIX, FAST_PREFIX, FAST_TTL, SLOW_PREFIX, gate_id, waiter_id,
};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `name=` of a line lockctl printed.
fn field(stdout: &str, name: &str) -> Option<String> {
    stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{name}=")))
        .map(str::to_owned)
}

/// Runs lockctl as `who` and asserts it exits `code`; its stdout and stderr.
fn lockctl(stack: &Stack, who: &SvidFiles, args: &[&str], code: i32) -> (String, String) {
    let out = stack.lockctl_as(who, args).unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(
        out.status.code(),
        Some(code),
        "lockctl {args:?}: {stdout}{stderr}"
    );
    (stdout, stderr)
}

/// `lockctl acquire ARGS...` as `who`, which must succeed: its token.
fn acquire(stack: &Stack, who: &SvidFiles, args: &[&str]) -> u64 {
    let mut all = vec!["acquire"];
    all.extend_from_slice(args);
    let (stdout, _) = lockctl(stack, who, &all, 0);
    field(&stdout, "token").unwrap().parse().unwrap()
}

/// A lockctl process waiting (spawned), and its output once it exits.
async fn finish(child: std::process::Child) -> Output {
    tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_from_the_shell() {
    let (stack, _reg) = Stack::with_test_registry().await.unwrap();
    let a = stack.pki.svid("prim-a", &waiter_id(0)).unwrap();
    let b = stack.pki.svid("prim-b", &waiter_id(1)).unwrap();
    let c = stack.pki.svid("prim-c", &waiter_id(2)).unwrap();

    // --- acquire --wait: queued behind a holder, granted when another lockctl releases.
    let key = format!("{SLOW_PREFIX}/queue");
    let first = acquire(&stack, &a, &[&key]);
    let waiter = stack
        .lockctl_cmd(&b, &["acquire", &key, "--wait", "30s"])
        .unwrap()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (stdout, _) = lockctl(&stack, &c, &["inspect", &key], 0);
    assert!(stdout.contains("waiters=1"), "{stdout}");
    lockctl(&stack, &a, &["release", &key, &first.to_string()], 0);
    let out = finish(waiter).await;
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "the waiter: {stdout}{}",
        text(&out.stderr)
    );
    let second: u64 = field(&stdout, "token").unwrap().parse().unwrap();
    assert!(second > first, "{second} after {first}");
    // The waiter holds it now: a third is refused at once, and its own release works.
    let (_, stderr) = lockctl(&stack, &c, &["acquire", &key], 1);
    assert!(stderr.contains("HELD (Aborted)"), "{stderr}");
    // A wait that ends while it is still held: HELD as the service answers a wait's end.
    let (_, stderr) = lockctl(&stack, &c, &["acquire", &key, "--wait", "1s"], 1);
    assert!(stderr.contains("HELD (DeadlineExceeded)"), "{stderr}");
    lockctl(&stack, &b, &["release", &key, &second.to_string()], 0);

    // --- A wait longer than the class's TTL: lockctl renews its session while it waits
    // (`run` holds the key past the 5 s TTL, renewing; the waiter's session would lapse
    // unrenewed).
    let key = format!("{FAST_PREFIX}/long-wait");
    let holder = stack
        .lockctl_cmd(
            &a,
            &[
                "run",
                &key,
                "--",
                "sh",
                "-c",
                "echo held=$LOCK_TOKEN; sleep 8",
            ],
        )
        .unwrap()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = Instant::now();
    let waiter = stack
        .lockctl_cmd(&b, &["acquire", &key, "--wait", "60s"])
        .unwrap()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = finish(waiter).await;
    let waited = started.elapsed();
    assert!(
        out.status.success(),
        "the long waiter: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        waited > Duration::from_secs(u64::from(FAST_TTL)),
        "granted after {waited:?}: the holder's run should have held it longer than the TTL"
    );
    let long: u64 = field(&text(&out.stdout), "token").unwrap().parse().unwrap();
    let held = finish(holder).await;
    assert!(held.status.success(), "the holder: {}", text(&held.stderr));
    let ran: u64 = field(&text(&held.stdout), "held").unwrap().parse().unwrap();
    assert!(long > ran, "{long} after {ran}");
    lockctl(&stack, &b, &["release", &key, &long.to_string()], 0);

    // --- A set: AcquireAll through the CLI, one token for every key, ReleaseAll.
    let k = |n: &str| format!("{SLOW_PREFIX}/set-{n}");
    let (k1, k2, k3, k4) = (k("c"), k("a"), k("b"), k("d"));
    let (stdout, stderr) = lockctl(&stack, &a, &["acquire", &k1, &k2, &k3], 0);
    let set: u64 = field(&stdout, "token").unwrap().parse().unwrap();
    assert_eq!(
        field(&stdout, "keys").unwrap(),
        format!("{k2},{k3},{k1}"),
        "{stdout}"
    );
    assert!(
        stderr.contains(&format!("lockctl release --token <token> {k2} {k3} {k1}")),
        "{stderr}"
    );
    for key in [&k1, &k2, &k3] {
        let (stdout, _) = lockctl(&stack, &c, &["inspect", key], 0);
        assert!(stdout.contains("held=true"), "{key}: {stdout}");
    }
    // An overlapping set is refused at wait 0, and takes nothing.
    let (_, stderr) = lockctl(&stack, &b, &["acquire", &k1, &k4], 1);
    assert!(stderr.contains("HELD (Aborted)"), "{stderr}");
    let (stdout, _) = lockctl(&stack, &c, &["inspect", &k4], 0);
    assert!(stdout.contains("held=false"), "{stdout}");
    // Three positionals without --token are refused, not guessed at.
    let (_, stderr) = lockctl(&stack, &a, &["release", &k1, &k2, &set.to_string()], 2);
    assert!(stderr.contains("--token"), "{stderr}");
    let (stdout, _) = lockctl(
        &stack,
        &a,
        &["release", "--token", &set.to_string(), &k1, &k2, &k3],
        0,
    );
    assert_eq!(stdout.trim(), format!("released {k2} {k3} {k1}"));
    let (_, stderr) = lockctl(
        &stack,
        &a,
        &["release", "--token", &set.to_string(), &k1, &k2, &k3],
        1,
    );
    assert!(stderr.contains("STALE_TOKEN"), "{stderr}");
    // Now the overlapping set is free, and its token is above the first set's.
    let (stdout, _) = lockctl(&stack, &b, &["acquire", &k1, &k4], 0);
    let next: u64 = field(&stdout, "token").unwrap().parse().unwrap();
    assert!(next > set, "{next} after {set}");
    lockctl(
        &stack,
        &b,
        &["release", "--token", &next.to_string(), &k1, &k4],
        0,
    );

    // --- Shared holds: two readers at once, a writer refused; released as SHARED. (The
    // 60 s class, so the holds cannot lapse between the steps on a busy machine.)
    let r1 = stack.pki.svid("prim-r1", &gate_id(1)).unwrap();
    let r2 = stack.pki.svid("prim-r2", &gate_id(3)).unwrap();
    let w = stack.pki.svid("prim-w", &gate_id(5)).unwrap();
    let key = format!("{BENCH_SHARED_PREFIX}/doc");
    let (stdout, stderr) = lockctl(&stack, &r1, &["acquire", "--shared", &key], 0);
    assert!(stdout.contains("mode=shared"), "{stdout}");
    assert!(
        stderr.contains(&format!("lockctl release --shared {key} <token>")),
        "{stderr}"
    );
    let t1: u64 = field(&stdout, "token").unwrap().parse().unwrap();
    let t2 = acquire(&stack, &r2, &["--shared", &key]);
    let (_, stderr) = lockctl(&stack, &w, &["acquire", &key], 1);
    assert!(stderr.contains("HELD (Aborted)"), "{stderr}");
    // --shared is one key's: a set is exclusive.
    let (_, stderr) = lockctl(&stack, &w, &["acquire", "--shared", &key, &k4], 2);
    assert!(stderr.contains("--shared"), "{stderr}");
    // `run --shared` joins the readers.
    let (stdout, _) = lockctl(
        &stack,
        &w,
        &[
            "run",
            "--shared",
            &key,
            "--",
            "sh",
            "-c",
            "echo token=$LOCK_TOKEN key=$LOCK_KEY",
        ],
        0,
    );
    let run_token: u64 = field(&stdout, "token").unwrap().parse().unwrap();
    assert!(run_token > 0, "{stdout}");
    assert_eq!(field(&stdout, "key").unwrap(), key);
    lockctl(
        &stack,
        &r1,
        &["release", "--shared", &key, &t1.to_string()],
        0,
    );
    lockctl(
        &stack,
        &r2,
        &["release", "--shared", &key, &t2.to_string()],
        0,
    );
    let writer = acquire(&stack, &w, &[&key]);
    assert!(writer > t1.max(t2), "{writer} after readers {t1}, {t2}");
    lockctl(&stack, &w, &["release", &key, &writer.to_string()], 0);

    // --- `run K1 K2`: the command under the set, $LOCK_TOKEN and $LOCK_KEYS set; the set
    // is released when it exits.
    let (r, s) = (k("run-b"), k("run-a"));
    let (stdout, _) = lockctl(
        &stack,
        &c,
        &[
            "run",
            &r,
            &s,
            "--",
            "sh",
            "-c",
            "echo token=$LOCK_TOKEN; echo \"keys=[$LOCK_KEYS]\"; echo key=[$LOCK_KEY]",
        ],
        0,
    );
    let run_set: u64 = field(&stdout, "token").unwrap().parse().unwrap();
    assert!(stdout.contains(&format!("keys=[{s} {r}]")), "{stdout}");
    assert!(stdout.contains("key=[]"), "{stdout}");
    let again = acquire(&stack, &a, &[&r, &s]);
    assert!(again > run_set, "{again} after {run_set}");
    // While the set is held, `run` of an overlapping set is refused (1) and runs nothing.
    let (stdout, stderr) = lockctl(&stack, &c, &["run", &s, &k4, "--", "echo", "ran"], 1);
    assert!(!stdout.contains("ran"), "{stdout}");
    assert!(stderr.contains("HELD"), "{stderr}");
    lockctl(
        &stack,
        &a,
        &["release", "--token", &again.to_string(), &r, &s],
        0,
    );
    // `run --shared` of two keys is bad input (2).
    lockctl(&stack, &c, &["run", "--shared", &r, &s, "--", "true"], 2);
}
