//! `lockctl run KEY [--wait D] [--grace D] -- COMMAND...`: like `flock` / `etcdctl lock`.
//! Holds the lock (through lock-client: renewed, drained, fenced) while COMMAND runs, gives
//! it the token in `LOCK_TOKEN` (and the key in `LOCK_KEY`), stops it when the hold is
//! fenced (SIGTERM, then SIGKILL after the grace), and releases when it exits.
//!
//! Exit: COMMAND's own status when it ran to completion holding the lock (128+N if killed
//! by signal N); 1 refused (reason printed); 2 bad input; 3 unreachable; 4 the hold was
//! fenced and COMMAND was stopped.

use crate::{Conn, Failure};
use lock_client::{Config, LockClient, LockError};
use std::process::ExitCode;
use std::time::Duration;
use tokio::process::Command;

pub const EXIT_FENCED: u8 = 4;

pub async fn run(
    conn: &Conn,
    key: &str,
    wait: Duration,
    grace: Duration,
    command: &[String],
) -> Result<ExitCode, Failure> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| Failure::input("no command given after --"))?;
    let client = LockClient::new(Config {
        endpoint: conn.endpoint.clone(),
        svid_cert: conn.svid.clone(),
        svid_key: conn.svid_key.clone(),
        bundle: conn.ca.clone(),
        server_name: conn.server_name.clone(),
    })
    .map_err(|e| Failure::input(e.to_string()))?;
    let (fenced_tx, mut fenced) = tokio::sync::mpsc::channel::<()>(1);
    let hold = client
        .acquire(key, wait, move || {
            let _ = fenced_tx.try_send(());
        })
        .await
        .map_err(failure)?;
    let mut child = Command::new(program)
        .args(args)
        .env("LOCK_TOKEN", hold.token().as_u64().to_string())
        .env("LOCK_KEY", key)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Failure::input(format!("cannot run {program}: {e}")))?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| Failure::input(e.to_string()))?;
    let outcome = tokio::select! {
        status = child.wait() => Ok(status),
        _ = fenced.recv() => Err(true),
        _ = tokio::signal::ctrl_c() => Err(false),
        _ = term.recv() => Err(false),
    };
    match outcome {
        Ok(status) => {
            let status = status.map_err(|e| Failure::input(e.to_string()))?;
            // A hold fenced while the command was finishing: say so, it was not exclusive.
            if let Err(e) = hold.release().await {
                eprintln!("lockctl: release: {e}");
            }
            Ok(ExitCode::from(exit_code(status)))
        }
        Err(was_fenced) => {
            if was_fenced {
                eprintln!("lockctl: the hold on {key} was fenced; stopping the command");
            }
            stop(&mut child, grace).await;
            drop(hold);
            if was_fenced {
                Ok(ExitCode::from(EXIT_FENCED))
            } else {
                Ok(ExitCode::from(130))
            }
        }
    }
}

/// SIGTERM, then SIGKILL if it has not exited within `grace`.
async fn stop(child: &mut tokio::process::Child, grace: Duration) {
    if let Some(pid) = child.id() {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status()
            .await;
    }
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        let _ = child.kill().await;
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

fn failure(e: LockError) -> Failure {
    match e {
        LockError::Unavailable(_) => Failure::unreachable(e.to_string()),
        LockError::InvalidRequest(_) => Failure::input(e.to_string()),
        e => Failure::refused(format!("{e:?}: {e}")),
    }
}

/// `10s`, `500ms`, `2m` or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map_or((s, "s"), |i| s.split_at(i));
    let n: u64 = num.parse().map_err(|_| format!("bad duration {s:?}"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        _ => Err(format!("bad duration unit in {s:?} (ms, s, m)")),
    }
}
