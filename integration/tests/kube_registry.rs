//! The registry as Kubernetes resources (issue 23, item 4): the CRDs are generated from the
//! document types and committed in step; the example CRs pass the generated schemas
//! (check-jsonschema) and the registry's rules; CRs exported from a cluster load as the same
//! registry the reviewed YAML gives; and the validating webhook, over HTTPS, admits and
//! refuses real AdmissionReview requests by the registry's one validation.

use lock_config::registry::{Date, Registry};
use lock_devca::{DevCa, Leaf};
use lock_integration::paths::{workspace_bin, workspace_root};
use lock_integration::process::{Proc, free_port, patience};
use lock_store::registry_files;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

fn lockctl(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(workspace_bin("lockctl").unwrap())
        .args(args)
        .current_dir(workspace_root())
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

#[test]
fn the_committed_crds_are_the_generated_ones() {
    let (code, out) = lockctl(&["registry", "crds", "--check"]);
    assert_eq!(code, Some(0), "{out}");
    // The chart's CRDs (deploy/kubernetes/crds is their copy, tests/helm.rs).
    let (code, out) = lockctl(&[
        "registry",
        "crds",
        "--check",
        "--out",
        "deploy/helm/fenced-lock/crds",
    ]);
    assert_eq!(code, Some(0), "{out}");
    // The check itself: a hand edit is found.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_str().unwrap();
    assert_eq!(lockctl(&["registry", "crds", "--out", dir]).0, Some(0));
    let f = tmp.path().join("lockclasses.lock.dev.yaml");
    let text = std::fs::read_to_string(&f).unwrap();
    std::fs::write(
        &f,
        text.replace("- advisory", "- advisory\n                - maybe"),
    )
    .unwrap();
    let (code, out) = lockctl(&["registry", "crds", "--check", "--out", dir]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("lockclasses.lock.dev.yaml: differs"), "{out}");
}

/// Each kind's openAPIV3Schema, from the committed CRDs.
fn schemas() -> Vec<(String, Value)> {
    let dir = workspace_root().join("deploy/kubernetes/crds");
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
        let crd: Value = serde_yaml_ng::from_str(&text).unwrap();
        let kind = crd["spec"]["names"]["kind"].as_str().unwrap().to_owned();
        out.push((
            kind,
            crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone(),
        ));
    }
    out
}

fn documents(dir: &Path) -> Vec<Value> {
    use serde::Deserialize as _;
    let mut out = Vec::new();
    for s in registry_files::read_sources(dir).unwrap() {
        for de in serde_yaml_ng::Deserializer::from_str(&s.text) {
            let v = serde_yaml_ng::Value::deserialize(de).unwrap();
            if !v.is_null() {
                out.push(serde_json::to_value(v).unwrap());
            }
        }
    }
    out
}

/// check-jsonschema of `docs` against their kinds' schemas; Err(output) if any fails.
fn check_jsonschema(docs: &[Value], tmp: &Path) -> Result<usize, String> {
    let tool = workspace_root().join(".deps/python-venv/bin/check-jsonschema");
    let mut checked = 0;
    for (kind, schema) in schemas() {
        let schema_file = tmp.join(format!("{kind}.schema.json"));
        std::fs::write(&schema_file, schema.to_string()).unwrap();
        let mut instances = Vec::new();
        for (i, d) in docs
            .iter()
            .filter(|d| d["kind"] == kind.as_str())
            .enumerate()
        {
            let f = tmp.join(format!("{kind}-{i}.json"));
            std::fs::write(&f, d.to_string()).unwrap();
            instances.push(f);
        }
        if instances.is_empty() {
            continue;
        }
        let out = Command::new(&tool)
            .arg("--schemafile")
            .arg(&schema_file)
            .args(&instances)
            .output()
            .unwrap();
        if !out.status.success() {
            return Err(format!(
                "{kind}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        checked += instances.len();
    }
    Ok(checked)
}

#[test]
fn the_example_crs_pass_the_generated_schemas_and_the_rules() {
    let examples = workspace_root().join("deploy/kubernetes/registry");
    let docs = documents(&examples);
    let tmp = tempfile::tempdir().unwrap();
    let checked = check_jsonschema(&docs, tmp.path()).unwrap();
    assert_eq!(checked, docs.len(), "every example checked");
    for kind in ["Namespace", "LockClass", "LockGrant", "PauseTestResult"] {
        assert!(docs.iter().any(|d| d["kind"] == kind), "an example {kind}");
    }
    // The schema check can fail: a wrong enum value, a string TTL, a missing field.
    for (what, broken) in [
        ("enum", json!({"enforcement": "maybe"})),
        ("type", json!({"ttlSeconds": "15"})),
    ] {
        let mut bad = docs
            .iter()
            .find(|d| d["kind"] == "LockClass")
            .unwrap()
            .clone();
        for (k, v) in broken.as_object().unwrap() {
            bad["spec"][k] = v.clone();
        }
        let out = check_jsonschema(&[bad], tmp.path());
        assert!(
            out.is_err(),
            "a LockClass with a bad {what} passed the schema"
        );
    }
    let mut missing = docs
        .iter()
        .find(|d| d["kind"] == "LockGrant")
        .unwrap()
        .clone();
    missing["spec"].as_object_mut().unwrap().remove("spiffeId");
    assert!(check_jsonschema(&[missing], tmp.path()).is_err());
    // And the registry's rules, on the day the examples were written (a pause-test result
    // expires, so the date is fixed here, not today).
    let sources = registry_files::read_sources(&examples).unwrap();
    let reg = Registry::load(&sources, Date::parse("2026-12-04").unwrap());
    assert!(reg.is_ok(), "{:?}", reg.err());
}

/// `kubectl get ... -o yaml` of `docs`: one List, each item with server-set metadata.
fn exported(docs: &[Value]) -> String {
    let items: Vec<Value> = docs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let mut d = d.clone();
            let meta = d["metadata"].as_object_mut().unwrap();
            meta.insert("namespace".into(), json!("lock-registry"));
            meta.insert("uid".into(), json!(format!("0000-{i}")));
            meta.insert("resourceVersion".into(), json!(format!("{}", 100 + i)));
            meta.insert("generation".into(), json!(1));
            meta.insert("creationTimestamp".into(), json!("2026-12-01T10:00:00Z"));
            meta.insert(
                "managedFields".into(),
                json!([{"manager": "kubectl-client-side-apply", "operation": "Update"}]),
            );
            d["status"] = json!({});
            d
        })
        .collect();
    serde_yaml_ng::to_string(&json!({"apiVersion": "v1", "kind": "List", "items": items})).unwrap()
}

fn summary(r: &Registry) -> String {
    let classes: Vec<String> = r.classes().map(|c| format!("{c:?}")).collect();
    let grants: Vec<String> = r.grants().map(|g| format!("{g:?}")).collect();
    let namespaces: Vec<String> = r.namespaces().map(|n| format!("{n:?}")).collect();
    format!("{classes:?}\n{grants:?}\n{namespaces:?}")
}

#[test]
fn crs_exported_from_a_cluster_load_as_the_same_registry() {
    let dev = workspace_root().join("config/registry/dev");
    let today = registry_files::today();
    let from_yaml = Registry::load(&registry_files::read_sources(&dev).unwrap(), today).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("export.yaml"), exported(&documents(&dev))).unwrap();
    let sources = registry_files::read_sources(tmp.path()).unwrap();
    let from_crs = Registry::load(&sources, today).unwrap();
    assert_eq!(summary(&from_crs), summary(&from_yaml));
    // The filter configuration `grants push` would send is the same too.
    let td = vec!["dev.lock.local".to_owned()];
    let cfg = |r: &Registry| {
        serde_json::to_string(&lock_config::FilterConfig::from_registry(
            r, "eu-west", &td, None,
        ))
        .unwrap()
    };
    assert_eq!(cfg(&from_crs), cfg(&from_yaml));
    // lockctl (as the arbiters: one loader) takes the exported folder.
    let (code, out) = lockctl(&["registry", "check", tmp.path().to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}");
    // A misspelt metadata field is still refused: only Kubernetes' own are dropped.
    std::fs::write(
        tmp.path().join("typo.yaml"),
        "apiVersion: lock.dev/v1alpha1\nkind: Namespace\nmetadata: {name: x, lables: {a: b}}\nspec: {region: eu}\n",
    )
    .unwrap();
    let (code, out) = lockctl(&["registry", "check", tmp.path().to_str().unwrap()]);
    assert_ne!(code, Some(0), "{out}");
    assert!(out.contains("lables"), "{out}");
}

/// The example registry with its pause-test result dated from today.
fn registry_in_force(dir: &Path) {
    let examples = workspace_root().join("deploy/kubernetes/registry");
    for s in registry_files::read_sources(&examples).unwrap() {
        let name = Path::new(&s.name).file_name().unwrap().to_owned();
        let today = registry_files::today().to_string();
        let next_year = format!(
            "{}",
            today.split('-').next().unwrap().parse::<u32>().unwrap() + 1
        );
        let text = s
            .text
            .replace(
                "passedAt: \"2026-11-20\"",
                &format!("passedAt: \"{today}\""),
            )
            .replace(
                "expires: \"2027-11-19\"",
                &format!("expires: \"{next_year}-01-01\""),
            )
            .replace(
                "waiverExpires: \"2027-06-30\"",
                &format!("waiverExpires: \"{next_year}-06-30\""),
            );
        std::fs::write(dir.join(name), text).unwrap();
    }
}

fn review(op: &str, kind: &str, object: &str) -> Value {
    let obj: Value = serde_yaml_ng::from_str(object).unwrap();
    let mut request = json!({
        "uid": format!("uid-{op}-{kind}"),
        "kind": {"group": "lock.dev", "version": "v1alpha1", "kind": kind},
        "resource": {"group": "lock.dev", "version": "v1alpha1", "resource": "x"},
        "operation": op,
        "name": obj["metadata"]["name"],
        "namespace": "lock-registry",
        "userInfo": {"username": "alice@example.com"},
        "dryRun": false,
    });
    if op != "DELETE" {
        request["object"] = obj.clone();
    }
    if op != "CREATE" {
        request["oldObject"] = obj;
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

fn class(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: lock.dev/v1alpha1\nkind: LockClass\nmetadata: {{name: {name}, namespace: lock-registry}}\nspec: {spec}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_judges_admission_reviews_over_https() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let registry = dir.join("registry");
    std::fs::create_dir_all(&registry).unwrap();
    registry_in_force(&registry);
    // Its serving certificate, for the address the API server would call.
    let ca = DevCa::create_plain("lock-webhook test CA").unwrap();
    let leaf = ca
        .issue(
            &Leaf::plain()
                .with_ip("127.0.0.1".parse().unwrap())
                .with_dns("lock-webhook.lock.svc"),
        )
        .unwrap();
    leaf.save(dir, "webhook").unwrap();
    let port = free_port().unwrap();
    let mut cmd = Command::new(workspace_bin("lock-webhook").unwrap());
    cmd.arg("--registry")
        .arg(&registry)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .arg("--tls-cert")
        .arg(dir.join("webhook.pem"))
        .arg("--tls-key")
        .arg(dir.join("webhook.key"));
    let mut hook = Proc::spawn("lock-webhook", cmd, dir).unwrap();
    hook.wait_for_line("lock-webhook listening on", patience())
        .unwrap();
    let http = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.bundle_pem().as_bytes()).unwrap())
        .build()
        .unwrap();
    let url = format!("https://127.0.0.1:{port}/validate");
    let post = |body: Value| {
        let http = http.clone();
        let url = url.clone();
        async move {
            let r = http.post(&url).json(&body).send().await.unwrap();
            (
                r.status().as_u16(),
                r.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };

    let pause = std::fs::read_to_string(registry.join("pause-tests.yaml")).unwrap();
    let good_advisory = class(
        "pay-batch",
        "{namespace: pay, prefixes: [pay/batch], purpose: efficiency, tier: entity, enforcement: advisory, ttlSeconds: 30}",
    );
    let cases: Vec<(&str, Value, Result<(), &str>)> = vec![
        (
            "an efficiency advisory class",
            review("CREATE", "LockClass", &good_advisory),
            Ok(()),
        ),
        (
            "a fenced class without a pause-test result",
            review(
                "CREATE",
                "LockClass",
                &class(
                    "pay-jobs",
                    "{namespace: pay, prefixes: [pay/jobs], purpose: correctness, tier: entity, enforcement: fenced, resource: pg/jobs, schemaVersion: '1'}",
                ),
            ),
            Err("PauseTestResult"),
        ),
        (
            "a correctness class open on quorum loss",
            review(
                "CREATE",
                "LockClass",
                &class(
                    "pay-jobs",
                    "{namespace: pay, prefixes: [pay/jobs], purpose: correctness, tier: entity, enforcement: advisory, riskOwner: a, waiverExpires: '2099-01-01', ttlSeconds: 30, onQuorumLoss: open}",
                ),
            ),
            Err("onQuorumLoss"),
        ),
        (
            "a TTL below 5 s",
            review(
                "UPDATE",
                "LockClass",
                &class(
                    "pay-ledger",
                    "{namespace: pay, prefixes: [pay/ledger], purpose: correctness, tier: entity, enforcement: fenced, resource: postgres://ledger-db/ledger, schemaVersion: '2026-11', ttlSeconds: 3}",
                ),
            ),
            Err("outside 5..=300"),
        ),
        (
            "advisory correctness without a risk owner or waiver",
            review(
                "CREATE",
                "LockClass",
                &class(
                    "pay-jobs",
                    "{namespace: pay, prefixes: [pay/jobs], purpose: correctness, tier: entity, enforcement: advisory, ttlSeconds: 30}",
                ),
            ),
            Err("risk owner"),
        ),
        (
            "a misspelt field",
            review(
                "CREATE",
                "LockClass",
                &good_advisory.replace("ttlSeconds", "ttlSecond"),
            ),
            Err("unknown field"),
        ),
        (
            "deleting the pause-test result a fenced class relies on",
            review("DELETE", "PauseTestResult", &pause),
            Err("PauseTestResult"),
        ),
        (
            "an expired pause-test result",
            review("UPDATE", "PauseTestResult", &{
                let t = registry_files::today().to_string();
                pause
                    .replace(&format!("passedAt: \"{t}\""), "passedAt: \"2020-01-01\"")
                    .replace("expires: \"", "expires: \"2020-06-01\"\n  # was: \"")
            }),
            Err("pay-ledger"),
        ),
        (
            "deleting an advisory class",
            review(
                "DELETE",
                "LockClass",
                &class(
                    "pay-reports",
                    "{namespace: pay, prefixes: [pay/reports], purpose: correctness, tier: entity, enforcement: advisory, riskOwner: a, waiverExpires: '2099-06-30', ttlSeconds: 30}",
                ),
            ),
            Ok(()),
        ),
        (
            "a grant to a namespace that does not exist",
            review(
                "CREATE",
                "LockGrant",
                "apiVersion: lock.dev/v1alpha1\nkind: LockGrant\nmetadata: {name: g}\nspec: {spiffeId: 'spiffe://prod.example.com/ns/x/sa/y', prefixes: [nowhere/x]}\n",
            ),
            Err("nowhere"),
        ),
    ];
    for (name, body, want) in cases {
        let uid = body["request"]["uid"].clone();
        let (status, answer) = post(body).await;
        assert_eq!(status, 200, "{name}: {answer}");
        assert_eq!(answer["apiVersion"], "admission.k8s.io/v1", "{name}");
        assert_eq!(answer["kind"], "AdmissionReview", "{name}");
        assert_eq!(answer["response"]["uid"], uid, "{name}");
        let allowed = answer["response"]["allowed"].as_bool().unwrap();
        let message = answer["response"]["status"]["message"]
            .as_str()
            .unwrap_or_default();
        match want {
            Ok(()) => assert!(allowed, "{name}: refused: {message}"),
            Err(needle) => {
                assert!(!allowed, "{name}: admitted");
                assert_eq!(answer["response"]["status"]["code"], 403, "{name}");
                assert!(
                    message.contains(needle),
                    "{name}: {message:?} lacks {needle:?}"
                );
            }
        }
    }
    // Not an AdmissionReview v1: 400, no verdict.
    let (status, _) = post(
        json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}),
    )
    .await;
    assert_eq!(status, 400);
    let (status, _) = post(json!({"hello": "world"})).await;
    assert!(status == 400 || status == 422, "{status}");
    // Plain HTTP gets no answer.
    let plain = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/validate"))
        .json(&json!({}))
        .send()
        .await;
    assert!(plain.is_err() || !plain.unwrap().status().is_success());
}
