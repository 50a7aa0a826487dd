//! Issue 21, item 5: the Kubernetes manifests (deploy/kubernetes, rendered from the Helm
//! chart deploy/helm/fenced-lock: tests/helm.rs checks they are fresh) pass the Kubernetes
//! schemas offline (PyPI kubernetes-validate, strict: no unknown fields), and the mesh
//! examples (Istio WasmPlugin, Envoy Gateway EnvoyExtensionPolicy, whose CRDs cannot be
//! installed here) carry a filter configuration the filter accepts.

use lock_integration::paths::workspace_root;
use std::path::{Path, PathBuf};
use std::process::Command;

fn validate(files: &[PathBuf]) -> (bool, String) {
    lock_integration::manifests::validate(files).unwrap()
}

fn manifests(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

#[test]
fn the_manifests_pass_the_kubernetes_schemas() {
    let mut files = manifests(&workspace_root().join("deploy/kubernetes"));
    // The registry's CRDs, generated from its document types (lockctl registry crds).
    files.extend(manifests(&workspace_root().join("deploy/kubernetes/crds")));
    // The etcd clusters: the coord cluster and the entity shards.
    files.extend(manifests(&workspace_root().join("deploy/kubernetes/tiers")));
    assert!(files.len() >= 9, "{files:?}");
    let (ok, out) = validate(&files);
    assert!(ok, "{out}");
    for kind in [
        "storageclass/lock-etcd-local",
        "deployment/lock-arbiter",
        "poddisruptionbudget/lock-arbiter",
        "deployment/lock-edge",
        "networkpolicy/arbiters-from-edge",
        "networkpolicy/etcd-from-arbiters-and-operators",
        "customresourcedefinition/lockclasses.lock.dev",
        "customresourcedefinition/pausetestresults.lock.dev",
        "validatingwebhookconfiguration/lock-registry",
        "deployment/lock-admin",
        "statefulset/lock-etcd-coord",
        "statefulset/lock-etcd-e1",
        "statefulset/lock-etcd-e2",
        "job/lock-epoch-init",
        "job/lock-etcd-coord-roles",
        "job/pause-test-pay-ledger",
        "cronjob/lock-risk-register",
    ] {
        assert!(
            out.contains(&format!("passed for resource {kind}")),
            "{kind}:\n{out}"
        );
    }
}

#[test]
fn a_manifest_the_schema_refuses_fails_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let text =
        std::fs::read_to_string(workspace_root().join("deploy/kubernetes/arbiter.yaml")).unwrap();
    for (what, broken) in [
        (
            "a string replica count",
            text.replace("replicas: 9", "replicas: nine"),
        ),
        (
            "an unknown field",
            text.replace(
                "terminationGracePeriodSeconds: 15",
                "terminationGraceSeconds: 15",
            ),
        ),
    ] {
        assert_ne!(broken, text, "{what}: the edit applied");
        let path = dir.path().join("arbiter.yaml");
        std::fs::write(&path, broken).unwrap();
        let (ok, out) = validate(&[path]);
        assert!(!ok, "{what} passed:\n{out}");
    }
}

#[test]
fn the_mesh_examples_carry_a_filter_configuration_the_filter_accepts() {
    let dir = workspace_root().join("deploy/kubernetes/mesh");
    for (file, kind, config_path) in [
        (
            "istio-wasmplugin.yaml",
            "WasmPlugin",
            &["spec", "pluginConfig"][..],
        ),
        (
            "envoy-gateway-extensionpolicy.yaml",
            "EnvoyExtensionPolicy",
            &["spec", "wasm", "0", "config"][..],
        ),
    ] {
        let doc: serde_json::Value =
            serde_yaml_ng::from_str(&std::fs::read_to_string(dir.join(file)).unwrap()).unwrap();
        assert_eq!(doc["kind"], kind, "{file}");
        assert!(doc["apiVersion"].is_string() && doc["metadata"]["name"].is_string());
        let mut config = &doc;
        for step in config_path {
            config = match step.parse::<usize>() {
                Ok(i) => &config[i],
                Err(_) => &config[*step],
            };
        }
        let parsed: Result<lock_config::FilterConfig, _> = serde_json::from_value(config.clone());
        assert!(parsed.is_ok(), "{file}: {parsed:?}");
    }
}

/// Every flag the etcd StatefulSets pass is one the etcd this project tests against
/// (`.deps/bin/etcd`, the Debian 3.5 build) knows: a misspelt or removed flag would stop
/// every member at start, which no schema check can see.
#[test]
fn the_etcd_manifest_passes_only_flags_etcd_knows() {
    let root = workspace_root().join("deploy/kubernetes");
    let mut manifest = std::fs::read_to_string(root.join("etcd.yaml")).unwrap();
    for f in manifests(&root.join("tiers")) {
        manifest.push_str(&std::fs::read_to_string(f).unwrap());
    }
    assert!(manifest.contains("kind: StatefulSet"), "no etcd cluster");
    let flags: Vec<&str> = manifest
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("- --"))
        .map(|f| f.split(['=', ' ']).next().unwrap_or(f))
        .collect();
    for kept in [
        "experimental-enable-lease-checkpoint",
        "experimental-enable-lease-checkpoint-persist",
        "auto-compaction-retention",
        "quota-backend-bytes",
        "client-cert-auth",
        "peer-client-cert-auth",
    ] {
        assert!(flags.contains(&kept), "--{kept} missing: {flags:?}");
    }
    let etcd = lock_integration::paths::dep("etcd").unwrap();
    let out = Command::new(etcd).arg("--help").output().unwrap();
    let help = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for flag in flags {
        assert!(
            help.contains(&format!("--{flag} ")) || help.contains(&format!("--{flag}\n")),
            "the etcd manifests pass --{flag}, which etcd --help does not list"
        );
    }
}
