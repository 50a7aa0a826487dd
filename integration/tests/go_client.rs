//! The Go client (clients/go) against the real stack. The stack test starts a stack and
//! runs the module's whole `go test -race` suite with the environment pointing at it
//! (endpoint, two test identities' SVIDs, the edge's SPIFFE ID, the test prefixes and
//! TTL), and requires every test to pass and none to be skipped: the integration tests
//! skip only when LOCK_ENDPOINT is unset. Another test keeps the module formatted, vetted
//! and staticcheck-clean (both modules: the client, and the sample controller of
//! `leaderelection/example/controller`). The fenced leader election with processes and
//! PostgreSQL is `go_election.rs`.
//!
//! Needs `go` on the PATH (1.26) and, for the lint test, staticcheck (`.deps/bin/staticcheck`,
//! which integration/scripts/install-deps.sh builds once per machine).

use lock_integration::Stack;
use lock_integration::paths::workspace_root;
use lock_integration::registry::waiter_id;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

/// The `TestStack*` tests that must pass: lock's (acquire, queueing, instances,
/// re-entrancy, refusals, TTLs; Observe, Campaign, AcquireAll, shared holds; semaphore
/// permits: N at once and the next waits, re-entry, the class's mode) and
/// leaderelection's.
const STACK_TESTS: usize = 15;

fn module() -> PathBuf {
    workspace_root().join("clients/go")
}

/// The sample controller's module (its own go.mod: pgx stays out of the client's).
fn controller_module() -> PathBuf {
    module().join("leaderelection/example/controller")
}

fn run(cmd: &mut Command) -> (bool, String) {
    run_in(&module(), cmd)
}

fn run_in(dir: &std::path::Path, cmd: &mut Command) -> (bool, String) {
    let out = cmd.current_dir(dir).output().unwrap_or_else(|e| {
        panic!("{cmd:?}: {e} (is Go 1.26 installed and on the PATH?)");
    });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// What `go test -json` reported: tests passed, failed and skipped (top-level names).
#[derive(Default, Debug)]
struct Outcome {
    passed: BTreeSet<String>,
    failed: BTreeSet<String>,
    skipped: BTreeSet<String>,
}

fn outcome(json_lines: &str) -> Outcome {
    let mut o = Outcome::default();
    for line in json_lines.lines() {
        let Ok(ev) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let Some(test) = ev.get("Test").and_then(|t| t.as_str()) else {
            continue;
        };
        let set = match ev.get("Action").and_then(|a| a.as_str()) {
            Some("pass") => &mut o.passed,
            Some("fail") => &mut o.failed,
            Some("skip") => &mut o.skipped,
            _ => continue,
        };
        set.insert(test.to_owned());
    }
    o
}

/// The test output of `go test -json` for people: the Output fields.
fn output_of(json_lines: &str) -> String {
    json_lines
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .ok()
                .and_then(|ev| ev.get("Output").and_then(|o| o.as_str()).map(str::to_owned))
                .unwrap_or_else(|| format!("{l}\n"))
        })
        .collect()
}

#[tokio::test]
async fn the_go_client_passes_its_suite_against_the_stack() {
    let (stack, _reg) = Stack::with_test_registry().await.unwrap();
    let me = stack.pki.svid("go-w3", &waiter_id(3)).unwrap();
    let other = stack.pki.svid("go-w4", &waiter_id(4)).unwrap();
    let (ok, json) = run(Command::new("go")
        .args(["test", "-race", "-count=1", "-json", "./..."])
        .envs(lock_integration::registry::client_suite_env(
            &stack.endpoint(),
            &me,
            &other,
        ))
        .env_remove("LOCK_INSTANCE"));
    let text = output_of(&json);
    let o = outcome(&json);
    assert!(
        ok && o.failed.is_empty(),
        "go test failed ({:?}):\n{text}",
        o.failed
    );
    assert!(
        o.skipped.is_empty(),
        "go test skipped {:?}:\n{text}",
        o.skipped
    );
    let stack_tests: Vec<&String> = o
        .passed
        .iter()
        .filter(|t| t.starts_with("TestStack"))
        .collect();
    assert!(
        stack_tests.len() >= STACK_TESTS,
        "the stack tests did not all run (passed: {stack_tests:?}):\n{text}"
    );
    eprintln!("{text}");
}

#[test]
fn the_go_client_is_formatted_vetted_and_staticcheck_clean() {
    // gofmt walks the nested module too; vet and staticcheck run per module.
    let (ok, text) = run(Command::new("gofmt").args(["-l", "."]));
    assert!(
        ok && text.trim().is_empty(),
        "gofmt -l lists files:\n{text}"
    );
    for dir in [module(), controller_module()] {
        let (ok, text) = run_in(&dir, Command::new("go").args(["vet", "./..."]));
        assert!(ok, "go vet in {}:\n{text}", dir.display());
    }
    // staticcheck: built once per machine by install-deps.sh, linked into .deps/bin.
    let staticcheck = lock_integration::paths::dep("staticcheck").unwrap();
    for dir in [module(), controller_module()] {
        let (ok, text) = run_in(&dir, Command::new(&staticcheck).arg("./..."));
        assert!(ok, "staticcheck in {}:\n{text}", dir.display());
    }
}
