//! The client conformance suite (`clients/conformance/`): every scenario, written as data,
//! run against each of the five clients through its driver, on one real stack per client
//! (etcd ×3, two arbiters, Envoy with the filter, PostgreSQL for the fenced write).
//!
//! `conformance_<client>` runs every scenario on that client. `a_broken_client_fails_*`
//! is the suite's own evidence: the Python client copied and broken on purpose, one rule
//! at a time (`clients/conformance/mutants.yaml`), must fail the scenario that guards the
//! rule.
//!
//! One client at a time (the tests take a lock): each starts its own stack, and five at
//! once would not fit two cores. `CONFORMANCE_SCENARIO=name` runs one scenario.

#[path = "conformance/driver.rs"]
mod driver;
#[path = "conformance/drivers.rs"]
mod drivers;
#[path = "conformance/faults.rs"]
mod faults;
#[path = "conformance/run.rs"]
mod run;
#[path = "conformance/scenario.rs"]
mod scenario;

use drivers::{Lang, Launcher};
use lock_integration::paths::workspace_root;
use lock_integration::pki::SvidFiles;
use lock_integration::postgres::Postgres;
use lock_integration::registry::{self, waiter_id};
use lock_integration::{Stack, StackOptions};
use run::Run;
use scenario::{Identity, Need, Prefixes, Scenario};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tokio::time::Instant;

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn scenarios_dir() -> PathBuf {
    workspace_root().join("clients/conformance")
}

fn prefixes() -> Prefixes {
    Prefixes {
        fast: registry::FAST_PREFIX.into(),
        slow: registry::SLOW_PREFIX.into(),
        shared: registry::SHARED_PREFIX.into(),
        fair: registry::FAIR_PREFIX.into(),
        // A namespace of the dev registry no test identity is granted.
        denied: "orders/conformance".into(),
    }
}

/// The stack every scenario runs on, with what the scenarios need beside it.
struct World {
    stack: Stack,
    svids: BTreeMap<Identity, SvidFiles>,
    pg: Option<(Postgres, tokio_postgres::Client)>,
    scratch: tempfile::TempDir,
    _registry: tempfile::TempDir,
}

async fn world(scenarios: &[(PathBuf, Scenario)]) -> World {
    let needs = |n: Need| scenarios.iter().any(|(_, s)| s.needs.contains(&n));
    let (stack, reg) = Stack::with_test_registry_options(StackOptions {
        etcd_members: if needs(Need::Quorum) { 3 } else { 1 },
        ..Default::default()
    })
    .await
    .unwrap();
    let pki = &stack.pki;
    let svids = BTreeMap::from([
        (Identity::Me, pki.svid("conf-me", &waiter_id(5)).unwrap()),
        (
            Identity::Other,
            pki.svid("conf-other", &waiter_id(6)).unwrap(),
        ),
        (
            Identity::Limited,
            pki.svid("conf-limited", registry::LIMITED).unwrap(),
        ),
        // Issued by the trusted CA, with no URI SAN: the edge knows no SPIFFE ID.
        (
            Identity::Anonymous,
            pki.issue("conf-anonymous", &[]).unwrap(),
        ),
    ]);
    let pg = if needs(Need::Postgres) {
        let pg = Postgres::start(&stack.dir).unwrap();
        let (db, conn) = tokio_postgres::connect(&pg.url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        db.batch_execute(
            "CREATE TABLE IF NOT EXISTS fenced (key TEXT PRIMARY KEY, fence NUMERIC(20) NOT NULL)",
        )
        .await
        .unwrap();
        Some((pg, db))
    } else {
        None
    };
    World {
        stack,
        svids,
        pg,
        scratch: tempfile::tempdir().unwrap(),
        _registry: reg,
    }
}

fn selected() -> Vec<(PathBuf, Scenario)> {
    let all = scenario::load_all(&scenarios_dir()).unwrap();
    assert!(
        !all.is_empty(),
        "no scenarios in {}",
        scenarios_dir().display()
    );
    match std::env::var("CONFORMANCE_SCENARIO") {
        Ok(only) => all.into_iter().filter(|(_, s)| s.name == only).collect(),
        Err(_) => all,
    }
}

/// Runs `s` on `launcher`'s client; Err is the failure report.
async fn run_scenario(
    w: &mut World,
    launcher: &Launcher,
    s: &Scenario,
    tag: &str,
) -> Result<(), String> {
    let prefixes = prefixes();
    let run_id = format!(
        "{tag}-{}",
        std::process::id() ^ (Instant::now().elapsed().as_nanos() as u32)
    );
    let logs = w
        .scratch
        .path()
        .join(format!("{}-{}", launcher.lang.name(), s.name));
    std::fs::create_dir_all(&logs).map_err(|e| e.to_string())?;
    let pg = w.pg.as_ref().map(|(_, db)| db);
    let mut r = Run::new(
        &mut w.stack,
        launcher,
        &w.svids,
        &prefixes,
        pg,
        run_id,
        logs,
        s,
    );
    let started = Instant::now();
    let mut failed = None;
    for (i, step) in s.steps.iter().enumerate() {
        if std::env::var_os("CONFORMANCE_TRACE").is_some() {
            eprintln!(
                "  {:>8.3?} step {} {}",
                started.elapsed(),
                i + 1,
                step.action
            );
        }
        if let Err(e) = r.step(step).await {
            failed = Some(format!("step {} {step:?}: {e:#}", i + 1));
            break;
        }
        r.prev_end = Instant::now();
    }
    let notes = r.finish().await;
    let report = r.stderr_report();
    match failed {
        None if notes.is_empty() => {
            eprintln!(
                "ok   {} {} ({:?})",
                launcher.lang.name(),
                s.name,
                started.elapsed()
            );
            Ok(())
        }
        None => Err(format!("{}: {notes}", s.name)),
        Some(f) => Err(format!(
            "{} on {}: {f}\n{notes}{report}",
            s.name,
            launcher.lang.name()
        )),
    }
}

async fn conform(lang: Lang) {
    let _one = ONE_AT_A_TIME.lock().await;
    let scenarios = selected();
    let mut w = world(&scenarios).await;
    let launcher = drivers::prepare(lang, w.scratch.path()).unwrap();
    let mut failures = Vec::new();
    for (_, s) in &scenarios {
        if let Err(report) =
            run_scenario(&mut w, &launcher, s, &format!("{}-{}", lang.name(), s.name)).await
        {
            failures.push(report);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} scenarios failed on {}:\n\n{}",
        failures.len(),
        scenarios.len(),
        lang.name(),
        failures.join("\n\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_rust() {
    conform(Lang::Rust).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_python() {
    conform(Lang::Python).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_node() {
    conform(Lang::Node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_go() {
    conform(Lang::Go).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_java() {
    conform(Lang::Java).await;
}

/// One rule of the Python client broken on purpose (`clients/conformance/mutants.yaml`).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Mutant {
    scenario: String,
    rule: String,
    /// The file under `clients/python/src/lock_client/`.
    file: String,
    old: String,
    new: String,
    /// Where the scenario is expected to fail (for people; not checked).
    #[allow(dead_code)]
    fails_at: Option<String>,
}

fn mutants() -> Vec<Mutant> {
    let text = std::fs::read_to_string(scenarios_dir().join("mutants.yaml")).unwrap();
    serde_yaml_ng::from_str(&text).unwrap()
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let name = e.file_name();
        if name == "__pycache__" {
            continue;
        }
        if e.file_type()?.is_dir() {
            copy_tree(&e.path(), &to.join(&name))?;
        } else {
            std::fs::copy(e.path(), to.join(&name))?;
        }
    }
    Ok(())
}

/// The suite's own evidence: for each scenario, a copy of the Python client with the rule
/// that scenario guards broken must fail it. A mutant that passes is a scenario that
/// proves nothing about that rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_client_fails_its_scenario() {
    let _one = ONE_AT_A_TIME.lock().await;
    let all = scenario::load_all(&scenarios_dir()).unwrap();
    let mutants = mutants();
    for (_, s) in &all {
        assert!(
            mutants.iter().any(|m| m.scenario == s.name),
            "no mutant for scenario {}",
            s.name
        );
    }
    let only = std::env::var("CONFORMANCE_SCENARIO").ok();
    let mut w = world(&all).await;
    let mut survivors = Vec::new();
    for (i, m) in mutants.iter().enumerate() {
        if only.as_ref().is_some_and(|o| *o != m.scenario) {
            continue;
        }
        let s = &all
            .iter()
            .find(|(_, s)| s.name == m.scenario)
            .unwrap_or_else(|| panic!("mutant of unknown scenario {}", m.scenario))
            .1;
        let src = w.scratch.path().join(format!("mutant-{i}"));
        copy_tree(&workspace_root().join("clients/python/src"), &src).unwrap();
        let file = src.join("lock_client").join(&m.file);
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(
            text.matches(&m.old).count(),
            1,
            "mutant {} ({}): `old` must occur once in {}",
            m.scenario,
            m.rule,
            m.file
        );
        std::fs::write(&file, text.replacen(&m.old, &m.new, 1)).unwrap();
        let launcher = drivers::python(&src).unwrap();
        match run_scenario(&mut w, &launcher, s, &format!("mutant{i}")).await {
            Ok(()) => survivors.push(format!("{}: {}", m.scenario, m.rule)),
            Err(report) => eprintln!(
                "caught {}: {} -> {}",
                m.scenario,
                m.rule,
                report.lines().next().unwrap_or_default()
            ),
        }
    }
    assert!(
        survivors.is_empty(),
        "scenarios passed by a client broken on purpose:\n{}",
        survivors.join("\n")
    );
}

/// The scenario files themselves: every one parses, names itself as its file does, and
/// every step is one the conductor knows.
#[test]
fn every_scenario_is_well_formed() {
    for (path, s) in scenario::load_all(&scenarios_dir()).unwrap() {
        let stem = path
            .file_stem()
            .and_then(|x| x.to_str())
            .unwrap_or_default();
        assert_eq!(s.name, stem, "{}", path.display());
        assert!(!s.about.trim().is_empty(), "{}: no `about`", path.display());
        for step in &s.steps {
            if let Some(p) = &step.process {
                assert!(
                    s.processes.contains_key(p),
                    "{}: no process {p}",
                    path.display()
                );
            }
        }
    }
    // The book's page lists every scenario.
    let page =
        std::fs::read_to_string(workspace_root().join("docs/src/using/conformance.md")).unwrap();
    for (_, s) in scenario::load_all(&scenarios_dir()).unwrap() {
        assert!(
            page.contains(&format!("| `{}` |", s.name)),
            "docs/src/using/conformance.md does not list scenario {}",
            s.name
        );
    }
}
