//! The gate's second checker (`integration/porcupine`, Go) kept as the Go client is: its
//! own tests under the race detector (hand-made histories: legal turns, two holders, a
//! token going back, a stale write accepted, a grant of unknown outcome, a search that runs
//! out of time reported unknown), formatted, vetted and staticcheck-clean. The gate's runs
//! exercise it on real histories; these run in seconds.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use lock_integration::paths::workspace_root;
use std::process::Command;

fn run(cmd: &mut Command) -> (bool, String) {
    let dir = workspace_root().join("integration/porcupine");
    let out = cmd
        .current_dir(&dir)
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e} (is Go 1.26 installed and on the PATH?)"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn porcupine_checker_passes_its_go_tests() {
    let (ok, text) = run(Command::new("go").args(["test", "-race", "-count=1", "./..."]));
    assert!(ok, "go test -race:\n{text}");
}

#[test]
fn porcupine_checker_is_formatted_vetted_and_staticcheck_clean() {
    let (ok, text) = run(Command::new("gofmt").args(["-l", "."]));
    assert!(
        ok && text.trim().is_empty(),
        "gofmt -l lists files:\n{text}"
    );
    let (ok, text) = run(Command::new("go").args(["vet", "./..."]));
    assert!(ok, "go vet:\n{text}");
    let staticcheck = lock_integration::paths::dep("staticcheck").unwrap();
    let (ok, text) = run(Command::new(&staticcheck).arg("./..."));
    assert!(ok, "staticcheck:\n{text}");
}
