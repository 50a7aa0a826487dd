//! Runs one scenario against one client's driver: the processes it names, then its steps
//! in order. Calls go to the drivers; faults and checks are made here (`faults.rs`).

use super::driver::{DriverProc, wait_for};
use super::drivers::Launcher;
use super::scenario::{Identity, Prefixes, ProcessSpec, Scenario, Step, expand};
use anyhow::{Context as _, bail, ensure};
use lock_integration::Stack;
use lock_integration::link::Link;
use lock_integration::pki::SvidFiles;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;
use tokio::time::Instant;

/// How long any single call may take before the driver is called stuck (a hang guard,
/// not a latency assertion).
pub const CALL_PATIENCE: Duration = Duration::from_secs(90);

/// A call sent with `as:` and not yet awaited.
struct Pending {
    process: String,
    id: u64,
    hold: Option<String>,
    key: Option<String>,
}

pub struct Run<'a> {
    pub stack: &'a mut Stack,
    pub launcher: &'a Launcher,
    pub svids: &'a BTreeMap<Identity, SvidFiles>,
    pub prefixes: &'a Prefixes,
    pub pg: Option<&'a tokio_postgres::Client>,
    /// The run's own key segment.
    pub run: String,
    pub logs: PathBuf,
    pub specs: BTreeMap<String, ProcessSpec>,
    pub procs: BTreeMap<String, DriverProc>,
    pub relays: BTreeMap<String, Link>,
    client_proc: HashMap<String, String>,
    instances: HashMap<String, String>,
    hold_proc: HashMap<String, String>,
    pub hold_key: HashMap<String, String>,
    pub tokens: HashMap<String, u64>,
    pending: HashMap<String, Pending>,
    obs_proc: HashMap<String, String>,
    /// When the previous step ended: `fenced` counts from it.
    pub prev_end: Instant,
    starts: HashMap<String, u32>,
}

impl<'a> Run<'a> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        stack: &'a mut Stack,
        launcher: &'a Launcher,
        svids: &'a BTreeMap<Identity, SvidFiles>,
        prefixes: &'a Prefixes,
        pg: Option<&'a tokio_postgres::Client>,
        run: String,
        logs: PathBuf,
        scenario: &Scenario,
    ) -> Self {
        Self {
            stack,
            launcher,
            svids,
            prefixes,
            pg,
            run,
            logs,
            specs: scenario.processes.clone(),
            procs: BTreeMap::new(),
            relays: BTreeMap::new(),
            client_proc: HashMap::new(),
            instances: HashMap::new(),
            hold_proc: HashMap::new(),
            hold_key: HashMap::new(),
            tokens: HashMap::new(),
            pending: HashMap::new(),
            obs_proc: HashMap::new(),
            prev_end: Instant::now(),
            starts: HashMap::new(),
        }
    }

    /// Starts (or starts again) process `name` as its spec says.
    pub fn start(&mut self, name: &str) -> anyhow::Result<()> {
        let spec = self
            .specs
            .get(name)
            .with_context(|| format!("no process `{name}`"))?;
        let svid = &self.svids[&spec.identity];
        let endpoint = if spec.relay {
            if !self.relays.contains_key(name) {
                let edge = self.stack.envoy.listen;
                self.relays.insert(name.to_owned(), Link::start(edge)?);
            }
            format!("https://127.0.0.1:{}", self.relays[name].addr.port())
        } else {
            self.stack.endpoint()
        };
        let mut cmd = self.launcher.command();
        cmd.env("LOCK_ENDPOINT", endpoint)
            .env("LOCK_SVID", &svid.cert)
            .env("LOCK_SVID_KEY", &svid.key)
            .env("LOCK_CA", &svid.ca)
            .env("LOCK_SERVER_ID", lock_integration::pki::ENVOY_ID);
        if let Some(i) = &spec.lock_instance {
            cmd.env("LOCK_INSTANCE", i);
        }
        let n = self.starts.entry(name.to_owned()).or_default();
        *n += 1;
        let stderr = self.logs.join(format!("{name}.{n}.stderr"));
        let proc = DriverProc::spawn(name, cmd, stderr)?;
        self.procs.insert(name.to_owned(), proc);
        Ok(())
    }

    pub fn proc_mut(&mut self, name: &str) -> anyhow::Result<&mut DriverProc> {
        self.procs
            .get_mut(name)
            .with_context(|| format!("process `{name}` is not running"))
    }

    fn proc_of_client(&self, client: &str) -> anyhow::Result<String> {
        self.client_proc
            .get(client)
            .cloned()
            .with_context(|| format!("no client `{client}`"))
    }

    pub fn proc_of_hold(&self, hold: &str) -> anyhow::Result<String> {
        self.hold_proc
            .get(hold)
            .cloned()
            .with_context(|| format!("no hold `{hold}`"))
    }

    pub fn key(&self, k: &str) -> String {
        expand(k, self.prefixes, &self.run)
    }

    /// One step; `Ok` when its checks hold.
    pub async fn step(&mut self, s: &Step) -> anyhow::Result<()> {
        match s.action.as_str() {
            "client" => self.new_client(s).await,
            "acquire" | "acquire_shared" | "acquire_all" | "campaign" => self.acquire(s).await,
            "release" => {
                let hold = s.need(&s.hold, "hold")?.clone();
                let p = self.proc_of_hold(&hold)?;
                self.call_expecting(s, &p, "release", json!({"hold": hold}), None)
                    .await
            }
            "shutdown" => {
                let client = s.need(&s.client, "client")?.clone();
                let p = self.proc_of_client(&client)?;
                self.call_expecting(s, &p, "shutdown", json!({"client": client}), None)
                    .await
            }
            "observe" => {
                let client = s.need(&s.client, "client")?.clone();
                let obs = s.need(&s.obs, "obs")?.clone();
                let key = self.key(s.need(&s.key, "key")?);
                let p = self.proc_of_client(&client)?;
                self.obs_proc.insert(obs.clone(), p.clone());
                let fields = json!({"client": client, "key": key, "obs": obs});
                self.call_expecting(s, &p, "observe", fields, None).await
            }
            "answer" => self.answer(s).await,
            "pending" => {
                let call = s.need(&s.call, "call")?;
                let wait = Duration::from_millis(*s.need(&s.for_ms, "for_ms")?);
                tokio::time::sleep(wait).await;
                let p = self
                    .pending
                    .get(call)
                    .with_context(|| format!("no call `{call}`"))?;
                let (process, id) = (p.process.clone(), p.id);
                if let Some((_, v)) = self.proc_mut(&process)?.answered(id) {
                    bail!("`{call}` was answered already: {v}");
                }
                Ok(())
            }
            "burst" => self.burst(s).await,
            _ => self.check_or_fault(s).await,
        }
    }

    async fn new_client(&mut self, s: &Step) -> anyhow::Result<()> {
        let client = s.need(&s.client, "client")?.clone();
        let p = s.need(&s.process, "process")?.clone();
        if !self.procs.contains_key(&p) {
            self.start(&p)?;
        }
        let mut fields = json!({"client": client});
        if let Some(of) = &s.instance_of {
            let inst = self
                .instances
                .get(of)
                .with_context(|| format!("no instance of `{of}` recorded"))?;
            fields["instance"] = json!(inst);
        }
        let (_, v) = self
            .proc_mut(&p)?
            .call("client", fields, CALL_PATIENCE)
            .await?;
        ensure!(v["ok"] == json!(true), "client `{client}` not made: {v}");
        let inst = v["instance"]
            .as_str()
            .context("no `instance` in the answer")?;
        self.instances.insert(client.clone(), inst.to_owned());
        self.client_proc.insert(client, p);
        Ok(())
    }

    async fn acquire(&mut self, s: &Step) -> anyhow::Result<()> {
        let client = s.need(&s.client, "client")?.clone();
        let hold = s.need(&s.hold, "hold")?.clone();
        let p = self.proc_of_client(&client)?;
        let mut fields = json!({"client": client, "hold": hold, "wait_ms": s.wait_ms.unwrap_or(0)});
        let key = match (&s.key, &s.keys) {
            (Some(k), _) => {
                let k = self.key(k);
                fields["key"] = json!(k);
                k
            }
            (None, Some(ks)) => {
                let ks: Vec<String> = ks.iter().map(|k| self.key(k)).collect();
                fields["keys"] = json!(ks);
                ks.join(",")
            }
            (None, None) => bail!("`{}` needs `key` or `keys`", s.action),
        };
        self.hold_proc.insert(hold.clone(), p.clone());
        self.hold_key.insert(hold.clone(), key.clone());
        if let Some(name) = &s.as_call {
            let id = self.proc_mut(&p)?.send(&s.action, fields).await?;
            let pending = Pending {
                process: p,
                id,
                hold: Some(hold),
                key: Some(key),
            };
            self.pending.insert(name.clone(), pending);
            return Ok(());
        }
        self.call_expecting(s, &p, &s.action.clone(), fields, Some(&hold))
            .await
    }

    /// Sends `op` and checks its answer against the step's `expect` (and `within_ms`).
    async fn call_expecting(
        &mut self,
        s: &Step,
        p: &str,
        op: &str,
        fields: Value,
        hold: Option<&str>,
    ) -> anyhow::Result<()> {
        let sent = Instant::now();
        let (at, v) = self.proc_mut(p)?.call(op, fields, CALL_PATIENCE).await?;
        if let Some(ms) = s.within_ms {
            let took = at - sent;
            ensure!(
                took <= Duration::from_millis(ms),
                "answered in {took:?}, more than {ms} ms: {v}"
            );
        }
        self.check_answer(s.expect.as_deref().unwrap_or("ok"), &v, hold)
    }

    /// `expect` against an answer; a grant's token is recorded for `hold`.
    fn check_answer(&mut self, expect: &str, v: &Value, hold: Option<&str>) -> anyhow::Result<()> {
        let ok = v["ok"] == json!(true);
        match expect {
            "granted" => {
                ensure!(ok, "expected a grant, got {}", refusal(v));
                let token: u64 = v["token"]
                    .as_str()
                    .context("a grant without a decimal-string `token`")?
                    .parse()
                    .context("`token` is not a u64")?;
                if let Some(h) = hold {
                    self.tokens.insert(h.to_owned(), token);
                }
                Ok(())
            }
            "ok" => {
                ensure!(ok, "expected ok, got {}", refusal(v));
                Ok(())
            }
            reason => {
                ensure!(!ok, "expected {reason}, got a success");
                let got = v["reason"].as_str().unwrap_or("");
                ensure!(got == reason, "expected {reason}, got {}", refusal(v));
                Ok(())
            }
        }
    }

    async fn answer(&mut self, s: &Step) -> anyhow::Result<()> {
        let call = s.need(&s.call, "call")?;
        let p = self
            .pending
            .remove(call)
            .with_context(|| format!("no call `{call}`"))?;
        let patience = Duration::from_millis(s.within_ms.unwrap_or(90_000));
        let asked = Instant::now();
        let proc = self.proc_mut(&p.process)?;
        let Some((at, v)) = proc.answer(p.id, patience).await else {
            bail!("`{call}` not answered within {patience:?} of this step");
        };
        if let Some(h) = &s.after_fenced {
            let fenced = self.fenced_at(h).with_context(|| {
                format!("`{call}` answered with no `fenced` event for `{h}` before it")
            })?;
            ensure!(
                fenced < at,
                "`{call}` was answered {:?} before `{h}` was fenced",
                fenced - at
            );
        }
        let _ = (asked, &p.key);
        self.check_answer(s.expect.as_deref().unwrap_or("ok"), &v, p.hold.as_deref())
    }

    /// When the `fenced` event for `hold` arrived, if it has.
    pub fn fenced_at(&self, hold: &str) -> Option<Instant> {
        let p = self.hold_proc.get(hold)?;
        let inbox = self.procs.get(p)?.inbox.lock().ok()?;
        inbox
            .events
            .iter()
            .find(|(_, e)| e["event"] == json!("fenced") && e["hold"] == json!(hold))
            .map(|(at, _)| *at)
    }

    pub async fn wait_fenced(&self, hold: &str, patience: Duration) -> Option<Instant> {
        let p = self.hold_proc.get(hold)?;
        let d = self.procs.get(p)?;
        let h = hold.to_owned();
        wait_for(&d.inbox, &d.said, patience, move |i| {
            i.events
                .iter()
                .find(|(_, e)| e["event"] == json!("fenced") && e["hold"] == json!(h))
                .map(|(at, _)| *at)
        })
        .await
    }

    /// The `observed` events of `obs` so far.
    pub fn observed(&self, obs: &str) -> Vec<Value> {
        let Some(d) = self.obs_proc.get(obs).and_then(|p| self.procs.get(p)) else {
            return Vec::new();
        };
        let Ok(inbox) = d.inbox.lock() else {
            return Vec::new();
        };
        inbox
            .events
            .iter()
            .filter(|(_, e)| e["obs"] == json!(obs))
            .map(|(_, e)| e.clone())
            .collect()
    }

    pub fn obs_driver(&self, obs: &str) -> anyhow::Result<&DriverProc> {
        self.obs_proc
            .get(obs)
            .and_then(|p| self.procs.get(p))
            .with_context(|| format!("no observation `{obs}`"))
    }

    async fn burst(&mut self, s: &Step) -> anyhow::Result<()> {
        let client = s.need(&s.client, "client")?.clone();
        let key = self.key(s.need(&s.key, "key")?);
        let count = *s.need(&s.count, "count")?;
        let some = s.need(&s.expect_some, "expect_some")?.clone();
        let p = self.proc_of_client(&client)?;
        let mut ids = Vec::new();
        for i in 0..count {
            let hold = format!("burst-{i}");
            self.hold_proc.insert(hold.clone(), p.clone());
            let fields =
                json!({"client": client, "key": format!("{key}-{i}"), "hold": hold, "wait_ms": 0});
            ids.push(self.proc_mut(&p)?.send("acquire", fields).await?);
        }
        let mut seen = 0;
        for id in ids {
            let d = self.proc_mut(&p)?;
            let (_, v) = d
                .answer(id, CALL_PATIENCE)
                .await
                .context("a burst call unanswered")?;
            if v["ok"] == json!(true) {
                continue;
            }
            ensure!(
                v["reason"] == json!(some),
                "a burst call refused otherwise than {some}: {}",
                refusal(&v)
            );
            seen += 1;
        }
        ensure!(seen > 0, "none of {count} calls was refused {some}");
        Ok(())
    }

    /// Ends every driver (`exit`, then SIGKILL); returns the notes a report needs.
    pub async fn finish(&mut self) -> String {
        let mut notes = String::new();
        for (name, d) in self.procs.iter_mut() {
            let _ = tokio::time::timeout(
                Duration::from_secs(5),
                d.call("exit", json!({}), Duration::from_secs(5)),
            )
            .await;
            d.kill().await;
            let noise = d.inbox.lock().map(|i| i.noise.clone()).unwrap_or_default();
            if !noise.is_empty() {
                notes.push_str(&format!(
                    "{name} wrote lines that are not JSON: {noise:?}\n"
                ));
            }
        }
        notes
    }

    /// Every driver's stderr, for a failure report.
    pub fn stderr_report(&self) -> String {
        let mut out = String::new();
        if let Ok(dir) = std::fs::read_dir(&self.logs) {
            let mut files: Vec<PathBuf> = dir.filter_map(Result::ok).map(|e| e.path()).collect();
            files.sort();
            for f in files {
                let text = std::fs::read_to_string(&f).unwrap_or_default();
                let tail: String = text
                    .lines()
                    .rev()
                    .take(40)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n");
                out.push_str(&format!("--- {} ---\n{tail}\n", f.display()));
            }
        }
        out
    }
}

/// A refusal as one line for a report.
pub fn refusal(v: &Value) -> String {
    format!(
        "{} ({})",
        v["reason"].as_str().unwrap_or("no reason"),
        v["message"].as_str().unwrap_or("")
    )
}
