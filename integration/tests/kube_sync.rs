//! The registry's custom resources against a real kube-apiserver (ADR-24): the committed
//! CRDs are accepted as structural schemas; `lock-webhook`, registered by URL with its
//! caBundle, makes `kubectl apply` of a bad class fail with the validation's words; and
//! `lock-registry-sync` keeps the arbiters' registry folder: an applied LockGrant appears
//! in it, a deleted one disappears, and a set the validation refuses is not written (the
//! last good folder stays, the metric and the log say why).

use base64::Engine as _;
use lock_config::Reason;
use lock_devca::{DevCa, Leaf};
use lock_integration::kube_apiserver::KubeApiserver;
use lock_integration::paths::{workspace_bin, workspace_root};
use lock_integration::process::{Proc, eventually, free_port, patience};
use lock_integration::{Stack, StackOptions, acquire, open_session};
use lock_store::registry_files;
use serde_json::Value;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const NS: &str = "lock-registry";

/// The SPIFFE IDs granted in the folder (as the arbiters would load it), or why not.
fn granted(out: &Path) -> anyhow::Result<Vec<String>> {
    let reg = registry_files::load(out)?;
    Ok(reg.grants().map(|(id, _)| id.to_string()).collect())
}

fn grant(name: &str, spiffe: &str, prefix: &str) -> String {
    format!(
        "apiVersion: lock.dev/v1alpha1\nkind: LockGrant\nmetadata: {{name: {name}, namespace: {NS}}}\nspec: {{spiffeId: '{spiffe}', prefixes: [{prefix}]}}\n"
    )
}

fn metric(admin: SocketAddr, name: &str) -> Option<f64> {
    let text = lock_integration::admin_get(admin, "/metrics").ok()?;
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "make e2e-kube: needs kube-apiserver, built once per machine (install-deps.sh kube, ~6-12 min on 2 cores)"]
async fn applied_resources_reach_the_registry_folder_and_bad_ones_do_not() {
    let started = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let kas = KubeApiserver::start(dir).unwrap();
    eprintln!("kube-apiserver ready in {:?}", started.elapsed());

    // 1. The CRDs apply and are accepted as structural schemas.
    let crds = workspace_root().join("deploy/kubernetes/crds");
    kas.kubectl_run(&["apply", "-f", crds.to_str().unwrap()])
        .unwrap();
    kas.kubectl_run(&[
        "wait",
        "--for=condition=Established",
        "crd",
        "--all",
        "--timeout=60s",
    ])
    .unwrap();
    let list: Value =
        serde_json::from_str(&kas.kubectl_run(&["get", "crd", "-o", "json"]).unwrap()).unwrap();
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 4, "four CRDs");
    for crd in items {
        let name = crd["metadata"]["name"].as_str().unwrap();
        let conditions = crd["status"]["conditions"].as_array().unwrap();
        let status = |t: &str| {
            conditions
                .iter()
                .find(|c| c["type"] == t)
                .map(|c| c["status"].as_str().unwrap_or_default().to_owned())
        };
        assert_eq!(status("Established").as_deref(), Some("True"), "{name}");
        assert_eq!(
            status("NonStructuralSchema"),
            None,
            "{name}: {conditions:?}"
        );
    }
    kas.kubectl_run(&["create", "namespace", NS]).unwrap();

    // 2. lock-registry-sync, as a process against the API server.
    let out = dir.join("registry");
    let mut cmd = Command::new(workspace_bin("lock-registry-sync").unwrap());
    cmd.arg("--kubeconfig")
        .arg(&kas.kubeconfig)
        .args(["--namespace", NS])
        .arg("--out")
        .arg(&out)
        .args(["--admin-listen", "127.0.0.1:0"])
        .env("RUST_LOG", "info");
    let mut sync = Proc::spawn("lock-registry-sync", cmd, dir).unwrap();
    let line = sync
        .wait_for_line("admin listening on", patience())
        .unwrap();
    let admin: SocketAddr = line.rsplit(' ').next().unwrap().parse().unwrap();
    // Listed, nothing there: nothing written (an empty set is refused), so not healthy:
    // an arbiter beside it would have nothing to load.
    eventually(patience(), || async {
        let health = lock_integration::admin_get(admin, "/healthz")?;
        anyhow::ensure!(health.contains("no registry set"), "healthz: {health}");
        anyhow::ensure!(
            metric(admin, "lock_registry_sync_refusals_total") == Some(1.0),
            "no refusal counted yet"
        );
        Ok(())
    })
    .await
    .unwrap();
    assert!(!out.join("registry.yaml").exists());

    // 3. The dev registry applied: the folder loads as the same registry.
    let dev = workspace_root().join("config/registry/dev");
    kas.kubectl_run(&["apply", "-n", NS, "-f", dev.to_str().unwrap()])
        .unwrap();
    let mut want = granted(&dev).unwrap();
    want.sort();
    eventually(patience(), || async {
        let mut got = granted(&out)?;
        got.sort();
        anyhow::ensure!(got == want, "{got:?}");
        Ok(())
    })
    .await
    .unwrap();
    let from_crs = registry_files::load(&out).unwrap();
    let from_yaml = registry_files::load(&dev).unwrap();
    let td = vec!["dev.lock.local".to_owned()];
    let cfg = |r: &lock_config::Registry| {
        serde_json::to_string(&lock_config::FilterConfig::from_registry(
            r, "local", &td, None,
        ))
        .unwrap()
    };
    assert_eq!(
        cfg(&from_crs),
        cfg(&from_yaml),
        "the filter's configuration"
    );
    assert_eq!(metric(admin, "lock_registry_sync_refused"), Some(0.0));
    let health = lock_integration::admin_get(admin, "/healthz").unwrap();
    assert_eq!(health.trim(), "ok");

    // 4. A LockGrant applied appears; deleted, it disappears.
    let batch = "spiffe://dev.lock.local/ns/pay/sa/batch";
    kas.apply(&grant("pay-batch", batch, "pay/batch")).unwrap();
    eventually(patience(), || async {
        anyhow::ensure!(granted(&out)?.contains(&batch.to_owned()), "not yet");
        Ok(())
    })
    .await
    .unwrap();
    kas.kubectl_run(&["delete", "-n", NS, "lockgrant", "pay-batch"])
        .unwrap();
    eventually(patience(), || async {
        anyhow::ensure!(!granted(&out)?.contains(&batch.to_owned()), "still there");
        Ok(())
    })
    .await
    .unwrap();

    // 5. A set the validation refuses (no webhook yet to stop it at the door): a grant
    // outside every namespace. The folder keeps the last good set; metric and log say why.
    let good = std::fs::read_to_string(out.join("registry.yaml")).unwrap();
    let writes = metric(admin, "lock_registry_sync_writes_total").unwrap();
    kas.apply(&grant(
        "stray",
        "spiffe://dev.lock.local/ns/x/sa/y",
        "nowhere/x",
    ))
    .unwrap();
    eventually(patience(), || async {
        anyhow::ensure!(
            metric(admin, "lock_registry_sync_refused") == Some(1.0),
            "not refused yet"
        );
        Ok(())
    })
    .await
    .unwrap();
    let refusal = sync.wait_for_line("LockGrant/stray", patience()).unwrap();
    assert!(refusal.contains("registry set refused"), "{refusal}");
    assert!(refusal.contains("nowhere"), "{refusal}");
    // A valid change alongside it does not get through either: the set is judged whole.
    let other = "spiffe://dev.lock.local/ns/pay/sa/other";
    kas.apply(&grant("pay-other", other, "pay/other")).unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        std::fs::read_to_string(out.join("registry.yaml")).unwrap(),
        good
    );
    assert_eq!(
        metric(admin, "lock_registry_sync_writes_total"),
        Some(writes)
    );
    // The stray deleted: the set is valid again and written, with the other grant.
    kas.kubectl_run(&["delete", "-n", NS, "lockgrant", "stray"])
        .unwrap();
    eventually(patience(), || async {
        anyhow::ensure!(granted(&out)?.contains(&other.to_owned()), "not yet");
        anyhow::ensure!(
            metric(admin, "lock_registry_sync_refused") == Some(0.0),
            "still refused"
        );
        Ok(())
    })
    .await
    .unwrap();

    // 6. The webhook, registered by URL with its caBundle, judging against the folder the
    // controller writes: a bad class is refused at `kubectl apply` with its message.
    let ca = DevCa::create_plain("lock-webhook test CA").unwrap();
    ca.issue(&Leaf::plain().with_ip("127.0.0.1".parse().unwrap()))
        .unwrap()
        .save(dir, "webhook")
        .unwrap();
    let port = free_port().unwrap();
    let mut cmd = Command::new(workspace_bin("lock-webhook").unwrap());
    cmd.arg("--registry")
        .arg(&out)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .arg("--tls-cert")
        .arg(dir.join("webhook.pem"))
        .arg("--tls-key")
        .arg(dir.join("webhook.key"));
    let mut hook = Proc::spawn("lock-webhook", cmd, dir).unwrap();
    hook.wait_for_line("lock-webhook listening on", patience())
        .unwrap();
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(ca.bundle_pem());
    kas.apply(&format!(
        "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {{name: lock-registry}}
webhooks:
- name: registry.lock.dev
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  timeoutSeconds: 5
  rules:
  - apiGroups: [lock.dev]
    apiVersions: [v1alpha1]
    operations: [CREATE, UPDATE, DELETE]
    resources: [namespaces, lockclasses, lockgrants, pausetestresults]
    scope: Namespaced
  clientConfig:
    url: https://127.0.0.1:{port}/validate
    caBundle: {ca_bundle}
"
    ))
    .unwrap();
    let bad = format!(
        "apiVersion: lock.dev/v1alpha1\nkind: LockClass\nmetadata: {{name: pay-fast, namespace: {NS}}}\nspec: {{namespace: pay, prefixes: [pay/fast], purpose: efficiency, tier: entity, enforcement: advisory, ttlSeconds: 3}}\n"
    );
    // The API server picks the configuration up within a moment: probe with a server-side
    // dry run (admission runs, nothing is stored) until the webhook answers.
    let refused = eventually(patience(), || async {
        match kas.stdin(&["apply", "--dry-run=server", "-f", "-"], &bad) {
            Ok(out) => anyhow::bail!("admitted: {out}"),
            Err(e) => Ok(e),
        }
    })
    .await
    .unwrap();
    assert!(refused.contains("registry.lock.dev"), "{refused}");
    let err = kas.apply(&bad).unwrap_err();
    assert!(err.contains("denied the request"), "{err}");
    assert!(
        err.contains("refused by the registry's validation"),
        "{err}"
    );
    assert!(err.contains("outside 5..=300"), "{err}");
    assert!(
        kas.kubectl_run(&["get", "-n", NS, "lockclass", "pay-fast"])
            .is_err(),
        "the refused class is not stored"
    );
    // A good grant still goes through the webhook, and on to the folder.
    let late = "spiffe://dev.lock.local/ns/pay/sa/late";
    kas.apply(&grant("pay-late", late, "pay/late")).unwrap();
    eventually(patience(), || async {
        anyhow::ensure!(granted(&out)?.contains(&late.to_owned()), "not yet");
        Ok(())
    })
    .await
    .unwrap();
    // And the webhook stops the invalid set of step 5 at the door.
    let err = kas
        .apply(&grant(
            "stray",
            "spiffe://dev.lock.local/ns/x/sa/y",
            "nowhere/x",
        ))
        .unwrap_err();
    assert!(err.contains("nowhere"), "{err}");
    sync.check_running().unwrap();
    hook.check_running().unwrap();
    eprintln!("kube_sync: {:?} without the stack", started.elapsed());

    // 7. Through Envoy: arbiters and the filter on the controller's folder (the filter's
    // configuration pushed from it by `lockctl grants push`, as an operator or a job would).
    let stack = Stack::start(StackOptions {
        registry: out.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    let newcomer = "spiffe://dev.lock.local/ns/pay/sa/newcomer";
    assert_eq!(
        lock(&stack, newcomer, "pay/ledger/n/0").await,
        Err(Some(Reason::NotGranted))
    );
    kas.apply(&grant("pay-newcomer", newcomer, "pay/ledger/n"))
        .unwrap();
    eventually(patience(), || async {
        anyhow::ensure!(granted(&out)?.contains(&newcomer.to_owned()), "not yet");
        Ok(())
    })
    .await
    .unwrap();
    let pushed = stack.push_grants(&out).unwrap();
    assert!(pushed.status.success(), "{pushed:?}");
    eventually(patience(), || async {
        match lock(&stack, newcomer, "pay/ledger/n/1").await {
            Ok(_) => Ok(()),
            Err(r) => anyhow::bail!("not granted yet: {r:?}"),
        }
    })
    .await
    .unwrap();
    kas.kubectl_run(&["delete", "-n", NS, "lockgrant", "pay-newcomer"])
        .unwrap();
    eventually(patience(), || async {
        anyhow::ensure!(
            !granted(&out)?.contains(&newcomer.to_owned()),
            "still there"
        );
        Ok(())
    })
    .await
    .unwrap();
    let pushed = stack.push_grants(&out).unwrap();
    assert!(pushed.status.success(), "{pushed:?}");
    eventually(patience(), || async {
        match lock(&stack, newcomer, "pay/ledger/n/2").await {
            Err(Some(Reason::NotGranted)) => Ok(()),
            other => anyhow::bail!("still: {other:?}"),
        }
    })
    .await
    .unwrap();
    eprintln!("kube_sync: {:?} in all", started.elapsed());
}

/// Opens a session and acquires `key` through Envoy as `spiffe_id`: the token, or the
/// refusal's reason.
async fn lock(stack: &Stack, spiffe_id: &str, key: &str) -> Result<u64, Option<Reason>> {
    let refusal = |s: tonic::Status| lock_integration::reason_of(&s).map(|r| r.0);
    let mut c = stack.workload(spiffe_id).await.map_err(|_| None)?;
    let session = match open_session(&mut c, key).await {
        Ok(s) => s,
        Err(e) => return Err(e.downcast::<tonic::Status>().ok().and_then(refusal)),
    };
    acquire(&mut c, key, session, 0)
        .await
        .map(|r| r.token)
        .map_err(refusal)
}
