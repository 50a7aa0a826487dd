//! `make run`'s launcher and the README's lockctl example, end to end: `devstack` brings the
//! stack up, writes env.sh, and the printed commands take and release a lock.

use lock_integration::paths::workspace_bin;
use lock_integration::process::{Proc, free_port, patience};
use std::process::Command;

#[test]
fn devstack_serves_the_readme_example() {
    let dir = tempfile::tempdir().unwrap();
    let stack_dir = dir.path().join("stack");
    let mut cmd = Command::new(workspace_bin("devstack").unwrap());
    cmd.arg("--dir")
        .arg(&stack_dir)
        .args(["--port", &free_port().unwrap().to_string()])
        .args(["--admin-port", &free_port().unwrap().to_string()]);
    let mut devstack = Proc::spawn("devstack", cmd, dir.path()).unwrap();
    devstack
        .wait_for_line("stop with: make stop", patience())
        .unwrap();
    let ready = std::fs::read_to_string(stack_dir.join("ready")).unwrap();
    assert!(ready.contains("lockctl acquire pay/ledger/42"), "{ready}");

    let env = stack_dir.join("env.sh");
    let script = format!(
        "set -e; source {env}; out=$(lockctl acquire pay/ledger/42); echo \"$out\"; \
         token=$(echo \"$out\" | sed -n 's/^token=\\([0-9]*\\).*/\\1/p'); lockctl release pay/ledger/42 \"$token\"",
        env = env.display()
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("epoch=1") && stdout.contains("released pay/ledger/42"),
        "{stdout}"
    );

    // SIGTERM tears the whole stack down.
    devstack.terminate(patience());
}
