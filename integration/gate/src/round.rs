//! One gate run: the environment it runs on ([`GateEnv`]: three etcd members in network
//! namespaces, two arbiters whose links go through relays, Envoy, the in-test register and
//! PostgreSQL) and a round of load under faults on it ([`round`]), checked. `gate run` is
//! one round on a fresh environment; `gate soak --long-lived` runs round after round on
//! one, so the processes live the whole soak.

use super::faults;
use super::history::{Event, Kind, Phase, Recorder, mono_ns};
use super::store_log::StoreStart;
use super::{ATTACKER, GateOptions, GateReport, MAX_EXTENSION, check_history, register, store_log};
use super::{timeline, worker};
use lock_integration::paths::workspace_bin;
use lock_integration::process::Proc;
use lock_integration::registry::{
    GATE_DURABLE_PREFIX, GATE_PREFIX, GATE_SEM_PREFIX, GATE_TTL, SHARED_PREFIX, gate_id,
    write_test_registry,
};
use lock_integration::{Stack, StackOptions};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Beside `store.jsonl` in a round's history: where its store log starts.
pub const STORE_START: &str = "store-start.json";

/// What the gate runs on, for one run or a whole soak.
pub struct GateEnv {
    pub stack: Stack,
    register: register::Register,
    pg: Option<lock_integration::postgres::Postgres>,
    pub dir: PathBuf,
    tmp: Option<tempfile::TempDir>,
    /// The store's epoch as the faults last left it.
    epoch: u16,
    /// Rounds run on it so far.
    pub rounds: u64,
}

impl GateEnv {
    /// Brings the environment up in `opts.out_dir` (or a temp folder).
    pub async fn start(opts: &GateOptions) -> anyhow::Result<Self> {
        let (tmp, dir) =
            lock_integration::process::work_dir(opts.out_dir.as_deref(), "lock-gate-")?;
        let registry = write_test_registry(&dir)?;
        let mut arbiter_args = vec!["--store-timeout-ms".to_owned(), "1500".to_owned()];
        for b in &opts.inject_bugs {
            arbiter_args.extend(["--inject-bug".to_owned(), b.clone()]);
        }
        let stack = Stack::start(StackOptions {
            arbiters: 2,
            etcd_members: 3,
            isolatable_etcd: true,
            relayed_links: true,
            registry,
            keep_dir: Some(dir.join("stack")),
            arbiter_args,
            filter_switches: opts.filter_switches.clone(),
            ..StackOptions::default()
        })
        .await?;
        let register = register::Register::start().await?;
        let pg = if opts.postgres {
            let pg = lock_integration::postgres::Postgres::start(&dir.join("pg"))?;
            let db = lock_pause_test::connect(&pg.url()).await?;
            lock_pause_test::fence::create_schema(&db).await?;
            Some(pg)
        } else {
            None
        };
        Ok(Self {
            stack,
            register,
            pg,
            dir,
            tmp,
            epoch: 1,
            rounds: 0,
        })
    }

    /// Takes the environment down; keeps its folder when `keep` (a failure's evidence).
    pub fn finish(self, keep: bool) {
        let Self {
            stack,
            register,
            pg,
            tmp,
            ..
        } = self;
        // The processes first: the folder they write in goes last.
        drop(stack);
        drop(pg);
        drop(register);
        if let Some(t) = tmp
            && keep
        {
            let _ = t.keep();
        }
    }
}

/// Runs the gate: an environment up, one round of workers and faults for `duration`, then
/// the checks.
pub async fn run(opts: &GateOptions) -> anyhow::Result<GateReport> {
    let started = Instant::now();
    let mut env = GateEnv::start(opts).await?;
    let dir = env.dir.clone();
    let outcome = round(&mut env, opts, &dir).await;
    let keep = outcome.as_ref().map_or(true, |r| !r.passed()) && opts.keep_failed;
    env.finish(keep);
    let mut report = outcome?;
    report.elapsed = started.elapsed();
    Ok(report)
}

/// The store's revision now and its epoch: where a round's log starts.
async fn store_start(stack: &Stack) -> anyhow::Result<StoreStart> {
    let mut c = stack.etcd_client().await?;
    let r = c.get(lock_store::layout::EPOCH_KEY, None).await?;
    let revision = r.header().map_or(0, |h| h.revision());
    let epoch = r
        .kvs()
        .first()
        .and_then(|kv| lock_store::layout::decode::<lock_store::layout::EpochRecord>(kv.value()))
        .map_or(0, |e| u32::from(e.epoch));
    Ok(StoreStart {
        from_revision: revision + 1,
        epoch,
    })
}

/// One round on `env`: workers (their plans, logs and history in `dir`) and faults for
/// `opts.duration`, then the checks.
pub async fn round(
    env: &mut GateEnv,
    opts: &GateOptions,
    dir: &Path,
) -> anyhow::Result<GateReport> {
    let started = Instant::now();
    std::fs::create_dir_all(dir)?;
    let history_dir = dir.join("history");
    std::fs::create_dir_all(&history_dir)?;
    // The first round's log starts at the store's beginning; a later round's (a soak on a
    // long-lived stack, whose old revisions are compacted) where the round starts, with
    // the epoch the store is in then.
    let from = if env.rounds == 0 {
        1
    } else {
        let start = store_start(&env.stack).await?;
        std::fs::write(
            history_dir.join(STORE_START),
            serde_json::to_string(&start)?,
        )?;
        start.from_revision
    };
    let watcher = store_log::StoreWatcher::start_at(
        env.stack.members().map(|m| m.client_url.clone()).collect(),
        env.stack.etcd.pki.tls("root")?,
        from,
    );
    let origin = mono_ns();
    // Workers run until told to stop (the stop file), or at the latest `until`.
    let soft_end = origin + u64::try_from(opts.duration.as_nanos())?;
    let until = soft_end + u64::try_from(MAX_EXTENSION.as_nanos())?;
    let stop_file = dir.join("stop");
    let run_id = format!("r{:x}", origin % 0xfffff);
    let mut workers = Vec::new();
    let histories: Vec<PathBuf> = (0..opts.workers)
        .map(|w| history_dir.join(format!("worker-{w}.jsonl")))
        .collect();
    for w in 0..opts.workers {
        let mut clients = Vec::new();
        for c in 0..opts.clients_per_worker {
            let id = u32::try_from(1 + w * opts.clients_per_worker + c)?;
            // Clients 2k-1 and 2k are replicas: one identity, two instances (issue 32).
            let spiffe_id = lock_integration::registry::gate_client_identity(id as usize);
            let svid = env.stack.pki.svid(&format!("gate-c{id}"), &spiffe_id)?;
            clients.push(worker::ClientPlan {
                id,
                spiffe_id,
                cert: svid.cert,
                key: svid.key,
                ca: svid.ca,
            });
        }
        let history = histories[w].clone();
        let attacker = if w == 0 && opts.attacker {
            let svid = env.stack.pki.svid("gate-attacker", &gate_id(ATTACKER))?;
            Some(worker::AttackerPlan {
                id: u32::try_from(ATTACKER)?,
                cert: svid.cert,
                key: svid.key,
                ca: svid.ca,
                victims: histories.clone(),
                own_prefix: format!("{GATE_PREFIX}/{run_id}/attacker"),
                ungranted_key: "pay/ledger/gate-attack".into(),
            })
        } else {
            None
        };
        let plan = worker::WorkerPlan {
            clients,
            endpoint: env.stack.endpoint(),
            arbiters: env.stack.arbiters.iter().map(|a| a.addr).collect(),
            edge_cert: env.stack.pki.edge_svid().cert,
            edge_key: env.stack.pki.edge_svid().key,
            direct_percent: opts.direct_percent,
            keys: worker::KeyPlan {
                fifo_prefix: GATE_PREFIX.into(),
                durable_prefix: GATE_DURABLE_PREFIX.into(),
                shared_prefix: SHARED_PREFIX.into(),
                sem_prefix: GATE_SEM_PREFIX.into(),
                run: run_id.clone(),
                per_generation: opts.keys_per_generation,
                generation_ms: u64::try_from(opts.generation.as_millis())?,
                durable_percent: opts.durable_percent,
                lookback_percent: opts.lookback_percent,
                lookback: opts.lookback,
            },
            origin,
            until,
            stop_file: stop_file.clone(),
            max_ops_per_client: 1_000_000,
            register: env.register.addr,
            postgres: env.pg.as_ref().map(|p| p.url()),
            history: history.clone(),
            seed: opts.seed.wrapping_mul(1000).wrapping_add(w as u64),
            replay_percent: opts.replay_percent,
            stall_percent: opts.stall_percent,
            leak_percent: opts.leak_percent,
            set_percent: opts.set_percent,
            election_percent: opts.election_percent,
            shared_percent: opts.shared_percent,
            sem_percent: opts.sem_percent,
            // Past the TTL by two seconds: the store has ended the session (renewals stop
            // with the stall) and a waiter has been granted and written.
            stall_ms: u64::from(GATE_TTL) * 1000 + 2000,
            attacker,
        };
        let plan_path = dir.join(format!("worker-{w}.json"));
        std::fs::write(&plan_path, serde_json::to_string_pretty(&plan)?)?;
        let mut cmd = Command::new(workspace_bin("gate")?);
        cmd.arg("worker").arg("--plan").arg(&plan_path);
        workers.push(Proc::spawn(&format!("worker-{w}"), cmd, dir)?);
    }
    // The observer follows a key per generation through the edge for the whole round.
    let (stop_observer, observer_stopped) = tokio::sync::oneshot::channel::<()>();
    let observer = if opts.observe {
        let plan = super::observer::ObservePlan {
            endpoint: env.stack.endpoint(),
            svid: env.stack.pki.svid("gate-observer", &gate_id(1))?,
            keys: vec![
                format!("{GATE_PREFIX}/{run_id}"),
                format!("{GATE_DURABLE_PREFIX}/{run_id}"),
            ],
            per_generation: opts.keys_per_generation,
            origin,
            generation: opts.generation,
            follow: opts.lookback + 1,
            soft_end,
        };
        Some(tokio::spawn(super::observer::run(plan, async {
            let _ = observer_stopped.await;
        })))
    } else {
        None
    };
    let driver_history = history_dir.join("driver.jsonl");
    let driver = Recorder::create(&driver_history)?;
    let driver_ops = AtomicU64::new(0);
    let record = |f: Kind, ph: Phase, key: Option<String>, why: Option<String>| -> u64 {
        let op = if ph == Phase::Invoke {
            driver_ops.fetch_add(1, Ordering::SeqCst) + 1
        } else {
            driver_ops.load(Ordering::SeqCst)
        };
        driver.record(&Event {
            c: 0,
            op,
            t: mono_ns(),
            ph,
            f,
            key,
            session: None,
            token: None,
            why,
            via: None,
            served: None,
            rev: None,
            set: None,
            shared: false,
            permit: None,
        });
        op
    };

    // Faults, round after round, until the run's duration is over (leaving time for the
    // last) and at least `min_faults` were injected, within the hard end.
    let mut injected = Vec::new();
    tokio::time::sleep(opts.fault_gap).await;
    let mut n = 0usize;
    while !opts.faults.is_empty() {
        let fault = opts.faults[n % opts.faults.len()];
        let room = |end: u64| mono_ns() + 8_000_000_000 <= end;
        if !room(until) || (!room(soft_end) && injected.len() >= opts.min_faults) {
            break;
        }
        let target = faults::Target {
            stack: &mut env.stack,
            workers: &mut workers,
            holder_pause: Duration::from_secs(u64::from(GATE_TTL) + 2),
            epoch: &mut env.epoch,
            spare_arbiter: opts.spare_arbiter,
            record: &record,
            // Round number plus position: each round moves every fault to another target
            // (with two arbiters, alternating between them).
            pick: n / opts.faults.len() + n % opts.faults.len(),
        };
        let done = faults::inject(fault, target).await?;
        println!(
            "gate: {:>14} on {} ({:.1} s)",
            fault.name(),
            done.target,
            done.took.as_secs_f64()
        );
        injected.push(done);
        n += 1;
        tokio::time::sleep(opts.fault_gap).await;
    }
    // Load for the whole duration, then tell the workers to stop; bound the wait.
    let left = soft_end.saturating_sub(mono_ns());
    tokio::time::sleep(Duration::from_nanos(left)).await;
    std::fs::write(&stop_file, b"stop")?;
    let deadline = Instant::now() + Duration::from_secs(30);
    for w in &mut workers {
        while w.check_running().is_ok() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        w.kill();
    }
    let _ = stop_observer.send(());
    if let Some(observer) = observer {
        let (seen, failed) = observer.await??;
        if !failed.is_empty() {
            let total: usize = failed.values().sum();
            let by: Vec<String> = failed.iter().map(|(why, n)| format!("{why} {n}")).collect();
            println!(
                "gate: {total} observation(s) ended on an error: {}",
                by.join(", ")
            );
        }
        super::observer::write(&history_dir.join("observe.jsonl"), &seen)?;
    }
    let store_events = watcher.finish().await?;
    store_log::write_jsonl(&history_dir.join("store.jsonl"), &store_events)?;
    let spans: Vec<timeline::FaultSpan> = injected
        .iter()
        .map(|f| timeline::FaultSpan {
            name: f.fault.name().to_owned(),
            target: f.target.clone(),
            from: f.started_at,
            to: f.started_at + u64::try_from(f.took.as_nanos()).unwrap_or(u64::MAX),
        })
        .collect();
    std::fs::write(
        history_dir.join("faults.json"),
        serde_json::to_string(&spans)?,
    )?;
    let mut report = check_history(&history_dir, opts.linearizability_steps)?;
    println!("gate: {}", report.porcupine.line());
    report.faults = injected;
    report.dir = dir.to_path_buf();
    report.elapsed = started.elapsed();
    env.rounds += 1;
    Ok(report)
}
