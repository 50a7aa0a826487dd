//! The Helm chart (`deploy/helm/fenced-lock`): it lints strictly with each values set in
//! its `ci/` folder, each set renders objects the Kubernetes 1.37 schemas accept (PyPI
//! kubernetes-validate, strict) with the layout the records size, every container runs
//! locked down, production refuses an image without a digest, the values schema refuses a
//! wrong type, and `deploy/kubernetes` is what the chart renders now.

use lock_integration::paths::{dep, workspace_root};
use lock_integration::process::run_text;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Kinds of other projects' CRDs (Istio, prometheus-operator, spire-controller-manager):
/// kubernetes-validate has no schema for them, so they are checked here by hand.
const FOREIGN_KINDS: [&str; 3] = ["WasmPlugin", "PodMonitor", "ClusterSPIFFEID"];

/// A values set's expectations: its name, resources that must pass the schemas, and
/// (kind, name, replicas) wanted.
type Expected<'a> = (&'a str, &'a [&'a str], &'a [(&'a str, &'a str, u64)]);

fn chart() -> PathBuf {
    workspace_root().join("deploy/helm/fenced-lock")
}

fn values(set: &str) -> PathBuf {
    chart().join(format!("ci/{set}-values.yaml"))
}

fn helm(args: &[&str]) -> (bool, String) {
    run_text(Command::new(dep("helm").unwrap()).args(args)).unwrap()
}

fn lint(values: &Path) -> (bool, String) {
    helm(&[
        "lint",
        "--strict",
        chart().to_str().unwrap(),
        "-f",
        values.to_str().unwrap(),
    ])
}

/// `helm template` as render-manifests.sh runs it (release and namespace `lock`).
fn template(values: &Path, extra: &[&str]) -> (bool, String) {
    let chart = chart();
    let values = values.to_str().unwrap();
    let mut args = vec![
        "template",
        "lock",
        chart.to_str().unwrap(),
        "--namespace",
        "lock",
        "--kube-version",
        "1.37.0",
        "-f",
        values,
    ];
    args.extend_from_slice(extra);
    let out = Command::new(dep("helm").unwrap())
        .args(&args)
        .output()
        .unwrap();
    if out.status.success() {
        (true, String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        (false, String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The rendered documents: (text, parsed), empty ones left out.
fn documents(rendered: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut doc = String::new();
    for line in rendered.lines().chain(std::iter::once("---")) {
        if line.trim_end() == "---" {
            let v: Value = serde_yaml_ng::from_str(&doc).unwrap_or(Value::Null);
            if !v.is_null() {
                out.push((std::mem::take(&mut doc), v));
            }
            doc.clear();
        } else {
            doc.push_str(line);
            doc.push('\n');
        }
    }
    out
}

fn find<'a>(docs: &'a [(String, Value)], kind: &str, name: &str) -> Option<&'a Value> {
    docs.iter()
        .map(|(_, v)| v)
        .find(|v| v["kind"] == kind && v["metadata"]["name"] == name)
}

fn validate(files: &[PathBuf]) -> (bool, String) {
    lock_integration::manifests::validate(files).unwrap()
}

/// Every pod template among `docs`: (where, pod spec).
fn pod_specs(docs: &[(String, Value)]) -> Vec<(String, &Value)> {
    let mut out = Vec::new();
    for (_, d) in docs {
        let name = format!(
            "{}/{}",
            d["kind"].as_str().unwrap_or("?"),
            d["metadata"]["name"]
        );
        let spec = match d["kind"].as_str() {
            Some("Deployment" | "StatefulSet" | "Job") => &d["spec"]["template"]["spec"],
            Some("CronJob") => &d["spec"]["jobTemplate"]["spec"]["template"]["spec"],
            _ => continue,
        };
        out.push((name, spec));
    }
    out
}

#[test]
fn the_chart_lints_strictly_with_each_values_set() {
    for set in ["dev", "production", "istio"] {
        let (ok, out) = lint(&values(set));
        assert!(ok, "helm lint --strict -f ci/{set}-values.yaml:\n{out}");
    }
}

#[test]
fn each_values_set_renders_what_the_kubernetes_schemas_accept() {
    let sets: [Expected; 3] = [
        (
            "dev",
            &[
                "statefulset/lock-etcd",
                "deployment/lock-arbiter",
                "deployment/lock-edge",
                "job/lock-etcd-roles",
                "job/lock-epoch-init",
                "cronjob/lock-risk-register",
                "validatingwebhookconfiguration/lock-registry",
                "configmap/lock-prometheus-scrape",
            ],
            &[
                ("StatefulSet", "lock-etcd", 3),
                ("Deployment", "lock-arbiter", 2),
                ("Deployment", "lock-edge", 1),
            ],
        ),
        (
            "production",
            &[
                "statefulset/lock-etcd-coord",
                "statefulset/lock-etcd-e1",
                "statefulset/lock-etcd-e2",
                "deployment/lock-arbiter",
                "poddisruptionbudget/lock-arbiter",
                "deployment/lock-edge",
                "deployment/lock-admin",
                "deployment/lock-audit",
                "deployment/lock-audit-e1",
                "deployment/lock-webhook",
                "validatingwebhookconfiguration/lock-registry",
                "networkpolicy/etcd-from-arbiters-and-operators",
                "job/lock-epoch-init",
                "job/lock-etcd-e2-roles",
                "cronjob/lock-etcd-coord-defrag",
                "cronjob/lock-risk-register",
                "job/pause-test-pay-ledger",
                "configmap/lock-prometheus-scrape",
            ],
            &[
                ("StatefulSet", "lock-etcd-coord", 5),
                ("StatefulSet", "lock-etcd-e1", 3),
                ("StatefulSet", "lock-etcd-e2", 3),
                ("Deployment", "lock-arbiter", 9),
                ("Deployment", "lock-edge", 6),
            ],
        ),
        (
            "istio",
            &[
                "statefulset/lock-etcd",
                "deployment/lock-arbiter",
                "job/lock-epoch-init",
            ],
            &[("StatefulSet", "lock-etcd", 3)],
        ),
    ];
    let tmp = tempfile::tempdir().unwrap();
    for (set, must_pass, replicas) in sets {
        let (ok, rendered) = template(&values(set), &[]);
        assert!(ok, "{set}: {rendered}");
        let docs = documents(&rendered);
        let ours: Vec<&str> = docs
            .iter()
            .filter(|(_, v)| !FOREIGN_KINDS.contains(&v["kind"].as_str().unwrap_or("")))
            .map(|(t, _)| t.as_str())
            .collect();
        let file = tmp.path().join(format!("{set}.yaml"));
        std::fs::write(&file, ours.join("---\n")).unwrap();
        let (ok, out) = validate(&[file]);
        assert!(ok, "{set}:\n{out}");
        for name in must_pass {
            assert!(
                out.contains(&format!("passed for resource {name}")),
                "{set}: {name}:\n{out}"
            );
        }
        for (kind, name, want) in replicas {
            let obj = find(&docs, kind, name).unwrap_or_else(|| panic!("{set}: no {kind} {name}"));
            assert_eq!(obj["spec"]["replicas"], *want, "{set}: {kind} {name}");
        }
        // Every container, init containers too, runs locked down.
        for (where_, spec) in pod_specs(&docs) {
            for c in spec["containers"]
                .as_array()
                .into_iter()
                .chain(spec["initContainers"].as_array())
                .flatten()
            {
                let sc = &c["securityContext"];
                let what = format!("{set}: {where_} container {}", c["name"]);
                assert_eq!(sc["runAsNonRoot"], true, "{what}");
                assert_eq!(sc["runAsUser"], 65532, "{what}");
                assert_eq!(sc["readOnlyRootFilesystem"], true, "{what}");
                assert_eq!(sc["allowPrivilegeEscalation"], false, "{what}");
                assert_eq!(
                    sc["capabilities"]["drop"],
                    serde_json::json!(["ALL"]),
                    "{what}"
                );
                if set == "production" {
                    let image = c["image"].as_str().unwrap_or_default();
                    assert!(image.contains("@sha256:"), "{what}: {image}");
                }
            }
        }
        // The first epoch is a post-install hook: `epoch init` on one cluster, `shards init`
        // (every cluster's first epoch from coord's allocator) with shards.
        let init = find(&docs, "Job", "lock-epoch-init").unwrap();
        assert_eq!(
            init["metadata"]["annotations"]["helm.sh/hook"],
            "post-install"
        );
        let args = init["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
        if set == "production" {
            assert!(
                args.contains("\"shards\",\"init\"")
                    && args
                        .contains("--shard=e1=https://lock-etcd-e1-0.lock-etcd-e1.lock.svc:2379")
                    && args.contains("--shard=e2="),
                "{args}"
            );
            let arbiter = find(&docs, "Deployment", "lock-arbiter").unwrap();
            let spec = &arbiter["spec"]["template"]["spec"];
            let a = spec["containers"][0]["args"].to_string();
            assert!(
                a.contains("\"--shards\"") && a.contains("lock-etcd-coord-4"),
                "{a}"
            );
            let spread = &spec["topologySpreadConstraints"][0];
            assert_eq!(spread["topologyKey"], "topology.kubernetes.io/zone");
            assert_eq!(spread["whenUnsatisfiable"], "DoNotSchedule");
            assert_eq!(
                spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                    [0]["topologyKey"],
                "kubernetes.io/hostname"
            );
        } else {
            assert_eq!(args, r#"["epoch","init"]"#);
        }
        let register = find(&docs, "CronJob", "lock-risk-register").unwrap();
        assert_eq!(register["spec"]["schedule"], "0 3 * * *", "nightly");
        // Other projects' kinds: rendered only where asked for.
        let foreign: Vec<&Value> = docs
            .iter()
            .map(|(_, v)| v)
            .filter(|v| FOREIGN_KINDS.contains(&v["kind"].as_str().unwrap_or("")))
            .collect();
        if set == "istio" {
            assert!(
                find(&docs, "Deployment", "lock-edge").is_none(),
                "no edge Envoy in mesh mode"
            );
            assert_eq!(foreign.len(), 1, "{foreign:?}");
            let plugin = foreign[0];
            assert_eq!(plugin["kind"], "WasmPlugin");
            assert!(
                plugin["spec"]["url"]
                    .as_str()
                    .unwrap()
                    .starts_with("oci://")
            );
            let parsed: Result<lock_config::FilterConfig, _> =
                serde_json::from_value(plugin["spec"]["pluginConfig"].clone());
            assert!(parsed.is_ok(), "{parsed:?}");
        } else {
            assert!(foreign.is_empty(), "{set}: {foreign:?}");
        }
    }
}

#[test]
fn the_optional_crd_kinds_render_when_asked() {
    let (ok, rendered) = template(
        &values("dev"),
        &[
            "--set",
            "monitoring.podMonitors.enabled=true",
            "--set",
            "spire.clusterSPIFFEIDs.enabled=true",
        ],
    );
    assert!(ok, "{rendered}");
    let docs = documents(&rendered);
    let kinds: Vec<&str> = docs
        .iter()
        .filter_map(|(_, v)| v["kind"].as_str())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "PodMonitor").count(),
        4,
        "{kinds:?}"
    );
    let ids = find(&docs, "ClusterSPIFFEID", "lock-edge").unwrap();
    assert_eq!(
        ids["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"],
        "lock-edge"
    );
}

#[test]
fn production_refuses_an_image_without_a_digest() {
    let (ok, out) = template(&values("production"), &["--set", "images.arbiter.digest="]);
    assert!(!ok, "rendered without the arbiter's digest");
    assert!(out.contains("images.arbiter.digest is required"), "{out}");
    assert!(out.contains("fenced-lock-arbiter"), "{out}");
    // Without requireDigests the same values render tags.
    let (ok, out) = template(
        &values("production"),
        &[
            "--set",
            "images.arbiter.digest=",
            "--set",
            "global.requireDigests=false",
        ],
    );
    assert!(ok, "{out}");
    assert!(
        out.contains("image: ghcr.io/fenced-lock/fenced-lock-arbiter:0.1.0"),
        "the appVersion tag"
    );
}

#[test]
fn the_values_schema_refuses_a_wrong_type() {
    let tmp = tempfile::tempdir().unwrap();
    for (what, text, needle) in [
        (
            "a string replica count",
            "arbiter: {replicas: nine}\n",
            "replicas",
        ),
        (
            "a digest that is not sha256",
            "images: {etcd: {repository: quay.io/coreos/etcd, digest: latest}}\n",
            "digest",
        ),
        ("a misspelt value", "arbiter: {replica: 9}\n", "replica"),
    ] {
        let f = tmp.path().join("bad.yaml");
        std::fs::write(&f, text).unwrap();
        let (ok, out) = lint(&f);
        assert!(!ok, "{what} passed helm lint:\n{out}");
        assert!(out.contains(needle), "{what}:\n{out}");
    }
}

#[test]
fn deploy_kubernetes_is_what_the_chart_renders() {
    let stale = lock_integration::manifests::stale().unwrap();
    assert_eq!(
        stale,
        Vec::<String>::new(),
        "run `{}` (or `make docs`)",
        lock_integration::manifests::SCRIPT
    );
    // envoy/production.yaml is the edge bootstrap the chart renders with its defaults.
    let root = workspace_root();
    let (ok, rendered) = template(
        &chart().join("values.yaml"),
        &["--show-only", "templates/edge.yaml"],
    );
    assert!(ok, "{rendered}");
    let bootstrap = documents(&rendered)
        .into_iter()
        .find(|(_, v)| v["kind"] == "ConfigMap" && v["metadata"]["name"] == "lock-edge-bootstrap")
        .map(|(_, v)| v["data"]["envoy.yaml"].as_str().unwrap().to_owned())
        .unwrap();
    assert_eq!(
        bootstrap,
        std::fs::read_to_string(root.join("envoy/production.yaml")).unwrap(),
        "envoy/production.yaml is stale: write the chart's default edge bootstrap to it \
         (helm template lock deploy/helm/fenced-lock -n lock --show-only templates/edge.yaml)"
    );
    // appVersion is the workspace version (the default image tag).
    let cargo = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let version = cargo
        .lines()
        .find_map(|l| l.strip_prefix("version = "))
        .unwrap()
        .trim_matches('"');
    let chart_yaml: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(chart().join("Chart.yaml")).unwrap())
            .unwrap();
    assert_eq!(chart_yaml["appVersion"], version);
}
