//! The Java client (clients/java) against the real stack. The first test starts a stack and
//! runs the module's whole Maven build and suite (`mvn -q -o verify`: the stubs generated
//! from config/proto, the unit tests and the stack tests) with the environment pointing at
//! it (endpoint, two test identities' SVIDs, the edge's SPIFFE ID, the test prefixes and
//! TTL), and requires it to pass with no test skipped: the stack tests skip only when
//! LOCK_ENDPOINT is unset. The Workload API class is left to the second test, which starts a
//! stack and the dev CA's Workload API server (SVIDs valid 4 s, rotated every 2 s) and runs
//! that class alone with LOCK_WORKLOAD_SOCKET set. The counts come from Surefire's XML
//! reports. The two take turns: one Maven build in the module at a time, one stack at a time.
//!
//! Needs `mvn` and a JDK 17 on the PATH, and the module's Maven dependencies and plugins in
//! the local repository (`~/.m2`): the build runs offline (`-o`); the install step fetches
//! them once (`mvn -f clients/java/pom.xml dependency:go-offline verify`).

use lock_integration::paths::workspace_root;
use lock_integration::pki::{ENVOY_ID, LEDGER};
use lock_integration::registry::waiter_id;
use lock_integration::workload_api::WorkloadApi;
use lock_integration::{Stack, StackOptions};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Both tests build in clients/java (target/ is shared) and start a stack: one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The Java class of the Workload API stack test; the whole-suite run leaves it out.
const WORKLOAD_API_CLASS: &str = "WorkloadApiStackTest";

fn module() -> PathBuf {
    workspace_root().join("clients/java")
}

/// One `<testsuite>` of a Surefire report: its class and counts.
#[derive(Debug, Default)]
struct Suite {
    name: String,
    tests: u32,
    skipped: u32,
    failures: u32,
    errors: u32,
}

/// The value of attribute `name` in the start tag `tag` (Surefire writes them double-quoted).
fn attr(tag: &str, name: &str) -> Option<String> {
    let needle = format!(" {name}=\"");
    let start = tag.find(&needle)? + needle.len();
    let end = tag[start..].find('"')? + start;
    Some(tag[start..end].to_owned())
}

fn count(tag: &str, name: &str) -> u32 {
    attr(tag, name).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Every `TEST-*.xml` of target/surefire-reports.
fn suites(reports: &Path) -> Vec<Suite> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir(reports) else {
        return out;
    };
    for entry in dir.flatten() {
        let path = entry.path();
        let is_report = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("TEST-") && n.ends_with(".xml"));
        if !is_report {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let Some(at) = text.find("<testsuite ") else {
            continue;
        };
        let tag = &text[at..at + text[at..].find('>').unwrap_or(text.len() - at)];
        out.push(Suite {
            name: attr(tag, "name").unwrap_or_default(),
            tests: count(tag, "tests"),
            skipped: count(tag, "skipped"),
            failures: count(tag, "failures"),
            errors: count(tag, "errors"),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The per-test output Surefire kept (redirectTestOutputToFile), for a failure's message.
fn test_output(reports: &Path) -> String {
    let mut text = String::new();
    if let Ok(dir) = std::fs::read_dir(reports) {
        for entry in dir.flatten() {
            let p = entry.path();
            if p.extension().is_some_and(|e| e == "txt") {
                text.push_str(&std::fs::read_to_string(&p).unwrap_or_default());
            }
        }
    }
    text
}

/// What one Maven run left: its output (and the per-test output) and the suites' counts.
struct Run {
    ok: bool,
    text: String,
    suites: Vec<Suite>,
}

/// Runs `mvn -B -q -o verify` with extra arguments and environment in clients/java, after
/// removing the previous run's reports.
fn maven(args: &[&str], env: Vec<(&'static str, OsString)>) -> Run {
    let reports = module().join("target/surefire-reports");
    let _ = std::fs::remove_dir_all(&reports);
    let out = Command::new("mvn")
        .args(["-B", "-q", "-o", "verify"])
        .args(args)
        .current_dir(module())
        .envs(env)
        .env_remove("LOCK_INSTANCE")
        .output()
        .unwrap_or_else(|e| panic!("mvn: {e} (are Maven and a JDK 17 installed and on the PATH?)"));
    let text = format!(
        "{}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        test_output(&reports)
    );
    Run {
        ok: out.status.success(),
        text,
        suites: suites(&reports),
    }
}

/// The run passed, with no test failed or skipped.
fn passed(run: &Run, what: &str) {
    let (suites, text) = (&run.suites, &run.text);
    assert!(run.ok, "{what} failed ({suites:?}):\n{text}");
    assert!(!suites.is_empty(), "{what}: no Surefire report:\n{text}");
    let bad: Vec<&Suite> = suites
        .iter()
        .filter(|s| s.failures > 0 || s.errors > 0 || s.skipped > 0)
        .collect();
    assert!(bad.is_empty(), "failed or skipped tests {bad:?}:\n{text}");
}

#[tokio::test]
async fn the_java_client_passes_its_suite_against_the_stack() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (stack, _reg) = Stack::with_test_registry().await.unwrap();
    let me = stack.pki.svid("java-w5", &waiter_id(5)).unwrap();
    let other = stack.pki.svid("java-w6", &waiter_id(6)).unwrap();
    let exclude = format!("-Dtest=!{WORKLOAD_API_CLASS}");
    let run = maven(
        &[&exclude],
        lock_integration::registry::client_suite_env(&stack.endpoint(), &me, &other),
    );
    passed(&run, "mvn -o verify");
    let (suites, text) = (&run.suites, &run.text);
    let stack_suite = suites
        .iter()
        .find(|s| s.name.ends_with(".StackTest"))
        .unwrap_or_else(|| panic!("no StackTest report ({suites:?}):\n{text}"));
    // Acquire, queueing, instances, re-entrancy, refusals, TTLs; observe, campaign, sets,
    // shared holds; semaphore permits (N at once and the next waits, re-entry, the mode).
    assert!(
        stack_suite.tests >= 15 && stack_suite.skipped == 0,
        "the stack tests did not all run: {stack_suite:?}\n{text}"
    );
    let total: u32 = suites.iter().map(|s| s.tests).sum();
    eprintln!(
        "java client: {total} tests in {} suites passed, none skipped: {suites:?}",
        suites.len()
    );
}

/// The Java client's `WorkloadApiSource`: its SVID from the dev CA's Workload API, and a
/// rotation pushed over the stream picked up by the next call without a failed one.
#[tokio::test]
async fn the_java_client_takes_its_svid_from_the_workload_api() {
    let _one = ONE_AT_A_TIME.lock().await;
    let stack = Stack::start(StackOptions::default()).await.unwrap();
    let api = WorkloadApi::start(
        &stack.pki,
        &stack.dir.join("agent"),
        LEDGER,
        Duration::from_secs(4),
    )
    .unwrap();
    let only = format!("-Dtest={WORKLOAD_API_CLASS}");
    let run = maven(
        &[&only],
        vec![
            ("LOCK_ENDPOINT", stack.endpoint().into()),
            ("LOCK_SERVER_ID", ENVOY_ID.into()),
            ("LOCK_WORKLOAD_SOCKET", api.endpoint().into()),
            ("LOCK_WORKLOAD_ID", LEDGER.into()),
            ("LOCK_WORKLOAD_PREFIX", "pay/ledger".into()),
        ],
    );
    passed(&run, "mvn -o verify -Dtest=WorkloadApiStackTest");
    let (suites, text) = (&run.suites, &run.text);
    assert!(
        suites.len() == 1
            && suites[0].name.ends_with(&format!(".{WORKLOAD_API_CLASS}"))
            && suites[0].tests >= 1,
        "the Workload API class alone should have run: {suites:?}\n{text}"
    );
    let line = text
        .lines()
        .find(|l| l.starts_with("workload api:"))
        .unwrap_or("(no summary line)");
    eprintln!("java client, {line}");
}

#[test]
fn surefire_reports_are_read() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("TEST-a.StackTest.xml"),
        "<?xml version=\"1.0\"?>\n<testsuite xmlns:xsi=\"x\" name=\"a.StackTest\" time=\"1.2\" tests=\"8\" errors=\"0\" skipped=\"2\" failures=\"1\">\n<testcase/></testsuite>",
    )
    .unwrap();
    std::fs::write(dir.path().join("a.StackTest.txt"), "out").unwrap();
    let s = suites(dir.path());
    assert_eq!(s.len(), 1);
    assert_eq!(
        (
            s[0].name.as_str(),
            s[0].tests,
            s[0].skipped,
            s[0].failures,
            s[0].errors
        ),
        ("a.StackTest", 8, 2, 1, 0)
    );
}
