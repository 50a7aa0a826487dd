//! The gate across shards (issue 24): a coord etcd cluster and entity shards `e1`, `e2`,
//! two arbiters with `--shards`, workers straight at the arbiters (as the edge forwards:
//! identity and key headers) taking and releasing keys of one namespace, and shard moves
//! as the faults: `lockctl shards add e3` (about a third of the keys move to the new
//! shard), then `lockctl shards move orders --to e3` (the rest follow). Every operation is
//! recorded (`history.rs`'s format) and the history is checked per key ([`check`]):
//!
//! - one holder: no grant returns while another grant of the key is still held (its
//!   release not yet sent) — two clusters holding a key at once shows up here;
//! - tokens rise: each grant's token is above the key's previous one, across the moves;
//! - nothing lost: when the workers stop, no hold is left on any cluster;
//! - moves end: no MOVING answer to an Acquire that began and ended outside every move;
//! - and, per cluster against that cluster's own store log, the main gate's per-key checks
//!   and its linearizability search (`shard_checks.rs`);
//! - across clusters: no two clusters ever serve one epoch (`shard_checks::epochs_apart`),
//!   over every cluster's store log (the coord cluster's too) and every grant.
//!
//! Once the keys have left e1 and e2, both shards' epochs are advanced through the
//! operators' two-person path (lock-admin's own filing and approval code, given the coord
//! cluster), under the load that goes on at e3: each new epoch must come from the coord
//! cluster's allocator, above every epoch any cluster has had.
//!
//! With `inject_bug`, a deliberate bug the checks must catch:
//! - `shard-fence-off`: the second arbiter runs `--inject-bug shard-fence-off` (it keeps the
//!   map it started with and grants without the shard's fence);
//! - `advance-without-coord`: lock-admin's advances take E+1 on their own shard (the rule
//!   before epochs came from the coord cluster on every path): e1 2 -> 3 is e2's epoch.
//!
//! With `faults` (`make gate`; issue 34), each move runs under faults: the add with shard
//! `e1`'s etcd frozen (SIGSTOP) for 2 s and the coord cluster's etcd (its leader: it is
//! the only member) killed and restarted, the pin with arbiter-0 frozen for 3 s, so it
//! resumes mid-move holding the map it had, arbiter-1 killed and restarted, and `e3` (the
//! keys' destination; its only member, so its leader) partitioned from the arbiters and
//! lockctl for 3 s through the relay its map address points at; a move a
//! fault made fail is run again (the same command finishes a half-done move). The summary counts what each fault did to the
//! workers' calls. Workers close their sessions when they stop, as a process that exits
//! does, so a grant whose answer a fault lost leaves no hold behind.
//!
//! What this gate does not do (the main gate does, on one cluster): link faults other than
//! that one partition. Sessions live 30 s (the dev class's TTL) and are replaced
//! every 15 s, so no hold here ends by expiry, no move here needs an epoch advance, and the
//! advances end no hold (the advanced shards hold no key by then).

mod worker;

use crate::history::{self, Kind, Recorder, mono_ns};
use crate::shard_checks;
use crate::store_log::StoreWatcher;
use lock_config::FencingToken;
use lock_integration::arbiter::Arbiter;
use lock_integration::etcd::Etcd;
use lock_integration::stack::lockctl_etcd;
use lock_integration::{Stack, StackOptions};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use worker::{Rpc, Shared, identity_of};

#[derive(Debug, Clone)]
pub struct ShardGateOptions {
    /// Load before the first move, between the moves and after the last, each.
    pub phase: Duration,
    pub workers: usize,
    pub keys: usize,
    /// A deliberate bug the checks must catch (debug builds).
    pub inject_bug: Option<ShardBug>,
    /// Keep the history and logs here (None: a temp folder, kept only if the run failed).
    pub out_dir: Option<PathBuf>,
    /// A fault during each move (`make gate`); off in `make test`'s short run.
    pub faults: bool,
}

impl Default for ShardGateOptions {
    fn default() -> Self {
        Self {
            phase: Duration::from_secs(4),
            workers: 6,
            keys: 40,
            inject_bug: None,
            out_dir: None,
            faults: false,
        }
    }
}

/// The shard gate's deliberate bugs (debug builds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardBug {
    /// The second arbiter grants without the shard fence (`--inject-bug shard-fence-off`).
    ShardFenceOff,
    /// lock-admin's two-person advance takes E+1 on its own shard
    /// (`lock_store::bugs::Bug::AdvanceWithoutCoord`).
    AdvanceWithoutCoord,
}

impl std::str::FromStr for ShardBug {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "shard-fence-off" => Ok(ShardBug::ShardFenceOff),
            "advance-without-coord" => Ok(ShardBug::AdvanceWithoutCoord),
            _ => Err(format!(
                "unknown shard gate bug {s:?} (shard-fence-off, advance-without-coord)"
            )),
        }
    }
}

#[derive(Debug, Default)]
pub struct ShardGateReport {
    pub operations: usize,
    pub grants: usize,
    pub grants_by_epoch: BTreeMap<u16, usize>,
    /// Each move's `lockctl` summary line (or its failure).
    pub moves: Vec<String>,
    /// Each two-person epoch advance of a shard the keys left: from, to (or its failure).
    pub advances: Vec<String>,
    pub moves_ok: bool,
    pub moving_answers: usize,
    pub sessions_replaced: usize,
    /// Each fault, and what the workers' calls met while it lasted (and 2 s after).
    pub faults: Vec<String>,
    pub violations: Vec<String>,
    pub history: PathBuf,
    /// The run had `--inject-bug`: meant to fail, its history is not kept.
    pub inject_bug: bool,
    /// The main gate's checks per cluster (`shard_checks.rs`), in one line.
    pub per_cluster: String,
}

impl ShardGateReport {
    pub fn passed(&self) -> bool {
        self.violations.is_empty() && self.moves_ok
    }
}

/// The history, checked per key. Pure: the recorded operations in, the violations out.
/// An acquire's hold runs from its `ok` to the invocation of the release of its token by
/// the same client (or to the end of the history, if none was sent).
pub fn check(ops: &[history::Op]) -> Vec<String> {
    let mut grants: BTreeMap<&str, Vec<(u64, u64, u64)>> = BTreeMap::new();
    let releases: HashMap<(u32, u64), u64> = ops
        .iter()
        .filter(|o| o.kind == Kind::Release)
        .filter_map(|o| Some(((o.client, o.token?), o.invoked)))
        .collect();
    // The same grant answered twice is one hold: a client whose release's answer was lost
    // asks again with its session and is given its grant back (same token), as the
    // arbiter promises (found with a frozen arbiter: flagged as two holders).
    let mut answered = std::collections::HashSet::new();
    for o in ops.iter().filter(|o| o.kind == Kind::Acquire && o.ok()) {
        let (Some(key), Some(token), Some(at)) = (o.key.as_deref(), o.token, o.returned()) else {
            continue;
        };
        if !answered.insert((key, o.client, token)) {
            continue;
        }
        let until = releases
            .get(&(o.client, token))
            .copied()
            .unwrap_or(u64::MAX);
        grants.entry(key).or_default().push((at, until, token));
    }
    let mut out = Vec::new();
    for (key, mut g) in grants {
        g.sort_unstable();
        for pair in g.windows(2) {
            let ((_, until, t1), (at2, _, t2)) = (pair[0], pair[1]);
            if at2 < until {
                out.push(format!("{key}: granted again while held (two holders)"));
            }
            if t2 <= t1 {
                let e = |t: u64| FencingToken::from_u64(t).map_or(0, |t| t.epoch());
                out.push(format!(
                    "{key}: token went back (epoch {} -> epoch {})",
                    e(t1),
                    e(t2)
                ));
            }
        }
    }
    out
}

/// The dev registry (the workers' namespace `orders` is `tier: entity`, the default).
fn registry() -> PathBuf {
    lock_integration::paths::dev_registry()
}

/// Runs a move (`lockctl shards ARGS` on the coord cluster) inside a recorded window.
async fn shard_move(stack: &Stack, shared: &Shared, args: Vec<String>) -> (bool, String) {
    let i = shared.windows.lock().map_or(0, |mut w| {
        w.push((mono_ns(), 0));
        w.len() - 1
    });
    let coord = stack.etcd_urls();
    let pki = stack.etcd.pki.clone();
    let out = tokio::task::spawn_blocking(move || {
        let mut all: Vec<&str> = vec!["shards"];
        all.extend(args.iter().map(String::as_str));
        all.extend(["--etcd", &coord, "--wait", "30"]);
        lockctl_etcd(&all, &pki, "operator")
    })
    .await;
    if let Ok(mut w) = shared.windows.lock()
        && let Some(win) = w.get_mut(i)
    {
        win.1 = mono_ns();
    }
    match out {
        Ok(Ok(o)) => {
            let text = String::from_utf8_lossy(&o.stdout).to_string()
                + &String::from_utf8_lossy(&o.stderr);
            let line = text
                .lines()
                .find(|l| l.starts_with("moved:") || l.starts_with("lockctl:"))
                .unwrap_or(text.trim())
                .to_owned();
            (o.status.success(), line)
        }
        Ok(Err(e)) => (false, e.to_string()),
        Err(e) => (false, e.to_string()),
    }
}

/// A fault run beside a move: it starts 200 ms into the move (the fences are being
/// written) and freezes `pid` for `hold`. Returns its window.
async fn freeze(name: &str, pid: Option<u32>, hold: Duration) -> (String, u64, u64) {
    tokio::time::sleep(Duration::from_millis(200)).await;
    let from = mono_ns();
    let signal = |sig: &str| {
        if let Some(pid) = pid {
            let _ = std::process::Command::new("kill")
                .args([sig, &pid.to_string()])
                .status();
        }
    };
    signal("-STOP");
    tokio::time::sleep(hold).await;
    signal("-CONT");
    (name.to_owned(), from, mono_ns())
}

/// A partition beside a move: 50 ms into it (before the move's writes reach the cluster
/// behind `link`), every connection through `link` is cut both ways (bytes held, nothing
/// reset) for 3 s, then healed. Returns its window.
async fn partition(name: &str, link: &lock_integration::link::Link) -> (String, u64, u64) {
    use lock_integration::link::{Lane, Shape};
    tokio::time::sleep(Duration::from_millis(50)).await;
    let from = mono_ns();
    link.set(Shape::both(Lane::cut()));
    tokio::time::sleep(Duration::from_secs(3)).await;
    link.heal();
    (name.to_owned(), from, mono_ns())
}

/// A kill beside a move: 500 ms into it, `pid` gets SIGKILL (the caller restarts it and
/// closes the window). Returns the fault's name and when it began.
async fn kill_after(name: &str, pid: Option<u32>) -> (String, u64) {
    tokio::time::sleep(Duration::from_millis(500)).await;
    let from = mono_ns();
    if let Some(pid) = pid {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    (name.to_owned(), from)
}

/// What the workers' calls met in a fault's window (and 2 s after, while it recovers):
/// calls stalled over a second, unknown outcomes and refusals, by kind. Pure.
pub fn fault_effect(ops: &[history::Op], from: u64, to: u64) -> String {
    let until = to + 2_000_000_000;
    let mut by: BTreeMap<String, usize> = BTreeMap::new();
    // In flight at any time in the window: a call sent before the freeze waits through it.
    let during = |o: &&history::Op| o.invoked <= until && o.returned().is_none_or(|r| r >= from);
    for o in ops.iter().filter(during) {
        // A frozen member or arbiter shows first as calls that wait on it.
        if o.returned()
            .is_some_and(|r| r.saturating_sub(o.invoked) > 1_000_000_000)
        {
            *by.entry("stalled > 1 s".into()).or_default() += 1;
        }
        let what = if o.unknown() {
            "unknown".to_owned()
        } else if o.failed() {
            o.why.clone().unwrap_or_default()
        } else {
            continue;
        };
        *by.entry(what).or_default() += 1;
    }
    if by.is_empty() {
        return "no call refused or lost".into();
    }
    by.iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub async fn run(opts: ShardGateOptions) -> anyhow::Result<ShardGateReport> {
    let tmp = tempfile::Builder::new()
        .prefix("lock-shard-gate-")
        .tempdir()?;
    let dir = match &opts.out_dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => tmp.path().to_path_buf(),
    };
    let mut stack = Stack::start(StackOptions {
        registry: registry(),
        entity_shards: 2,
        keep_dir: Some(dir.join("stack")),
        ..Default::default()
    })
    .await?;
    // Each entity cluster's store log, from its first revision (`shard_checks.rs`).
    let root = stack.etcd.pki.tls("root")?;
    let mut watchers: Vec<(String, StoreWatcher)> = stack
        .shards
        .iter()
        .map(|c| {
            let w = StoreWatcher::start(vec![c.client_url.clone()], root.clone());
            (c.name.clone(), w)
        })
        .collect();
    // The coord cluster's log: its epoch records, for the check across clusters only.
    let coord_watcher = StoreWatcher::start(vec![stack.etcd.client_url.clone()], root.clone());
    let e3 = Etcd::start_sharing(&stack.dir, "e3", stack.etcd.pki.clone())?;
    watchers.push((
        e3.name.clone(),
        StoreWatcher::start(vec![e3.client_url.clone()], root.clone()),
    ));
    // Everyone but the store watcher reaches e3 through a relay (its address is the one the
    // shard map names), so that its leader (its only member) can be partitioned from the
    // arbiters and lockctl during a move while it runs on.
    let e3_link = lock_integration::link::Link::start(e3.client_addr)?;
    let e3_url = format!("https://{}", e3_link.addr);
    // A new cluster's first epoch is a bootstrap step, root's (ADR-03: the operator who
    // adds the shard may not write /sys/epoch); the add itself is the operator's.
    let coord = stack.etcd_urls();
    let init = lockctl_etcd(
        &["epoch", "init", "--coord", &coord, "--etcd", &e3.client_url],
        &stack.etcd.pki,
        "root",
    )?;
    anyhow::ensure!(
        init.status.success(),
        "lockctl epoch init --coord on e3: {}",
        String::from_utf8_lossy(&init.stderr)
    );
    let buggy = if opts.inject_bug == Some(ShardBug::ShardFenceOff) {
        Some(Arbiter::start_with(
            &stack.dir,
            "arbiter-bug",
            &stack.etcd_access(),
            &registry(),
            &stack.pki,
            &["--shards", "--inject-bug", "shard-fence-off"],
        )?)
    } else {
        None
    };
    let arbiters: Vec<&Arbiter> = match &buggy {
        Some(b) => vec![&stack.arbiters[0], b],
        None => stack.arbiters.iter().collect(),
    };
    let history = dir.join("history.jsonl");
    let shared = Arc::new(Shared {
        rec: Recorder::create(&history)?,
        op: AtomicU64::new(0),
        stop: Mutex::new(Instant::now() + opts.phase * 3 + Duration::from_secs(120)),
        windows: Arc::default(),
        moving_outside: AtomicU64::new(0),
        moving: AtomicU64::new(0),
        replaced: AtomicU64::new(0),
    });
    let keys: Arc<Vec<String>> =
        Arc::new((0..opts.keys).map(|i| format!("orders/k{i}/x")).collect());
    let mut tasks = Vec::new();
    for c in 0..opts.workers {
        let a = arbiters[c % arbiters.len()];
        let channel = lock_integration::arbiter_channel(
            a.addr,
            Some(&stack.pki.edge_svid()),
            &stack.pki.bundle(),
        )?;
        let c = u32::try_from(c)?;
        tasks.push(tokio::spawn(worker::run(
            c,
            Rpc::new(channel),
            keys.clone(),
            shared.clone(),
        )));
    }
    let mut report = ShardGateReport {
        history: history.clone(),
        inject_bug: opts.inject_bug.is_some(),
        moves_ok: true,
        ..Default::default()
    };
    let frozen = [
        (
            "froze e1's etcd 2 s during the add",
            stack.shards[0].proc.pid(),
            2,
        ),
        (
            "froze arbiter-0 3 s during the pin",
            stack.arbiters[0].proc.pid(),
            3,
        ),
    ];
    let mut windows = Vec::new();
    tokio::time::sleep(opts.phase).await;
    for (i, args) in [
        vec!["add".to_owned(), format!("e3={e3_url}")],
        vec![
            "move".to_owned(),
            "orders".into(),
            "--to".into(),
            "e3".into(),
        ],
    ]
    .into_iter()
    .enumerate()
    {
        let fault = async {
            match frozen.get(i).filter(|_| opts.faults) {
                Some((name, pid, secs)) => {
                    Some(freeze(name, *pid, Duration::from_secs(*secs)).await)
                }
                None => None,
            }
        };
        // And a kill beside the freeze: the coord cluster's etcd (its only member, so its
        // leader) during the add, arbiter-1 during the pin; restarted once the move's
        // first try returns.
        let killed = [
            (
                "killed the coord's etcd during the add",
                stack.etcd.proc.pid(),
            ),
            (
                "killed arbiter-1 during the pin",
                stack.arbiters[1].proc.pid(),
            ),
        ];
        let kill = async {
            match killed.get(i).filter(|_| opts.faults) {
                Some((name, pid)) => Some(kill_after(name, *pid).await),
                None => None,
            }
        };
        // And during the pin, e3 (the keys' destination) cut off both ways for 3 s.
        let cut = async {
            if i == 1 && opts.faults {
                Some(partition("partitioned e3's leader 3 s during the pin", &e3_link).await)
            } else {
                None
            }
        };
        let ((mut ok, mut line), window, kill, cut) =
            tokio::join!(shard_move(&stack, &shared, args.clone()), fault, kill, cut);
        windows.extend(window);
        windows.extend(cut);
        if let Some((name, from)) = kill {
            let restarted = match i {
                0 => {
                    tokio::task::block_in_place(|| stack.etcd.restart())?;
                    stack.etcd.client().await.map(drop)
                }
                _ => tokio::task::block_in_place(|| stack.arbiters[1].restart()),
            };
            restarted.map_err(|e| anyhow::anyhow!("{name}: the restart failed: {e:#}"))?;
            windows.push((name, from, mono_ns()));
        }
        // A move a fault made fail is finished by the same command (bounded).
        for _ in 0..3 {
            if ok || !opts.faults {
                break;
            }
            report.moves.push(format!("{line} (run again)"));
            (ok, line) = shard_move(&stack, &shared, args.clone()).await;
        }
        report.moves_ok &= ok;
        report.moves.push(line);
        // The keys have left e1 and e2: both advanced, through the two-person path, while
        // the load goes on at e3. Not after a failed move: the advance would end holds the
        // one-holder check counts as live.
        if i == 1 && report.moves_ok {
            let old_rule = opts.inject_bug == Some(ShardBug::AdvanceWithoutCoord);
            for shard in &stack.shards {
                let (ok, line) = advance(&stack, shard, old_rule).await?;
                if !ok {
                    report.violations.push(line.clone());
                }
                report.advances.push(line);
            }
        }
        tokio::time::sleep(opts.phase).await;
    }
    if let Ok(mut s) = shared.stop.lock() {
        *s = Instant::now();
    }
    for t in tasks {
        t.await?;
    }
    let ops = history::operations(&history::read(std::slice::from_ref(&history))?);
    report.operations = ops.len();
    report.faults = windows
        .iter()
        .map(|(name, from, to)| format!("{name}: {}", fault_effect(&ops, *from, *to)))
        .collect();
    for o in ops.iter().filter(|o| o.kind == Kind::Acquire && o.ok()) {
        report.grants += 1;
        if let Some(t) = o.token.and_then(|t| FencingToken::from_u64(t).ok()) {
            *report.grants_by_epoch.entry(t.epoch()).or_default() += 1;
        }
    }
    report.violations.extend(check(&ops));
    let mut clusters = Vec::new();
    for (name, w) in watchers {
        let events = w.finish().await?;
        crate::store_log::write_jsonl(&dir.join(format!("store-{name}.jsonl")), &events)?;
        let node = std::iter::once(&stack.etcd)
            .chain(&stack.shards)
            .chain([&e3])
            .find(|c| c.name == name)
            .ok_or_else(|| anyhow::anyhow!("no cluster {name}"))?;
        clusters.push(shard_checks::Cluster {
            epoch: epoch_of(node).await?,
            name,
            events,
        });
    }
    let per = shard_checks::check(&ops, &clusters, &identity_of, 2_000_000);
    report.per_cluster = per.line();
    let coord_events = coord_watcher.finish().await?;
    crate::store_log::write_jsonl(&dir.join("store-coord.jsonl"), &coord_events)?;
    clusters.push(shard_checks::Cluster {
        name: lock_config::shards::COORD.to_owned(),
        epoch: epoch_of(&stack.etcd).await?,
        events: coord_events,
    });
    report
        .violations
        .extend(shard_checks::epochs_apart(&ops, &clusters));
    report.violations.extend(per.violations);
    report.violations.extend(
        per.not_linearizable
            .iter()
            .map(|k| format!("{k}: not linearizable (no sequential fenced-mutex order fits)")),
    );
    // Nothing lost: every grant released, so no hold is left on any cluster.
    for c in std::iter::once(&stack.etcd)
        .chain(&stack.shards)
        .chain([&e3])
    {
        report.violations.extend(left_held(c).await?);
    }
    let outside = shared.moving_outside.load(Ordering::Relaxed);
    if outside > 0 {
        report.violations.push(format!(
            "{outside} MOVING answers to acquires that began and ended outside every move"
        ));
    }
    report.moving_answers = usize::try_from(shared.moving.load(Ordering::Relaxed))?;
    report.sessions_replaced = usize::try_from(shared.replaced.load(Ordering::Relaxed))?;
    drop(buggy);
    drop(e3);
    drop(stack);
    // A failed run's history is its evidence: kept (not for a run meant to fail).
    if opts.out_dir.is_none()
        && opts.inject_bug.is_none()
        && !(report.violations.is_empty() && report.moves_ok)
    {
        let _ = tmp.keep();
    }
    Ok(report)
}

/// The two-person advance of `shard`'s epoch (lock-admin's filing and approval code, given
/// the coord cluster; with `old_rule`, the deliberate bug `advance-without-coord`): its
/// whether it advanced, and its report line. Only an unreachable store is an error.
async fn advance(stack: &Stack, shard: &Etcd, old_rule: bool) -> anyhow::Result<(bool, String)> {
    let from = epoch_of(shard).await?;
    let coord = stack.etcd_access();
    let done = lock_integration::admin::advance_epoch_with(
        &shard.access(&shard.client_url),
        Some(&coord),
        from,
        "shard gate: the keys left this shard",
        old_rule,
    )
    .await?;
    Ok(match done {
        Ok(record) => (
            true,
            format!(
                "{}: epoch {from} -> {} (two-person advance)",
                shard.name, record.epoch
            ),
        ),
        Err(e) => (
            false,
            format!(
                "{}: the two-person advance from epoch {from} failed: {e}",
                shard.name
            ),
        ),
    })
}

/// The epoch a cluster's record names.
async fn epoch_of(c: &Etcd) -> anyhow::Result<u16> {
    let mut client = c.client().await?;
    let r = client.get(lock_store::layout::EPOCH_KEY, None).await?;
    r.kvs()
        .first()
        .and_then(|kv| lock_store::layout::decode::<lock_store::layout::EpochRecord>(kv.value()))
        .map(|e| e.epoch)
        .ok_or_else(|| anyhow::anyhow!("{} has no epoch record", c.name))
}

async fn left_held(c: &Etcd) -> anyhow::Result<Vec<String>> {
    let mut client = c.client().await?;
    let r = client
        .get("/l/", Some(etcd_client::GetOptions::new().with_prefix()))
        .await?;
    Ok(r.kvs()
        .iter()
        .map(|kv| {
            format!(
                "{}: left held on {} (written at revision {})",
                kv.key_str().unwrap_or("?").trim_start_matches("/l/"),
                c.name,
                kv.mod_revision()
            )
        })
        .collect())
}

/// The report as the gate prints it.
pub fn summary(r: &ShardGateReport, history: &Path) -> String {
    let mut out = format!(
        "shard gate: {} operations, {} grants (by epoch {:?}), {} MOVING answers, {} sessions re-placed\n",
        r.operations, r.grants, r.grants_by_epoch, r.moving_answers, r.sessions_replaced
    );
    for m in &r.moves {
        out.push_str(&format!("  {m}\n"));
    }
    for a in &r.advances {
        out.push_str(&format!("  advanced {a}\n"));
    }
    for f in &r.faults {
        out.push_str(&format!("  fault: {f}\n"));
    }
    if !r.per_cluster.is_empty() {
        out.push_str(&format!("  {}\n", r.per_cluster));
    }
    let kept = history_line(history.exists(), r.passed(), r.inject_bug);
    let kept = kept.replace("{}", &history.display().to_string());
    out.push_str(&format!(
        "{} violations{}\nhistory: {kept}\n",
        r.violations.len(),
        r.violations
            .iter()
            .take(10)
            .map(|v| format!("\n  {v}"))
            .collect::<String>(),
    ));
    out
}

/// What the summary says of the history: where it is, or truthfully why it is not there
/// (`{}` stands for its path).
fn history_line(exists: bool, passed: bool, inject_bug: bool) -> &'static str {
    match (exists, passed, inject_bug) {
        (true, _, _) => "{}",
        (false, true, _) => "not kept (the run passed; --out keeps it)",
        (false, false, true) => {
            "not kept (--inject-bug runs are meant to fail; --out keeps their history)"
        }
        (false, false, false) => "lost: the run failed and its history folder is gone",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Phase;

    /// Issue 34: a run with --inject-bug failed with 883 violations and said its history
    /// was not kept because the run passed.
    #[test]
    fn the_history_line_says_why_it_is_missing() {
        assert_eq!(history_line(true, false, false), "{}");
        assert!(history_line(false, true, false).contains("passed"));
        let bug = history_line(false, false, true);
        assert!(bug.contains("--inject-bug") && !bug.contains("passed"));
        assert!(history_line(false, false, false).contains("failed"));
    }

    fn op(client: u32, kind: Kind, key: &str, token: u64, invoked: u64, done: u64) -> history::Op {
        history::Op {
            client,
            kind,
            key: Some(key.into()),
            session: None,
            token: Some(token),
            invoked,
            done: Some((done, Phase::Ok)),
            why: None,
            via: None,
            served: None,
            rev: None,
            set: None,
            shared: false,
            permit: None,
        }
    }

    fn token(epoch: u16, revision: u64) -> u64 {
        FencingToken::pack(epoch, revision).unwrap().as_u64()
    }

    #[test]
    fn a_faults_effect_counts_stalls_losses_and_refusals_in_its_window() {
        let s = 1_000_000_000;
        let mut lost = op(1, Kind::Acquire, "k", 0, 11 * s, 0);
        lost.done = None;
        let mut refused = op(2, Kind::Acquire, "k", 0, 12 * s, 12 * s + 1);
        refused.done = Some((12 * s + 1, Phase::Fail));
        refused.why = Some("MOVING".into());
        let ops = vec![
            op(1, Kind::Acquire, "k", 5, 8 * s, 9 * s), // over before the window
            op(1, Kind::Acquire, "k", 6, 9 * s, 13 * s), // sent before, granted 4 s later
            lost,
            refused,
            op(3, Kind::Acquire, "k", 7, 20 * s, 20 * s + 1), // after window + 2 s
        ];
        assert_eq!(
            fault_effect(&ops, 10 * s, 15 * s),
            "1 MOVING, 1 stalled > 1 s, 1 unknown"
        );
        // Before any of them: nothing (a call never answered counts in every window after
        // it was sent).
        assert_eq!(fault_effect(&ops, s, 2 * s), "no call refused or lost");
    }

    #[test]
    fn check_table() {
        use Kind::{Acquire, Release};
        let (a2, a3, b9) = (token(2, 10), token(2, 30), token(4, 5));
        for (name, ops, want) in [
            (
                "a handoff across a move: rising tokens, no overlap",
                vec![
                    op(0, Acquire, "k", a2, 0, 1),
                    op(0, Release, "k", a2, 2, 3),
                    op(1, Acquire, "k", b9, 2, 4),
                    op(1, Release, "k", b9, 5, 6),
                ],
                0,
            ),
            (
                "granted on the new shard while held on the old one",
                vec![
                    op(0, Acquire, "k", a2, 0, 1),
                    op(1, Acquire, "k", b9, 2, 3),
                    op(0, Release, "k", a2, 4, 5),
                ],
                1,
            ),
            (
                "the old shard grants after the new one: the token goes back",
                vec![
                    op(1, Acquire, "k", b9, 0, 1),
                    op(1, Release, "k", b9, 2, 3),
                    op(0, Acquire, "k", a3, 4, 5),
                    op(0, Release, "k", a3, 6, 7),
                ],
                1,
            ),
            (
                "never released: held to the end of the history",
                vec![op(0, Acquire, "k", a2, 0, 1), op(1, Acquire, "k", a3, 5, 6)],
                1,
            ),
            (
                "a grant given back after a lost release answer: one hold",
                vec![
                    op(0, Acquire, "k", a2, 0, 1),
                    op(1, Acquire, "k", a3, 1, 9), // waits for it, granted after
                    op(0, Acquire, "k", a2, 5, 6),
                    op(0, Release, "k", a2, 7, 8),
                ],
                0,
            ),
            (
                "the same token to another client is still two holders",
                vec![
                    op(0, Acquire, "k", a2, 0, 1),
                    op(1, Acquire, "k", a2, 2, 3),
                    op(0, Release, "k", a2, 4, 5),
                ],
                2,
            ),
            (
                "other keys do not interfere",
                vec![op(0, Acquire, "k", b9, 0, 1), op(1, Acquire, "j", a2, 2, 3)],
                0,
            ),
        ] {
            assert_eq!(check(&ops).len(), want, "{name}: {:?}", check(&ops));
        }
    }
}
