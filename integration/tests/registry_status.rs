//! Versions you can see (issue 23, item 2): two edge Envoys and two arbiters; `lockctl
//! registry status` asks each which version it serves (the filter's
//! `lock_edge.config_version` gauge, set in `on_configure`; the arbiter's `/status`) and
//! compares it with what the registry folder compiles to.

use lock_integration::envoy::{Envoy, EnvoyConfig};
use lock_integration::paths::{dev_registry, workspace_bin};
use lock_integration::pki::{ORDERS, TRUST_DOMAIN};
use lock_integration::process::eventually;
use lock_integration::registry::dev_registry_with_grant;
use lock_integration::{Stack, StackOptions};
use std::path::Path;
use std::time::Duration;

fn status(registry: &Path, envoys: &[&Envoy], arbiters: &[String]) -> (Option<i32>, String) {
    let envoys: Vec<String> = envoys.iter().map(|e| e.admin.to_string()).collect();
    let out = std::process::Command::new(workspace_bin("lockctl").unwrap())
        .args(["registry", "status"])
        .arg(registry)
        .args(["--region", "local", "--trust-domain", TRUST_DOMAIN])
        .args(["--envoy-admin", &envoys.join(",")])
        .args(["--arbiter-admin", &arbiters.join(",")])
        .output()
        .unwrap();
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn states(text: &str) -> Vec<String> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            Some(format!("{} {}", cols.first()?, cols.get(4)?))
        })
        .collect()
}

fn push(registry: &Path, ecds: &Path, wasm: &Path) {
    let out = std::process::Command::new(workspace_bin("lockctl").unwrap())
        .args(["grants", "push"])
        .arg(registry)
        .args(["--region", "local", "--trust-domain", TRUST_DOMAIN, "--out"])
        .arg(ecds)
        .arg("--wasm")
        .arg(wasm)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn status_names_who_serves_which_version() {
    let stack = Stack::start(StackOptions::default()).await.unwrap();
    // A second edge Envoy with its own ECDS file (its certificates copied beside it).
    let second = stack.dir.join("edge-2");
    let pki = second.join("pki");
    std::fs::create_dir_all(&pki).unwrap();
    for e in std::fs::read_dir(&stack.pki.dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, pki.join(p.file_name().unwrap())).unwrap();
        }
    }
    let config = EnvoyConfig::new(
        &pki,
        stack.envoy_config.filter.clone(),
        stack.arbiters.iter().map(|a| a.addr).collect(),
    )
    .unwrap();
    let mut envoy2 = Envoy::start(&second, &config).unwrap();
    let arbiters: Vec<String> = stack.arbiters.iter().map(|a| a.admin.to_string()).collect();

    // Everyone serves the dev registry.
    let (code, out) = status(&dev_registry(), &[&stack.envoy, &envoy2], &arbiters);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(
        states(&out),
        [
            "envoy current",
            "envoy current",
            "arbiter current",
            "arbiter current"
        ],
        "{out}"
    );

    // A change pushed to the first Envoy only: it serves the new version, the second
    // Envoy is stale, and so are the arbiters (they read their registry at start).
    let changed = tempfile::tempdir().unwrap();
    dev_registry_with_grant(changed.path(), ORDERS, "pay/ledger").unwrap();
    assert!(stack.push_grants(changed.path()).unwrap().status.success());
    let envoys = [&stack.envoy, &envoy2];
    let out = eventually(Duration::from_secs(20), || {
        let (code, out) = status(changed.path(), &envoys, &arbiters);
        async move {
            anyhow::ensure!(states(&out)[0] == "envoy current", "not yet: {out}");
            Ok((code, out))
        }
    })
    .await
    .unwrap();
    assert_eq!(out.0, Some(1), "{}", out.1);
    assert_eq!(
        states(&out.1),
        [
            "envoy current",
            "envoy STALE",
            "arbiter STALE",
            "arbiter STALE"
        ],
        "{}",
        out.1
    );

    // Pushed to the second as well: both Envoys current.
    push(changed.path(), &config.ecds_path(), &config.wasm);
    let out = eventually(Duration::from_secs(20), || {
        let (_, out) = status(changed.path(), &envoys, &arbiters);
        async move {
            anyhow::ensure!(states(&out)[1] == "envoy current", "not yet: {out}");
            Ok(out)
        }
    })
    .await
    .unwrap();
    assert_eq!(
        &states(&out)[..2],
        ["envoy current", "envoy current"],
        "{out}"
    );

    // An Envoy that does not answer: exit 3, named.
    envoy2.proc.kill();
    let (code, out) = status(changed.path(), &[&stack.envoy, &envoy2], &arbiters);
    assert_eq!(code, Some(3), "{out}");
    assert!(out.contains("UNREACHABLE"), "{out}");
}
