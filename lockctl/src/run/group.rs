//! The command's process group: the command dies with lockctl however lockctl dies (its
//! parent-death signal, and a guard process for the rest of the group), and whatever stops
//! the command stops the whole group, which is waited for until it is gone.

use rustix::process::{Pid, Signal};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

/// After SIGKILL, how long to wait for the group to be reaped before giving up on it.
const KILL_REAP_TIMEOUT: Duration = Duration::from_secs(5);
/// How often to look whether the group is gone.
const POLL: Duration = Duration::from_millis(20);

/// How often the guard looks whether lockctl is still its parent.
const GUARD_POLL: Duration = Duration::from_millis(50);

/// Starts the guard of `group`: lockctl itself as `lockctl group-guard`, in a process group
/// of its own (a terminal's Ctrl-C does not reach it). None if it cannot start (reported:
/// the command still dies with lockctl, its other group members might not).
pub(super) fn spawn_guard(group: Pid) -> Option<Child> {
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

/// Sends `first` to the command's process group, waits up to `grace` for the whole group
/// to be gone, then SIGKILLs it and waits (bounded) again.
pub(super) async fn stop_group(
    child: &mut Child,
    group: Option<Pid>,
    first: Signal,
    grace: Duration,
) {
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
pub(super) fn die_with_parent(cmd: &mut Command) {
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
