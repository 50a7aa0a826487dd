//! Issue 20, item 3: the Python client (clients/python) against the real stack. Each test
//! starts a stack, points the package's pytest suite at it through the environment
//! (endpoint, two test identities' SVIDs, a mesh sidecar, etcd for the expiry watch,
//! Envoy's pid for the edge-killed case) and requires every selected test to pass, none
//! skipped.

use lock_integration::Stack;
use lock_integration::paths::workspace_root;
use lock_integration::registry::{
    FAST_PREFIX, FAST_TTL, SEM_PERMITS, SEM_PREFIX, SHARED_PREFIX, waiter_id,
};
use lock_integration::sidecar::Sidecar;
use std::process::Command;

fn pytest(stack: &Stack, sidecar: Option<&Sidecar>, marks: &str) -> String {
    pytest_with(stack, sidecar, marks, &[])
}

fn pytest_with(
    stack: &Stack,
    sidecar: Option<&Sidecar>,
    marks: &str,
    env: &[(&str, String)],
) -> String {
    let root = workspace_root();
    let python = root.join(".deps/python-venv/bin/python");
    assert!(
        python.exists(),
        "{} missing: run integration/scripts/install-deps.sh (make test does)",
        python.display()
    );
    let me = stack.pki.svid("py-w3", &waiter_id(3)).unwrap();
    let other = stack.pki.svid("py-w4", &waiter_id(4)).unwrap();
    let mut cmd = Command::new(python);
    cmd.current_dir(root.join("clients/python"))
        .args([
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-rs",
            "-q",
            "-s",
            "-m",
            marks,
        ])
        .env("LOCK_ENDPOINT", stack.endpoint())
        .env("LOCK_SVID", &me.cert)
        .env("LOCK_SVID_KEY", &me.key)
        .env("LOCK_CA", &me.ca)
        .env("LOCK_OTHER_SVID", &other.cert)
        .env("LOCK_OTHER_SVID_KEY", &other.key)
        .env("LOCK_TEST_PREFIX", FAST_PREFIX)
        .env("LOCK_TEST_SHARED_PREFIX", SHARED_PREFIX)
        .env("LOCK_TEST_SEM_PREFIX", SEM_PREFIX)
        .env("LOCK_TEST_SEM_PERMITS", SEM_PERMITS.to_string())
        .env("LOCK_TEST_TTL", FAST_TTL.to_string())
        .env("LOCK_ETCD", &stack.etcd.client_url)
        .env(
            "LOCK_ETCDCTL",
            lock_integration::paths::dep("etcdctl").unwrap(),
        )
        .envs(stack.etcd.pki.lockctl_env("operator"))
        .env(
            "LOCK_ENVOY_PID",
            stack.envoy.proc.pid().unwrap_or_default().to_string(),
        )
        .env("LOCK_ENVOY_ADMIN", stack.envoy.admin.to_string())
        .env("PYTHONDONTWRITEBYTECODE", "1");
    if let Some(s) = sidecar {
        cmd.env("LOCK_SIDECAR_ENDPOINT", s.endpoint());
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "pytest -m {marks:?} failed:\n{text}");
    assert!(!text.contains("skipped"), "pytest skipped tests:\n{text}");
    text
}

#[tokio::test]
async fn the_python_client_passes_its_suite_against_the_stack() {
    let (stack, _reg) = Stack::with_test_registry().await.unwrap();
    let svid = stack.pki.svid("py-w3-mesh", &waiter_id(3)).unwrap();
    let sidecar = Sidecar::start(&stack.dir.join("py-sidecar"), stack.envoy.listen, &svid).unwrap();
    let out = pytest(&stack, Some(&sidecar), "not kills_edge and not shards");
    eprintln!("{out}");
}

#[tokio::test]
async fn the_python_client_fences_before_the_lease_expires_when_the_edge_dies() {
    let (stack, _reg) = Stack::with_test_registry().await.unwrap();
    let out = pytest(&stack, None, "kills_edge");
    eprintln!("{out}");
}

/// Tiers and shards: on a stack with two entity shards (homes = whole keys), two keys the
/// map puts on different shards; the client opens a session on each cluster.
#[tokio::test]
async fn the_python_client_opens_a_session_where_each_key_lives() {
    let (stack, _reg, [e1, e2]) = Stack::with_two_shards(&format!("{FAST_PREFIX}/py-shard"))
        .await
        .unwrap();
    let keys = format!("{e1},{e2}");
    let out = pytest_with(&stack, None, "shards", &[("LOCK_SHARD_KEYS", keys)]);
    eprintln!("{out}");
}
