//! The recorded history: one JSON line per event, appended and flushed as it happens, so a
//! process killed mid-run leaves every event up to its death. An operation is an `invoke`
//! line and, if it finished, an `ok`, `fail` or `info` line with the same (client, op id);
//! `info` and a missing completion both mean the outcome is unknown (Jepsen's convention).
//!
//! Times are CLOCK_MONOTONIC nanoseconds: one clock for every process on the machine, so
//! histories written by different worker processes merge into one real-time order.
//! Tokens appear here because the checker needs them: this is a test artifact of a test
//! cluster, never a log of the product.

use serde::{Deserialize, Serialize};
use std::io::{BufRead as _, Write as _};
use std::path::Path;
use std::sync::Mutex;

/// The revision half of a token by its bits: any value, even one no grant could have made
/// (the checker's `revision` refuses those; the model and the pictures take them as they are).
pub fn revision_bits(token: u64) -> i64 {
    i64::try_from(token & ((1 << 48) - 1)).unwrap_or(i64::MAX)
}

/// CLOCK_MONOTONIC now, in nanoseconds.
pub fn mono_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Open,
    Acquire,
    Release,
    KeepAlive,
    /// A guarded write to the in-test fenced register.
    Write,
    /// A guarded read of the in-test fenced register by a shared holder: served only under
    /// a token at least the last write's, so a reader paused while a writer came and went
    /// is refused (`STALE`).
    Read,
    /// A guarded write to the PostgreSQL reference fence.
    PgWrite,
    /// A two-person epoch advance (lock-admin's filing and approval), as operators would
    /// run one after a restore.
    Advance,
    /// A two-person force release of one key's current hold (lock-force's transaction,
    /// run by the gate as the admin server would after an approval).
    Force,
    /// A call of the attacker on another client's key, session or token, or around the
    /// edge (`via` names it): it must be refused.
    Attack,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Invoke,
    /// Definitely happened (a grant, a release, an accepted write, a renewal).
    Ok,
    /// Definitely did not happen (a refusal with a reason).
    Fail,
    /// May or may not have happened (timeout, transport error, NO_QUORUM).
    Info,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Event {
    /// Client (a logical process; one operation in flight at a time).
    pub c: u32,
    /// Operation id, unique per client.
    pub op: u64,
    pub t: u64,
    pub ph: Phase,
    pub f: Kind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<i64>,
    /// Acquire: the token granted (on `ok`). Release/writes: the token used (on `invoke`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    /// The refusal reason or error, for `fail` and `info`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// Which way the call went: "edge" (Envoy) or "direct:<i>" (arbiter i).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// On a completion: the arbiter that answered (its `x-lock-arbiter` reply header).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served: Option<String>,
    /// On an acknowledged release: the store revision of its delete, as the arbiter said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rev: Option<i64>,
    /// An AcquireAll or ReleaseAll is recorded as one operation per key (each key's
    /// history is then checked as any other), tied by this id: the op id of its first key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set: Option<u64>,
    /// An acquire or release of a shared hold (`HoldMode::SHARED`, a `shared: true` class).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared: bool,
    /// A semaphore's permit (`HoldMode::PERMIT`, a `permits: N` class): on an acquire's
    /// `ok`, the permit granted (`AcquireResponse.permit`); on a release or a write, the
    /// permit its token was granted (writes fence per (key, permit)). Absent elsewhere,
    /// and in histories from before semaphores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permit: Option<u32>,
}

/// Appends events to a file, one line each, flushed per line.
pub struct Recorder {
    out: Mutex<std::io::BufWriter<std::fs::File>>,
}

impl Recorder {
    pub fn create(path: &Path) -> anyhow::Result<Self> {
        let f = std::fs::File::options()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Self {
            out: Mutex::new(std::io::BufWriter::new(f)),
        })
    }

    pub fn record(&self, e: &Event) {
        if let Ok(line) = serde_json::to_string(e)
            && let Ok(mut out) = self.out.lock()
        {
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    }
}

/// Reads every event of the history files, ordered by time. A torn last line (the writer
/// was killed mid-write) is skipped.
pub fn read(paths: &[std::path::PathBuf]) -> anyhow::Result<Vec<Event>> {
    let mut events = Vec::new();
    for p in paths {
        let f = std::fs::File::open(p)?;
        for line in std::io::BufReader::new(f).lines() {
            if let Ok(e) = serde_json::from_str::<Event>(&line?) {
                events.push(e);
            }
        }
    }
    events.sort_by_key(|e| e.t);
    Ok(events)
}

/// One operation: its invocation and, if recorded, its completion.
#[derive(Debug, Clone)]
pub struct Op {
    pub client: u32,
    pub kind: Kind,
    pub key: Option<String>,
    pub session: Option<i64>,
    /// For acquires, the token granted; otherwise the token used.
    pub token: Option<u64>,
    pub invoked: u64,
    /// Completion time and phase; None: the process never reported (unknown outcome).
    pub done: Option<(u64, Phase)>,
    pub why: Option<String>,
    /// The route (`edge`, `direct:<i>`) or the attack (`attack:<name>`).
    pub via: Option<String>,
    /// The arbiter that answered, if it said.
    pub served: Option<String>,
    /// A release's delete revision, as the arbiter said.
    pub rev: Option<i64>,
    /// The set this operation was one key of (see [`Event::set`]).
    pub set: Option<u64>,
    /// A shared hold's acquire or release (see [`Event::shared`]).
    pub shared: bool,
    /// The semaphore permit granted, released or written under (see [`Event::permit`]).
    pub permit: Option<u32>,
}

impl Op {
    pub fn ok(&self) -> bool {
        matches!(self.done, Some((_, Phase::Ok)))
    }

    pub fn failed(&self) -> bool {
        matches!(self.done, Some((_, Phase::Fail)))
    }

    /// Unknown outcome: `info`, or no completion at all.
    pub fn unknown(&self) -> bool {
        matches!(self.done, None | Some((_, Phase::Info)))
    }

    pub fn returned(&self) -> Option<u64> {
        self.done.map(|(t, _)| t)
    }
}

/// Pairs invocations with completions.
pub fn operations(events: &[Event]) -> Vec<Op> {
    let mut open: std::collections::HashMap<(u32, u64), usize> = Default::default();
    let mut ops: Vec<Op> = Vec::new();
    for e in events {
        match e.ph {
            Phase::Invoke => {
                open.insert((e.c, e.op), ops.len());
                ops.push(Op {
                    client: e.c,
                    kind: e.f,
                    key: e.key.clone(),
                    session: e.session,
                    token: e.token,
                    invoked: e.t,
                    done: None,
                    why: None,
                    via: e.via.clone(),
                    served: None,
                    rev: None,
                    set: e.set,
                    shared: e.shared,
                    permit: e.permit,
                });
            }
            ph => {
                if let Some(i) = open.remove(&(e.c, e.op))
                    && let Some(op) = ops.get_mut(i)
                {
                    op.done = Some((e.t, ph));
                    op.why = e.why.clone();
                    op.served = e.served.clone();
                    op.rev = e.rev;
                    if e.token.is_some() {
                        op.token = e.token;
                    }
                    if e.session.is_some() {
                        op.session = e.session;
                    }
                    if e.permit.is_some() {
                        op.permit = e.permit;
                    }
                }
            }
        }
    }
    ops
}
