//! The release gate (ADR-23, issue 7): real etcd (3 members, each in its own network
//! namespace), two arbiters, Envoy with the filter, and worker processes taking locks
//! under injected faults; every operation recorded, then checked per key
//! ([`checker`], semaphores' keys by [`semaphore`]) and for linearizability against a
//! fenced mutex, reader-writer lock or semaphore ([`linearize`]), and by Porcupine beside
//! it ([`porcupine`]).

pub mod checker;
pub mod effects;
pub mod faults;
pub mod history;
pub mod linearize;
pub mod observed;
pub mod observer;
pub mod porcupine;
pub mod refusal;
pub mod register;
pub mod round;
pub mod semaphore;
pub mod shard_checks;
pub mod shards;
pub mod shared_rules;
pub mod siblings;
pub mod soak;
pub mod store_log;
pub mod timeline;
pub mod violation;
pub mod worker;

pub use round::{GateEnv, round, run};

use faults::{Fault, Injected};
use history::{Kind, Phase};
use lock_integration::registry::GATE_TTL;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The attacker's client id (and identity, `gate_id`): granted the gate's prefixes like
/// every client, used by no worker.
pub const ATTACKER: usize = lock_integration::registry::GATE_CLIENTS;

/// The most a run is extended past its duration to reach `min_faults`.
pub const MAX_EXTENSION: Duration = Duration::from_secs(180);

#[derive(Debug, Clone)]
pub struct GateOptions {
    /// How long the workers run at least; faults are injected throughout.
    pub duration: Duration,
    /// Faults to inject however slow the machine: the run is extended (by at most
    /// [`MAX_EXTENSION`]) until this many have been injected, so a slow machine makes the
    /// gate longer, never short of a fault.
    pub min_faults: usize,
    pub workers: usize,
    pub clients_per_worker: usize,
    /// Faults, injected in this order, round after round, `fault_gap` apart.
    pub faults: Vec<Fault>,
    pub fault_gap: Duration,
    /// Deliberate arbiter bugs (`--inject-bug`, debug builds only).
    pub inject_bugs: Vec<String>,
    /// Edge checks switched off (the filter's `unsafeTestSwitches`, debug builds only).
    pub filter_switches: Vec<String>,
    /// Run the attacker (in the first worker): see `worker::attacker`.
    pub attacker: bool,
    /// Follow a key of each generation with Observe, and hold every answer to the store
    /// log (`observer`, `observed`).
    pub observe: bool,
    /// Write to the PostgreSQL reference fence too.
    pub postgres: bool,
    pub direct_percent: u32,
    pub replay_percent: u32,
    /// Share of holds that stall past their session's TTL before writing (see
    /// `WorkerPlan::stall_percent`).
    pub stall_percent: u32,
    /// Share of holds whose session is lost while held (see `WorkerPlan::leak_percent`).
    pub leak_percent: u32,
    pub durable_percent: u32,
    /// Share of rounds that take a set of keys as one (AcquireAll, `worker::set`).
    pub set_percent: u32,
    /// Share of rounds that campaign for the generation's leader key and lead.
    pub election_percent: u32,
    /// Share of rounds on a shared class's key, as a reader or a writer (`worker::shared`).
    pub shared_percent: u32,
    /// Share of rounds on the semaphore class's key, a permit each (`worker::permits`).
    pub sem_percent: u32,
    /// Share of key picks from up to `lookback` generations back (frozen holders' keys).
    pub lookback_percent: u32,
    pub lookback: u32,
    pub keys_per_generation: u32,
    pub generation: Duration,
    /// Search budget per key for the linearizability check.
    pub linearizability_steps: u64,
    /// Where to keep the history and logs (None: a temp folder, kept only on failure).
    pub out_dir: Option<PathBuf>,
    /// Keep the temp folder of a failed run (its evidence). Off for runs meant to fail (an
    /// injected bug): each leaves ~370 MB of etcd data, and a CI disk fills up with them.
    pub keep_failed: bool,
    /// An arbiter the faults never restart (kill, rolling restart), so a soak on one
    /// environment can watch a process that lived through every round (`soak
    /// --long-lived`); it is still frozen, cut off and slowed.
    pub spare_arbiter: Option<usize>,
    pub seed: u64,
}

impl Default for GateOptions {
    fn default() -> Self {
        Self {
            duration: Duration::from_secs(60),
            min_faults: 0,
            workers: 3,
            clients_per_worker: 3,
            faults: faults::default_cycle(),
            fault_gap: Duration::from_secs(2),
            inject_bugs: Vec::new(),
            filter_switches: Vec::new(),
            attacker: true,
            observe: true,
            postgres: true,
            direct_percent: 25,
            replay_percent: 20,
            stall_percent: 2,
            leak_percent: 2,
            durable_percent: 20,
            set_percent: 10,
            election_percent: 10,
            shared_percent: 15,
            sem_percent: 15,
            lookback_percent: 30,
            lookback: 4,
            keys_per_generation: 3,
            generation: Duration::from_secs(2),
            linearizability_steps: 2_000_000,
            out_dir: None,
            keep_failed: true,
            spare_arbiter: None,
            seed: 7,
        }
    }
}

pub struct GateReport {
    pub operations: usize,
    pub by_kind: BTreeMap<(Kind, &'static str), usize>,
    /// Acquires and releases by route (`edge`, `edge-stream`: a `Hold` stream, `direct`).
    pub by_route: BTreeMap<(Kind, String), usize>,
    pub grants: usize,
    /// Holds ended by a handoff: the release's own transaction granted the key to the
    /// queue head (one write for both).
    pub handoffs: usize,
    /// Group commits seen in the store: transactions that wrote two or more holder records,
    /// and the writes they carried (see `StoreTruth::batches`).
    pub batches: usize,
    pub batched_writes: usize,
    /// Writes refused by each fence from a holder whose session the store had already
    /// ended when it wrote (a frozen holder that resumed): the case fencing exists for.
    pub stale_refused: BTreeMap<Kind, usize>,
    /// Replicas (issue 32): grants that followed the holder's sibling's grant of the key,
    /// and LEAKED_HOLD answers that named the client's own possible leak.
    pub sibling_handoffs: usize,
    pub sibling_leaks: usize,
    /// Elections: terms led (grants of a leader key) and the writes made under them.
    pub terms: usize,
    pub leader_writes: usize,
    /// Sets (AcquireAll) granted, and the keys they held.
    pub sets: usize,
    pub set_keys: usize,
    /// Shared holds (reader–writer): readers and writers granted on the shared class's
    /// keys, and from the store, readers granted beside another reader and writers that
    /// marked themselves waiting; reads the register served.
    pub shared_readers: usize,
    pub shared_writers: usize,
    pub readers_overlapping: usize,
    pub writers_marked: usize,
    pub reads_served: usize,
    /// Semaphores: permits granted, HELD answers (every permit held), the most permit
    /// records of one key the store held at once, and writes refused by a permit's fence.
    pub permits_granted: usize,
    pub permits_full: usize,
    pub permits_most: usize,
    pub permit_writes_refused: usize,
    /// The attacker's calls by attack and outcome (`refused <REASON>`, `ok`, `unknown`).
    pub attacks: BTreeMap<(String, String), usize>,
    pub faults: Vec<Injected>,
    /// What each fault kind did in its windows, beside the quiet time (`effects.rs`).
    pub effects: BTreeMap<String, effects::Effect>,
    pub violations: Vec<checker::Violation>,
    pub linearizable: usize,
    pub not_linearizable: Vec<String>,
    pub unchecked: Vec<String>,
    /// The key whose linearizability check took longest, and how long.
    pub slowest_key: Option<(String, Duration)>,
    /// Porcupine's verdicts on the same history against the gate's (`porcupine`).
    pub porcupine: porcupine::Agreement,
    /// Observe answers by change, each held to the store log (`observed`).
    pub observed: BTreeMap<String, usize>,
    pub dir: PathBuf,
    pub elapsed: Duration,
}

impl GateReport {
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
            && self.not_linearizable.is_empty()
            && self.porcupine.disagreements.is_empty()
    }

    /// The printed summary.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        s.push_str(&format!(
            "gate: {} operations in {:.0} s, {} grants ({} by handoff in the release's transaction); {} grant and release writes in {} group commits of two or more; {} faults injected\n",
            self.operations,
            self.elapsed.as_secs_f64(),
            self.grants,
            self.handoffs,
            self.batched_writes,
            self.batches,
            self.faults.len()
        ));
        let mut kinds: BTreeMap<Kind, Vec<String>> = BTreeMap::new();
        for ((k, outcome), n) in &self.by_kind {
            kinds.entry(*k).or_default().push(format!("{outcome} {n}"));
        }
        for (k, parts) in kinds {
            s.push_str(&format!("  {k:?}: {}\n", parts.join(", ")));
        }
        let mut per_fault: BTreeMap<&str, usize> = BTreeMap::new();
        for f in &self.faults {
            *per_fault.entry(f.fault.name()).or_default() += 1;
        }
        let routes: Vec<String> = self
            .by_route
            .iter()
            .map(|((k, route), n)| format!("{k:?} via {route} {n}"))
            .collect();
        s.push_str(&format!(
            "  routes (edge-stream: acquire and release on one Hold stream): {}\n",
            routes.join(", ")
        ));
        let list: Vec<String> = per_fault.iter().map(|(k, n)| format!("{k} x{n}")).collect();
        s.push_str(&format!("  faults: {}\n", list.join(", ")));
        if !self.effects.is_empty() {
            s.push_str("  what each fault did (its windows and one TTL after; refusals but a held key's):\n");
            for (kind, e) in &self.effects {
                s.push_str(&format!("    {kind:>16}: {}\n", e.line()));
            }
        }
        if !self.observed.is_empty() {
            let parts: Vec<String> = self
                .observed
                .iter()
                .map(|(c, n)| format!("{c} {n}"))
                .collect();
            s.push_str(&format!(
                "  observe (every key followed through the edge, each answer held to the store log): {}\n",
                parts.join(", ")
            ));
        }
        s.push_str(&format!(
            "  elections (a leader key per generation; the term is the token): {} terms, {} writes under them\n",
            self.terms, self.leader_writes
        ));
        s.push_str(&format!(
            "  sets (AcquireAll, each key checked as its own hold, one token for all): {} granted, {} keys\n",
            self.sets, self.set_keys
        ));
        s.push_str(&format!(
            "  shared holds (reader-writer): {} readers ({} beside another reader), {} writers ({} marked waiting, stopping new readers), {} reads served\n",
            self.shared_readers,
            self.readers_overlapping,
            self.shared_writers,
            self.writers_marked,
            self.reads_served
        ));
        s.push_str(&format!(
            "  semaphores ({} permits per key, each written under on its own fence): {} permits granted, {} HELD (every permit held), at most {} held at once in the store, {} writes refused by a permit's fence\n",
            lock_integration::registry::GATE_SEM_PERMITS,
            self.permits_granted,
            self.permits_full,
            self.permits_most,
            self.permit_writes_refused
        ));
        s.push_str(&format!(
            "  replicas (clients 2k-1, 2k: one identity, two instances): {} sibling handoffs, {} LEAKED_HOLD answers, each to the client's own earlier hold\n",
            self.sibling_handoffs, self.sibling_leaks
        ));
        let stale: Vec<String> = [Kind::Write, Kind::PgWrite, Kind::Read]
            .iter()
            .map(|k| format!("{k:?} {}", self.stale_refused.get(k).copied().unwrap_or(0)))
            .collect();
        s.push_str(&format!(
            "  stale holder refused (its session ended before it wrote or read): {}\n",
            stale.join(", ")
        ));
        if !self.attacks.is_empty() {
            s.push_str(
                "  attacker (on others: must be refused; on its own keys: the grant is its own):\n",
            );
            let mut per: BTreeMap<&str, Vec<String>> = BTreeMap::new();
            for ((name, outcome), n) in &self.attacks {
                per.entry(name).or_default().push(format!("{outcome} {n}"));
            }
            for (name, parts) in per {
                s.push_str(&format!("    {name}: {}\n", parts.join(", ")));
            }
        }
        s.push_str(&format!(
            "  linearizability (per key): {} linearizable, {} not, {} unchecked (budget)\n",
            self.linearizable,
            self.not_linearizable.len(),
            self.unchecked.len()
        ));
        if !self.unchecked.is_empty() {
            s.push_str(&format!(
                "    unchecked (covered by the per-key checks only): {}\n",
                self.unchecked.join(", ")
            ));
        }
        if let Some((key, took)) = &self.slowest_key {
            s.push_str(&format!(
                "    slowest key: {key} in {:.1} ms\n",
                took.as_secs_f64() * 1e3
            ));
        }
        s.push_str(&format!("  violations: {}\n", self.violations.len()));
        for v in self.violations.iter().take(20) {
            s.push_str(&format!("    {v}\n"));
        }
        for k in self.not_linearizable.iter().take(10) {
            s.push_str(&format!(
                "    [linearizability] {k}: no sequential {} order fits\n",
                model_name(k)
            ));
        }
        for d in self.porcupine.disagreements.iter().take(10) {
            s.push_str(&format!("    {d}\n"));
        }
        if !self.passed() {
            s.push_str(&format!("  history: {}\n", self.dir.display()));
        }
        s
    }
}

/// The sequential model `key` is searched against (`linearize`).
fn model_name(key: &str) -> &'static str {
    if semaphore::permits(key).is_some() {
        "fenced-semaphore"
    } else {
        "fenced-mutex"
    }
}

/// A recorded history folder's operations (every `*.jsonl` but the store's) and the store
/// log (`store.jsonl`).
pub fn read_history(
    history_dir: &std::path::Path,
) -> anyhow::Result<(Vec<history::Op>, Vec<store_log::StoreEvent>)> {
    let mut files = Vec::new();
    let mut store_events = Vec::new();
    for entry in std::fs::read_dir(history_dir)? {
        let p = entry?.path();
        match p.file_name().and_then(|n| n.to_str()) {
            Some("store.jsonl") => {
                for line in std::fs::read_to_string(&p)?.lines() {
                    store_events.push(serde_json::from_str::<store_log::StoreEvent>(line)?);
                }
            }
            Some(n) if n.ends_with(".jsonl") => files.push(p),
            _ => {}
        }
    }
    Ok((history::operations(&history::read(&files)?), store_events))
}

/// Checks a recorded history folder (`worker-*.jsonl`, `driver.jsonl`, `store.jsonl`):
/// what `gate run` does after the run, and `gate check` on a kept folder.
pub fn check_history(history_dir: &std::path::Path, steps: u64) -> anyhow::Result<GateReport> {
    let started = Instant::now();
    let (ops, store_events) = read_history(history_dir)?;
    let mut truth = store_log::StoreTruth::from_events(&store_events);
    // A soak round's log starts mid-store: the epochs before it are counted from here.
    if let Ok(text) = std::fs::read_to_string(history_dir.join(round::STORE_START)) {
        let start: store_log::StoreStart = serde_json::from_str(&text)?;
        truth.epochs_before = start.epoch;
        truth.starts_mid_store = true;
    }
    let mut violations = checker::check(&ops, &truth);
    let replicas = siblings::check(&ops);
    violations.extend(replicas.violations.iter().cloned());
    let mut observed = BTreeMap::new();
    if let Some(seen) = observer::read(&history_dir.join("observe.jsonl"))? {
        violations.extend(observed::check(&seen, &store_events));
        for s in &seen {
            *observed.entry(s.change.clone()).or_insert(0) += 1;
        }
    }
    let verdicts = linearize::check_all(&ops, &truth, steps);
    let porcupine = porcupine::check(history_dir, &verdicts, &violations)?;
    let rw = shared_rules::replay(&truth.rw_events);
    let effects = fault_effects(history_dir, &ops, &truth);
    let mut by_kind = BTreeMap::new();
    for op in &ops {
        let outcome = match op.done {
            Some((_, Phase::Ok)) => "ok",
            Some((_, Phase::Fail)) => "fail",
            _ => "unknown",
        };
        *by_kind.entry((op.kind, outcome)).or_insert(0) += 1;
    }
    let mut by_route = BTreeMap::new();
    for op in ops
        .iter()
        .filter(|op| matches!(op.kind, Kind::Acquire | Kind::Release))
    {
        let route = match op.via.as_deref() {
            Some(v) if v.starts_with("direct") => "direct",
            Some(v) if v.starts_with("attack") => continue,
            Some(v) => v,
            None => continue,
        };
        *by_route.entry((op.kind, route.to_owned())).or_insert(0) += 1;
    }
    let mut stale_refused = BTreeMap::new();
    for op in &ops {
        let ended = op
            .session
            .and_then(|s| truth.session_end_seen.get(&s))
            .is_some_and(|seen| *seen < op.invoked);
        if matches!(op.kind, Kind::Write | Kind::PgWrite | Kind::Read) && op.failed() && ended {
            *stale_refused.entry(op.kind).or_insert(0) += 1;
        }
    }
    let mut attacks = BTreeMap::new();
    for op in &ops {
        let Some(name) = op.via.as_deref().and_then(|v| v.strip_prefix("attack:")) else {
            continue;
        };
        let outcome = match op.done {
            Some((_, Phase::Ok)) => "ok".to_owned(),
            Some((_, Phase::Fail)) => {
                let why = op.why.as_deref().unwrap_or("");
                format!("refused {}", why.split(" (").next().unwrap_or(why))
            }
            _ => "unknown".to_owned(),
        };
        *attacks.entry((name.to_owned(), outcome)).or_insert(0) += 1;
    }
    let report = GateReport {
        sibling_handoffs: replicas.handoffs,
        sibling_leaks: replicas.leaks,
        terms: ops
            .iter()
            .filter(|o| o.kind == Kind::Acquire && o.ok() && o.via.as_deref() == Some("edge-elect"))
            .count(),
        leader_writes: ops
            .iter()
            .filter(|o| {
                o.kind == Kind::Write
                    && o.ok()
                    && o.key.as_deref().is_some_and(|k| k.ends_with("/leader"))
            })
            .count(),
        sets: ops
            .iter()
            .filter(|o| o.kind == Kind::Acquire && o.ok() && o.set.is_some())
            .filter_map(|o| o.set.map(|s| (o.client, s)))
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        set_keys: ops
            .iter()
            .filter(|o| o.kind == Kind::Acquire && o.ok() && o.set.is_some())
            .count(),
        shared_readers: ops
            .iter()
            .filter(|o| o.kind == Kind::Acquire && o.ok() && o.shared)
            .count(),
        shared_writers: ops
            .iter()
            .filter(|o| o.kind == Kind::Acquire && o.ok() && !o.shared)
            .filter(|o| {
                o.key
                    .as_deref()
                    .is_some_and(|k| k.starts_with(lock_integration::registry::SHARED_PREFIX))
            })
            .count(),
        readers_overlapping: rw.shared_overlapping,
        writers_marked: rw.marks_made,
        reads_served: ops
            .iter()
            .filter(|o| o.kind == Kind::Read && o.ok())
            .count(),
        permits_granted: ops
            .iter()
            .filter(|o| o.kind == Kind::Acquire && o.ok() && o.permit.is_some())
            .count(),
        permits_full: ops
            .iter()
            .filter(|o| o.kind == Kind::Acquire && o.why.as_deref() == Some("HELD"))
            .filter(|o| o.key.as_deref().and_then(semaphore::permits).is_some())
            .count(),
        permits_most: semaphore::most_at_once(&truth),
        permit_writes_refused: ops
            .iter()
            .filter(|o| matches!(o.kind, Kind::Write | Kind::PgWrite))
            .filter(|o| o.permit.is_some() && o.failed())
            .count(),
        operations: ops.len(),
        stale_refused,
        attacks,
        handoffs: truth.handed_off.len(),
        batches: truth.batches,
        batched_writes: truth.batched_writes,
        grants: ops
            .iter()
            .filter(|o| o.kind == Kind::Acquire && o.ok())
            .count(),
        by_kind,
        by_route,
        faults: Vec::new(),
        effects,
        violations,
        linearizable: verdicts
            .values()
            .filter(|(v, _)| *v == linearize::Verdict::Linearizable)
            .count(),
        not_linearizable: verdicts
            .iter()
            .filter(|(_, (v, _))| *v == linearize::Verdict::NotLinearizable)
            .map(|(k, _)| k.clone())
            .collect(),
        unchecked: verdicts
            .iter()
            .filter(|(_, (v, _))| *v == linearize::Verdict::Unchecked)
            .map(|(k, _)| k.clone())
            .collect(),
        slowest_key: verdicts
            .iter()
            .max_by_key(|(_, (_, took))| *took)
            .map(|(k, (_, took))| (k.clone(), *took)),
        porcupine,
        observed,
        dir: history_dir.to_path_buf(),
        elapsed: started.elapsed(),
    };
    Ok(report)
}

/// [`effects::measure`] over the run's fault windows (`faults.json`, absent for a run
/// without faults) from the first operation to the last acquire asked for (after it the
/// workers stop and close their sessions, which is not a fault's doing).
fn fault_effects(
    history_dir: &std::path::Path,
    ops: &[history::Op],
    truth: &store_log::StoreTruth,
) -> BTreeMap<String, effects::Effect> {
    let spans: Vec<timeline::FaultSpan> = std::fs::read_to_string(history_dir.join("faults.json"))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default();
    let windows: Vec<effects::Window> = spans
        .into_iter()
        .map(|f| effects::Window {
            kind: f.name,
            from: f.from,
            to: f.to,
        })
        .collect();
    let start = ops.iter().map(|o| o.invoked).min().unwrap_or(0);
    let end = ops
        .iter()
        .filter(|o| o.kind == history::Kind::Acquire)
        .map(|o| o.invoked)
        .max()
        .unwrap_or(0);
    effects::measure(
        ops,
        truth,
        &windows,
        Duration::from_secs(u64::from(GATE_TTL)),
        (start, end),
    )
}

/// Writes `timeline-<key>.html` into `history_dir` for every key a check failed on;
/// returns their paths.
pub fn write_timelines(
    history_dir: &std::path::Path,
    report: &GateReport,
) -> anyhow::Result<Vec<PathBuf>> {
    let mut findings: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for v in &report.violations {
        findings
            .entry(v.key.clone())
            .or_default()
            .push(format!("[{}] {}", v.check, v.detail));
    }
    for k in &report.not_linearizable {
        findings.entry(k.clone()).or_default().push(format!(
            "[linearizability] no sequential {} order fits",
            model_name(k)
        ));
    }
    for d in &report.porcupine.disagreements {
        findings
            .entry(d.key.clone())
            .or_default()
            .push(d.to_string());
    }
    if findings.is_empty() {
        return Ok(Vec::new());
    }
    let (ops, store_events) = read_history(history_dir)?;
    let faults: Vec<timeline::FaultSpan> = std::fs::read_to_string(history_dir.join("faults.json"))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default();
    let mut written = Vec::new();
    for (key, found) in findings {
        let key_ops: Vec<&history::Op> = ops
            .iter()
            .filter(|o| o.key.as_deref() == Some(key.as_str()))
            .collect();
        let holder = format!("{}{key}", lock_store::layout::HOLDER_PREFIX);
        // A semaphore's records are its permits'.
        let key_store: Vec<&store_log::StoreEvent> = store_events
            .iter()
            .filter(|e| {
                e.key == holder
                    || store_log::permit_of(&e.key).is_some_and(|(k, _)| k == key.as_str())
            })
            .collect();
        let page = timeline::render(&key, &key_ops, &key_store, &faults, &found);
        let path = history_dir.join(format!("timeline-{}.html", key.replace('/', "_")));
        std::fs::write(&path, page)?;
        written.push(path);
    }
    Ok(written)
}
