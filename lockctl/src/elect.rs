//! `lockctl elect KEY [--again] [--grace D] -- COMMAND...`: run COMMAND while this process
//! leads KEY. Leadership is the hold of KEY (issue 35): lockctl campaigns, waiting in the
//! key's FIFO queue as long as it takes, then runs COMMAND exactly as `lockctl run` does,
//! with the term (the hold's fencing token) in `LOCK_TOKEN`. Write with it, and have the
//! resource accept a write only under a term at least the last one it saw: a deposed
//! leader's late write is then refused.
//!
//! Without `--again`, lockctl exits as `lockctl run` would. With `--again`, a COMMAND that
//! exits non-zero, a leadership lost (exit 4), or the service out of reach (exit 3) is
//! followed by a new campaign: a singleton that restarts itself. A signal to lockctl (SIGTERM, SIGINT, SIGHUP) and a
//! COMMAND that exits 0 end it; so do refusals waiting cannot cure (NOT_GRANTED...).

use crate::keys::Take;
use crate::run::{Ran, Signals, run_once, signal_exit};
use crate::{Conn, Failure};
use std::process::ExitCode;
use std::time::Duration;

/// Between a failed term and the next campaign: a COMMAND that fails at once is not
/// restarted in a spin.
const PAUSE: Duration = Duration::from_secs(1);

pub async fn elect(
    conn: &Conn,
    key: &str,
    again: bool,
    grace: Duration,
    command: &[String],
) -> Result<ExitCode, Failure> {
    let mut signals = Signals::install()?;
    let take = Take::One {
        key: key.to_owned(),
        mode: crate::keys::Mode::Exclusive,
    };
    loop {
        let Ran { code, signalled } =
            match run_once(conn, &take, None, grace, command, &mut signals).await {
                Ok(ran) => ran,
                // Out of reach: a supervisor of a singleton keeps campaigning.
                Err(f) if again && f.exit == Failure::UNREACHABLE => Ran {
                    code: f.exit,
                    signalled: false,
                },
                Err(f) => return Err(f),
            };
        if !again || signalled || code == 0 {
            return Ok(ExitCode::from(code));
        }
        let _ = {
            use std::io::Write as _;
            writeln!(
                std::io::stderr(),
                "lockctl: the term on {key} ended with exit {code}; campaigning again"
            )
        };
        tokio::select! {
            () = tokio::time::sleep(PAUSE) => {}
            sig = signals.recv() => return Ok(ExitCode::from(signal_exit(sig))),
        }
    }
}
