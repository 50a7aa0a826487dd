//! Issue 32, item 3: the Node client (clients/node) against the real stack. Its unit suite
//! runs with `node --test`; each stack test starts a stack and points one of the package's
//! stack suites at it through the environment (endpoint, two identities' SVIDs, a mesh
//! sidecar, etcd for the expiry watch, Envoy's pid for the edge-killed case), the same
//! cases as the Python client's, and requires every test to pass, none skipped.

use lock_integration::Stack;
use lock_integration::paths::workspace_root;
use lock_integration::registry::{
    FAST_PREFIX, FAST_TTL, SEM_PERMITS, SEM_PREFIX, SHARED_PREFIX, waiter_id,
};
use lock_integration::sidecar::Sidecar;
use std::path::PathBuf;
use std::process::Command;

fn package() -> PathBuf {
    let dir = workspace_root().join("clients/node");
    assert!(
        dir.join("node_modules/@grpc/grpc-js").exists(),
        "clients/node/node_modules missing: run integration/scripts/install-deps.sh (make test does)"
    );
    dir
}

/// Compiles the package (tsc) so the suites run against what would be published.
fn build() {
    let dir = package();
    let out = Command::new(dir.join("node_modules/.bin/tsc"))
        .args(["-p", "."])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tsc failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `node --test FILE`: passes, and reports no test skipped.
fn node_test(file: &str, env: &[(String, String)]) -> String {
    build();
    let out = Command::new("node")
        .args(["--test", "--test-concurrency=1", file])
        .current_dir(package())
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "node --test {file} failed:\n{text}");
    assert!(text.contains("# fail 0"), "{text}");
    assert!(text.contains("# skipped 0"), "node skipped tests:\n{text}");
    text
}

fn stack_env(stack: &Stack) -> Vec<(String, String)> {
    let me = stack.pki.svid("node-w3", &waiter_id(3)).unwrap();
    let other = stack.pki.svid("node-w4", &waiter_id(4)).unwrap();
    let s = |p: &std::path::Path| p.display().to_string();
    let env = vec![
        ("LOCK_ENDPOINT", stack.endpoint()),
        ("LOCK_SVID", s(&me.cert)),
        ("LOCK_SVID_KEY", s(&me.key)),
        ("LOCK_CA", s(&me.ca)),
        ("LOCK_OTHER_SVID", s(&other.cert)),
        ("LOCK_OTHER_SVID_KEY", s(&other.key)),
        ("LOCK_TEST_PREFIX", FAST_PREFIX.to_owned()),
        ("LOCK_TEST_SHARED_PREFIX", SHARED_PREFIX.to_owned()),
        ("LOCK_TEST_SEM_PREFIX", SEM_PREFIX.to_owned()),
        ("LOCK_TEST_SEM_PERMITS", SEM_PERMITS.to_string()),
        ("LOCK_TEST_TTL", FAST_TTL.to_string()),
        ("LOCK_ETCD", stack.etcd.client_url.clone()),
        (
            "LOCK_ETCDCTL",
            s(&lock_integration::paths::dep("etcdctl").unwrap()),
        ),
        (
            "LOCK_ENVOY_PID",
            stack.envoy.proc.pid().unwrap_or_default().to_string(),
        ),
        ("LOCK_ENVOY_ADMIN", stack.envoy.admin.to_string()),
    ];
    env.into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .chain(stack.etcd.pki.lockctl_env("operator"))
        .collect()
}

/// Every suite that needs no stack: units, the metrics, the calls and the permits against
/// the in-process fake lock.v1 service, and the conformance driver's own protocol.
#[test]
fn the_node_client_passes_its_unit_suite() {
    for file in [
        "test/units.test.mjs",
        "test/metrics.test.mjs",
        "test/calls.test.mjs",
        "test/permit.test.mjs",
        "test/driver.test.mjs",
    ] {
        let out = node_test(file, &[]);
        eprintln!("{out}");
    }
}

#[tokio::test]
async fn the_node_client_passes_its_suite_against_the_stack() {
    let (stack, _reg) = Stack::with_test_registry().await.unwrap();
    let svid = stack.pki.svid("node-w3-mesh", &waiter_id(3)).unwrap();
    let sidecar =
        Sidecar::start(&stack.dir.join("node-sidecar"), stack.envoy.listen, &svid).unwrap();
    let mut env = stack_env(&stack);
    env.push(("LOCK_SIDECAR_ENDPOINT".into(), sidecar.endpoint()));
    let out = node_test("test/stack.test.mjs", &env);
    eprintln!("{out}");
}

#[tokio::test]
async fn the_node_client_fences_before_the_lease_expires_when_the_edge_dies() {
    let (stack, _reg) = Stack::with_test_registry().await.unwrap();
    let out = node_test("test/kills_edge.test.mjs", &stack_env(&stack));
    eprintln!("{out}");
}

/// Tiers and shards: two keys the map puts on different shards.
#[tokio::test]
async fn the_node_client_opens_a_session_where_each_key_lives() {
    let (stack, _reg, [e1, e2]) = Stack::with_two_shards(&format!("{FAST_PREFIX}/node-shard"))
        .await
        .unwrap();
    let mut env = stack_env(&stack);
    env.push(("LOCK_SHARD_KEYS".into(), format!("{e1},{e2}")));
    let out = node_test("test/shards.test.mjs", &env);
    eprintln!("{out}");
}

/// The package ships its own copy of the protos (a published package cannot reach into the
/// repository); it must be the one lock-config compiles, byte for byte.
#[test]
fn the_shipped_protos_are_lock_configs() {
    let root = workspace_root();
    for p in ["lock/v1/lock.proto", "google/rpc/status.proto"] {
        let shipped = std::fs::read(root.join("clients/node/proto").join(p)).unwrap();
        let source = std::fs::read(root.join("config/proto").join(p)).unwrap();
        assert!(
            shipped == source,
            "clients/node/proto/{p} differs from config/proto/{p}: copy it over"
        );
    }
}
