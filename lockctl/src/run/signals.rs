//! The signals that stop a run (SIGTERM, SIGINT, SIGHUP) and the exit code each gives.

use crate::Failure;
use rustix::process::Signal;
use tokio::signal::unix::{SignalKind, signal};

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
