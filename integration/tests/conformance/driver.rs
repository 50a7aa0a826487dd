//! One driver process: commands written to its stdin, answers and events read from its
//! stdout by a task that stamps each with the conductor's clock. Killed on drop.

use anyhow::{Context as _, bail};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::Notify;
use tokio::time::Instant;

/// What a driver has said so far.
#[derive(Default)]
pub struct Inbox {
    pub answers: HashMap<u64, (Instant, Value)>,
    pub events: Vec<(Instant, Value)>,
    /// Lines that were not JSON (a driver's bug, kept for the report).
    pub noise: Vec<String>,
    pub closed: bool,
}

pub struct DriverProc {
    pub name: String,
    child: Child,
    stdin: ChildStdin,
    pub inbox: Arc<Mutex<Inbox>>,
    pub said: Arc<Notify>,
    next_id: u64,
}

impl DriverProc {
    pub fn spawn(name: &str, mut cmd: Command, stderr: PathBuf) -> anyhow::Result<Self> {
        let err = std::fs::File::create(&stderr)?;
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting driver {name}: {cmd:?}"))?;
        let stdin = child.stdin.take().context("driver stdin")?;
        let stdout = child.stdout.take().context("driver stdout")?;
        let inbox: Arc<Mutex<Inbox>> = Arc::default();
        let said = Arc::new(Notify::new());
        let (into, wake) = (inbox.clone(), said.clone());
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let at = Instant::now();
                let Ok(mut inbox) = into.lock() else { return };
                match serde_json::from_str::<Value>(&line) {
                    Ok(v) => match v.get("id").and_then(Value::as_u64) {
                        Some(id) => {
                            inbox.answers.insert(id, (at, v));
                        }
                        None => inbox.events.push((at, v)),
                    },
                    Err(_) => inbox.noise.push(line),
                }
                drop(inbox);
                wake.notify_waiters();
            }
            if let Ok(mut inbox) = into.lock() {
                inbox.closed = true;
            }
            wake.notify_waiters();
        });
        Ok(Self {
            name: name.to_owned(),
            child,
            stdin,
            inbox,
            said,
            next_id: 1,
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Sends `op` with `fields`; returns the command's id.
    pub async fn send(&mut self, op: &str, fields: Value) -> anyhow::Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        let mut cmd = match fields {
            Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        cmd.insert("id".into(), json!(id));
        cmd.insert("op".into(), json!(op));
        let mut line = serde_json::to_string(&Value::Object(cmd))?;
        line.push('\n');
        self.stdin
            .write_all(line.as_bytes())
            .await
            .with_context(|| format!("writing to driver {}", self.name))?;
        self.stdin.flush().await?;
        Ok(id)
    }

    /// The answer to `id`, once it comes (None after `patience`).
    pub async fn answer(&self, id: u64, patience: Duration) -> Option<(Instant, Value)> {
        wait_for(&self.inbox, &self.said, patience, |i| {
            i.answers.get(&id).cloned()
        })
        .await
    }

    /// Whether `id` has been answered yet.
    pub fn answered(&self, id: u64) -> Option<(Instant, Value)> {
        self.inbox.lock().ok()?.answers.get(&id).cloned()
    }

    /// Sends a command and waits for its answer.
    pub async fn call(
        &mut self,
        op: &str,
        fields: Value,
        patience: Duration,
    ) -> anyhow::Result<(Instant, Value)> {
        let id = self.send(op, fields).await?;
        match self.answer(id, patience).await {
            Some(a) => Ok(a),
            None => bail!(
                "driver {} did not answer `{op}` within {patience:?}",
                self.name
            ),
        }
    }

    pub fn signal(&self, sig: rustix::process::Signal) -> anyhow::Result<()> {
        let pid = self.pid().context("the driver has exited")?;
        let pid = rustix::process::Pid::from_raw(i32::try_from(pid)?).context("pid 0")?;
        rustix::process::kill_process(pid, sig)?;
        Ok(())
    }

    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }
}

/// Waits until `check` finds something in the inbox, or `patience` passes.
pub async fn wait_for<T>(
    inbox: &Mutex<Inbox>,
    said: &Notify,
    patience: Duration,
    check: impl Fn(&Inbox) -> Option<T>,
) -> Option<T> {
    let until = Instant::now() + patience;
    loop {
        let notified = said.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if let Some(found) = inbox.lock().ok().and_then(|i| check(&i)) {
            return Some(found);
        }
        if tokio::time::timeout_at(until, notified).await.is_err() {
            return inbox.lock().ok().and_then(|i| check(&i));
        }
    }
}
