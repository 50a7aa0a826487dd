//! `lockctl run KEY... [--wait D] [--grace D] [--shared] -- COMMAND...`: like `flock` /
//! `etcdctl lock`.
//! Holds the lock (through lock-client: renewed, drained, fenced) while COMMAND runs, gives
//! it the token in `LOCK_TOKEN` (and the key in `LOCK_KEY`, or a set's keys in
//! `LOCK_KEYS`: several keys are held as one set, `--shared` holds one key shared), and
//! never lets the command outlive the hold:
//!
//! - COMMAND runs in a process group of its own; whatever stops it stops the whole group
//!   (a shell's children included), first with a signal, then SIGKILL after `--grace`, and
//!   lockctl waits until the group is gone. lockctl is the group's subreaper, so orphaned
//!   descendants are reaped here rather than left as zombies that still count as members.
//! - COMMAND gets SIGKILL if lockctl itself dies (`PR_SET_PDEATHSIG`), and so does the rest
//!   of its group (a guard process, lockctl re-executed as `group-guard`, watches lockctl
//!   and kills the group when it is gone), so a `kill -9` of lockctl cannot leave the
//!   command running unsupervised with a hold nobody renews.
//! - Every way out releases the hold and closes the session before lockctl exits (bounded),
//!   so the next holder is granted at once rather than after the TTL.
//!
//! Exit paths (docs/src/using/lockctl-run.md):
//!
//! | what happened | the command | the hold | exit |
//! |---|---|---|---|
//! | COMMAND exited | its leftover group members get SIGTERM, SIGKILL after the grace | released, session closed | COMMAND's status (128+N if killed by signal N) |
//! | COMMAND could not start | - | released, session closed | 2 |
//! | the hold was fenced | group: SIGTERM, SIGKILL after the grace | lapsed already; session closed | 4 |
//! | COMMAND exited, but the hold lapsed while it ran (frozen past the TTL) | as when it exited | lapsed; session closed | 4 |
//! | lockctl got SIGTERM / SIGINT / SIGHUP | the same signal to the group, SIGKILL after the grace | released, session closed | 128+N |
//! | a signal while still waiting for the lock | never started | none taken; session closed | 128+N |
//! | lockctl got SIGKILL | SIGKILL (parent-death signal) | lapses after the TTL | 137 (the shell's) |
//! | refused / bad input / unreachable | never started | none | 1 / 2 / 3 |

use crate::keys::{self, Take};
use crate::{Conn, Failure};
use lock_client::{HeldSet, Hold, LockClient, LockError, SharedHold};
use rustix::process::{Pid, Signal};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};

pub const EXIT_FENCED: u8 = 4;

/// A message on stderr that cannot fail: `eprintln!` panics when stderr is closed, and a
/// panic here would skip the release on the way out.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}
/// Bound on the release and the session close on the way out.
const FINISH_TIMEOUT: Duration = Duration::from_secs(5);
/// After SIGKILL, how long to wait for the group to be reaped before giving up on it.
const KILL_REAP_TIMEOUT: Duration = Duration::from_secs(5);
/// How often to look whether the group is gone.
const POLL: Duration = Duration::from_millis(20);

pub async fn run(
    conn: &Conn,
    take: &Take,
    wait: Duration,
    grace: Duration,
    command: &[String],
) -> Result<ExitCode, Failure> {
    let mut signals = Signals::install()?;
    let ran = run_once(conn, take, Some(wait), grace, command, &mut signals).await?;
    Ok(ExitCode::from(ran.code))
}

/// How one run ended: its exit code, and whether a signal to lockctl ended it.
pub struct Ran {
    pub code: u8,
    pub signalled: bool,
}

/// One hold (of a key, shared or exclusive, or of a set) and one COMMAND under it. `wait`
/// None: campaign, waiting in KEY's queue as long as it takes (`lockctl elect`, one key).
/// `signals` are installed by the caller, before the first run: a signal between two runs
/// (`elect --again`) is then still heard.
pub async fn run_once(
    conn: &Conn,
    take: &Take,
    wait: Option<Duration>,
    grace: Duration,
    command: &[String],
    signals: &mut Signals,
) -> Result<Ran, Failure> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| Failure::input("no command given after --"))?;
    let client =
        LockClient::new(conn.config().await?).map_err(|e| Failure::input(e.to_string()))?;
    let (fenced_tx, mut fenced) = tokio::sync::mpsc::channel::<()>(1);
    let on_fence = move || {
        let _ = fenced_tx.try_send(());
    };
    let key = take.label();
    let key = key.as_str();
    let acquiring = async {
        match (wait, take) {
            (Some(wait), take) => acquire(&client, take, wait, on_fence).await,
            (None, Take::One { key, shared: false }) => client
                .campaign(key, on_fence)
                .await
                .map(|l| Held::One(l.into_hold())),
            (None, _) => Err(lock_client::LockError::InvalidRequest(
                "a campaign is for one key, exclusive".into(),
            )),
        }
    };
    let acquired = tokio::select! {
        h = acquiring => h,
        sig = signals.recv() => {
            shutdown(&client, None).await;
            return Ok(Ran { code: signal_exit(sig), signalled: true });
        }
    };
    let hold = match acquired {
        Ok(h) => h,
        Err(e) => {
            shutdown(&client, None).await;
            let waited = wait.is_none_or(|w| !w.is_zero());
            return Err(crate::refusal::of_lock_error(e, waited));
        }
    };
    // Orphans of the command's group are reparented here, to be reaped and counted gone.
    if let Err(e) = rustix::process::set_child_subreaper(Some(rustix::process::getpid())) {
        say!("lockctl: cannot become the command's subreaper ({e}); continuing");
    }
    let mut cmd = Command::new(program);
    cmd.args(args).env("LOCK_TOKEN", hold.token().to_string());
    match take {
        // Only this hold's names: none inherited from an outer `lockctl run`.
        Take::One { key, .. } => cmd.env("LOCK_KEY", key).env_remove("LOCK_KEYS"),
        Take::Set(keys) => cmd.env("LOCK_KEYS", keys.join(" ")).env_remove("LOCK_KEY"),
    };
    cmd.process_group(0).kill_on_drop(true);
    die_with_parent(&mut cmd);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            shutdown(&client, Some(hold)).await;
            return Err(Failure::input(format!("cannot run {program}: {e}")));
        }
    };
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .and_then(Pid::from_raw);
    let mut guard = group.and_then(spawn_guard);
    let outcome = tokio::select! {
        status = child.wait() => Outcome::Exited(status),
        _ = fenced.recv() => Outcome::Fenced,
        sig = signals.recv() => Outcome::Signalled(sig),
    };
    let signalled = matches!(outcome, Outcome::Signalled(_));
    let code = match outcome {
        Outcome::Exited(status) => {
            // Judged at the exit, before anything else runs: a process group frozen past
            // the TTL (SIGSTOP, a paused VM) wakes, and its command may finish before the
            // renewal task has woken to fence the hold (issue 32).
            let lapse = hold.lapse().filter(|_| !skip_lapse_check());
            let status = status.map_err(|e| Failure::input(e.to_string()))?;
            // Whatever COMMAND left running in its group would run without the lock.
            stop_group(&mut child, group, Signal::TERM, grace).await;
            match lapse {
                None => exit_code(status),
                Some(lapse) => {
                    say!(
                        "lockctl: the hold on {key} did not cover the whole command ({lapse}); \
                         the command exited with {}, but part of it ran without the lock",
                        exit_code(status)
                    );
                    EXIT_FENCED
                }
            }
        }
        Outcome::Fenced => {
            say!("lockctl: the hold on {key} was fenced; stopping the command");
            stop_group(&mut child, group, Signal::TERM, grace).await;
            EXIT_FENCED
        }
        Outcome::Signalled(sig) => {
            stop_group(&mut child, group, sig, grace).await;
            signal_exit(sig)
        }
    };
    // The group is gone: the guard must not outlive lockctl and act on a reused id.
    if let Some(g) = guard.as_mut() {
        let _ = g.kill().await;
    }
    shutdown(&client, Some(hold)).await;
    Ok(Ran { code, signalled })
}

/// A hold `run` took: of one key (exclusive or shared) or of a set.
enum Held {
    One(Hold),
    Shared(SharedHold),
    Set(HeldSet),
}

impl Held {
    fn token(&self) -> u64 {
        match self {
            Held::One(h) => h.token(),
            Held::Shared(h) => h.token(),
            Held::Set(h) => h.token(),
        }
        .as_u64()
    }

    fn is_fenced(&self) -> bool {
        match self {
            Held::One(h) => h.is_fenced(),
            Held::Shared(h) => h.is_fenced(),
            Held::Set(h) => h.is_fenced(),
        }
    }

    /// Why the hold did not cover every instant since its grant, if it did not.
    fn lapse(&self) -> Option<String> {
        match self {
            Held::One(h) => h.lapse().map(|l| l.to_string()),
            Held::Shared(h) => (!h.was_continuous()).then(|| LAPSED.to_owned()),
            Held::Set(h) => (!h.was_continuous()).then(|| LAPSED.to_owned()),
        }
    }

    async fn release(self) -> Result<(), LockError> {
        match self {
            Held::One(h) => h.release().await,
            Held::Shared(h) => h.release().await,
            Held::Set(h) => h.release().await,
        }
    }
}

/// The lapse of a shared hold or a set, whose client does not say by how much.
const LAPSED: &str = "its session passed its local deadline unrenewed";

/// Takes what `take` names, waiting up to `wait`; a wait longer than the service's (300 s)
/// is asked again while the key is still held, so `--wait` means what it says.
async fn acquire(
    client: &LockClient,
    take: &Take,
    wait: Duration,
    on_fence: impl Fn() + Clone + Send + Sync + 'static,
) -> Result<Held, LockError> {
    let deadline = Instant::now() + wait;
    loop {
        let ask = keys::service_wait(deadline.saturating_duration_since(Instant::now()));
        let got = match take {
            Take::One { key, shared: false } => client
                .acquire(key, ask, on_fence.clone())
                .await
                .map(Held::One),
            Take::One { key, shared: true } => client
                .acquire_shared(key, ask, on_fence.clone())
                .await
                .map(Held::Shared),
            Take::Set(keys) => client
                .acquire_all(keys, ask, on_fence.clone())
                .await
                .map(Held::Set),
        };
        match got {
            Err(LockError::Held)
                if keys::ask_again(true, deadline.saturating_duration_since(Instant::now())) => {}
            got => return got,
        }
    }
}

/// Debug builds only: `LOCKCTL_INJECT_BUG=run-skips-lapse-check` removes the check at the
/// command's exit, so the test that freezes lockctl past the TTL can show it catches its
/// absence (an exit 0 after a lapse). Release builds have no such switch.
fn skip_lapse_check() -> bool {
    cfg!(debug_assertions)
        && std::env::var("LOCKCTL_INJECT_BUG").is_ok_and(|v| v == "run-skips-lapse-check")
}

/// How often the guard looks whether lockctl is still its parent.
const GUARD_POLL: Duration = Duration::from_millis(50);

/// Starts the guard of `group`: lockctl itself as `lockctl group-guard`, in a process group
/// of its own (a terminal's Ctrl-C does not reach it). None if it cannot start (reported:
/// the command still dies with lockctl, its other group members might not).
fn spawn_guard(group: Pid) -> Option<Child> {
    let exe = std::env::current_exe().ok()?;
    let spawned = Command::new(exe)
        .args([
            "group-guard",
            "--pgid",
            &group.as_raw_nonzero().to_string(),
            "--parent",
            &rustix::process::getpid().as_raw_nonzero().to_string(),
        ])
        .stdin(std::process::Stdio::null())
        .process_group(0)
        .kill_on_drop(true)
        .spawn();
    match spawned {
        Ok(c) => Some(c),
        Err(e) => {
            say!("lockctl: cannot start the group guard ({e}); continuing");
            None
        }
    }
}

/// `lockctl group-guard --pgid G --parent P`: polls until P is no longer this process's
/// parent (lockctl died, however), then SIGKILLs process group G. Polling rather than a
/// death signal: no window where a signal arrives before a handler is installed, and a
/// parent already gone at start is seen on the first look. lockctl kills the guard
/// itself once the group is gone, before it exits.
pub async fn group_guard(pgid: i32, parent: i32) -> ExitCode {
    let (Some(group), Some(parent)) = (Pid::from_raw(pgid), Pid::from_raw(parent)) else {
        return ExitCode::from(2);
    };
    while rustix::process::getppid() == Some(parent) {
        tokio::time::sleep(GUARD_POLL).await;
    }
    let _ = rustix::process::kill_process_group(group, Signal::KILL);
    ExitCode::SUCCESS
}

enum Outcome {
    Exited(std::io::Result<std::process::ExitStatus>),
    Fenced,
    Signalled(Signal),
}

/// SIGTERM, SIGINT and SIGHUP, as a stream of which arrived.
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installed before the first wait, so a signal while waiting still closes the
    /// session. Once installed, tokio keeps the handlers for the process's life: a signal
    /// arriving while nobody listens would be lost, so one set serves every run.
    pub fn install() -> Result<Self, Failure> {
        let on = |k| signal(k).map_err(|e| Failure::input(format!("cannot handle signals: {e}")));
        Ok(Self {
            term: on(SignalKind::terminate())?,
            int: on(SignalKind::interrupt())?,
            hup: on(SignalKind::hangup())?,
        })
    }

    pub async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.term.recv() => Signal::TERM,
            _ = self.int.recv() => Signal::INT,
            _ = self.hup.recv() => Signal::HUP,
        }
    }
}

pub fn signal_exit(sig: Signal) -> u8 {
    u8::try_from(128 + sig.as_raw()).unwrap_or(255)
}

/// Releases the hold (if any) and closes the client's sessions, each bounded; failures
/// are reported, not fatal: the session's TTL is the backstop.
async fn shutdown(client: &LockClient, hold: Option<Held>) {
    if let Some(hold) = hold
        && !hold.is_fenced()
    {
        match tokio::time::timeout(FINISH_TIMEOUT, hold.release()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => say!("lockctl: release: {e}"),
            Err(_) => say!("lockctl: release timed out"),
        }
    }
    match tokio::time::timeout(FINISH_TIMEOUT, client.shutdown()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => say!("lockctl: closing the session: {e}"),
        Err(_) => say!("lockctl: closing the session timed out"),
    }
}

/// Sends `first` to the command's process group, waits up to `grace` for the whole group
/// to be gone, then SIGKILLs it and waits (bounded) again.
async fn stop_group(child: &mut Child, group: Option<Pid>, first: Signal, grace: Duration) {
    let Some(group) = group else {
        let _ = child.kill().await;
        return;
    };
    let _ = rustix::process::kill_process_group(group, first);
    if gone_within(child, group, grace).await {
        return;
    }
    let _ = rustix::process::kill_process_group(group, Signal::KILL);
    if !gone_within(child, group, KILL_REAP_TIMEOUT).await {
        say!("lockctl: the command's process group outlived SIGKILL");
    }
}

/// Polls until no process of `group` is left (reaping the direct child, then any orphaned
/// descendant reparented to this subreaper), or `limit` passes.
async fn gone_within(child: &mut Child, group: Pid, limit: Duration) -> bool {
    let until = Instant::now() + limit;
    let mut child_reaped = false;
    loop {
        if !child_reaped {
            child_reaped = !matches!(child.try_wait(), Ok(None));
        }
        if child_reaped {
            // Only once tokio has reaped its own child: waiting for any child earlier
            // could take its status from tokio.
            while let Ok(Some(_)) = rustix::process::wait(rustix::process::WaitOptions::NOHANG) {}
        }
        if child_reaped && rustix::process::test_kill_process_group(group).is_err() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The command gets SIGKILL when lockctl dies, however it dies.
///
/// The only `unsafe` in lockctl: `pre_exec` runs its closure in the forked child before
/// `exec`, where only async-signal-safe work is allowed.
#[allow(unsafe_code)]
fn die_with_parent(cmd: &mut Command) {
    let parent = rustix::process::getpid();
    // SAFETY: the closure makes two raw system calls through rustix (prctl(PR_SET_PDEATHSIG)
    // and getppid), allocates nothing, takes no lock and reads only `parent`, a copied
    // integer; an error becomes an `io::Error` from a raw errno, which does not allocate.
    // Checking the parent after the prctl closes the race where lockctl died between the
    // fork and the prctl (the signal would then never come): the child refuses to run.
    // lockctl's runtime is single-threaded, so the thread that forks is the main thread,
    // whose exit is the process's: the death signal is not sent early by a worker exiting.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
            if rustix::process::getppid() != Some(parent) {
                return Err(std::io::Error::from_raw_os_error(3)); // ESRCH: parent gone
            }
            Ok(())
        });
    }
}

fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(c), _) => u8::try_from(c).unwrap_or(1),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(255),
        _ => 1,
    }
}

/// Largest duration a flag may give: a day is longer than any wait the service allows
/// (300 s) or any grace anyone means, and keeps `Instant` arithmetic far from overflow.
const MAX_FLAG_DURATION: Duration = Duration::from_secs(24 * 3600);

/// `10s`, `500ms`, `2m` or plain seconds, at most a day.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map_or((s, "s"), |i| s.split_at(i));
    let n: u64 = num.parse().map_err(|_| format!("bad duration {s:?}"))?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        _ => return Err(format!("bad duration unit in {s:?} (ms, s, m)")),
    };
    if d > MAX_FLAG_DURATION {
        return Err(format!("duration {s:?} is longer than a day"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        for bad in [
            "",
            "x",
            "5h",
            "18446744073709551615s",
            "18446744073709551615m",
            "25h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
