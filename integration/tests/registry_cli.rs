//! `lockctl registry check DIR`: accepts the dev registry with the cost table, and rejects
//! each invalid class of DESIGN 5 with a message naming the file, the class and the field.

use lock_integration::paths::dev_registry;
use lock_integration::stack::lockctl;

const NS: &str = "apiVersion: lock.dev/v1alpha1\nkind: Namespace\nmetadata: {name: pay}\nspec: {region: local}\n";

fn check(dir: &std::path::Path) -> (Option<i32>, String) {
    let out = lockctl(&["registry", "check", dir.to_str().unwrap()], &[]).unwrap();
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
fn dev_registry_passes_with_costs() {
    let (code, out) = check(&dev_registry());
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("KEEPALIVES/S") && out.contains("pay-ledger"),
        "{out}"
    );
}

#[test]
fn each_invalid_class_is_rejected_by_name() {
    let cases = [
        (
            "ttl-low",
            "purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 4",
            "spec.ttlSeconds",
        ),
        (
            "ttl-high",
            "purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 301",
            "spec.ttlSeconds",
        ),
        (
            "advisory-floor",
            "purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 15",
            "spec.ttlSeconds",
        ),
        (
            "no-owner",
            "purpose: correctness\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n  waiverExpires: \"2027-01-01\"",
            "spec.riskOwner",
        ),
        (
            "no-waiver",
            "purpose: correctness\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n  riskOwner: a@b",
            "spec.waiverExpires",
        ),
        (
            "open-correctness",
            "purpose: correctness\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n  riskOwner: a@b\n  waiverExpires: \"2027-01-01\"\n  onQuorumLoss: open",
            "spec.onQuorumLoss",
        ),
        (
            "open-fenced",
            "purpose: efficiency\n  tier: entity\n  enforcement: fenced\n  onQuorumLoss: open",
            "spec.onQuorumLoss",
        ),
        (
            "fenced-untested",
            "purpose: correctness\n  tier: entity\n  enforcement: fenced\n  resource: pg/x\n  schemaVersion: \"1\"",
            "spec.enforcement",
        ),
        (
            "bad-fairness",
            "purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n  fairness: sometimes",
            "spec",
        ),
        (
            "bad-tier",
            "purpose: efficiency\n  enforcement: advisory\n  ttlSeconds: 30\n  tier: gold",
            "spec",
        ),
        (
            "typo",
            "purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSecond: 30",
            "spec",
        ),
    ];
    for (name, spec, field) in cases {
        let dir = tempfile::tempdir().unwrap();
        let doc = format!(
            "{NS}---\napiVersion: lock.dev/v1alpha1\nkind: LockClass\nmetadata: {{name: {name}}}\nspec:\n  namespace: pay\n  prefixes: [pay/x]\n  {spec}\n"
        );
        std::fs::write(dir.path().join("classes.yaml"), doc).unwrap();
        let (code, out) = check(dir.path());
        assert_eq!(code, Some(2), "{name}: {out}");
        assert!(
            out.contains(&format!("LockClass/{name}: {field}")),
            "{name}: {out}"
        );
        assert!(out.contains("classes.yaml"), "{name}: {out}");
    }
}

#[tokio::test]
async fn register_lists_advisory_classes_flags_expired_waivers_and_counts_holds() {
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(dev_registry()).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, dir.path().join(p.file_name().unwrap())).unwrap();
    }
    std::fs::write(
        dir.path().join("old.yaml"),
        "apiVersion: lock.dev/v1alpha1\nkind: LockClass\nmetadata: {name: pay-old}\nspec:\n  namespace: pay\n  prefixes: [pay/old]\n  purpose: correctness\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n  riskOwner: legacy@example.com\n  waiverExpires: \"2020-01-31\"\n",
    )
    .unwrap();
    // The dev registry's own waiver has a fixed date; the test's copy moves it a year past
    // today, so the test does not turn red on the day it passes.
    let waiver = lock_store::registry_files::today()
        .plus_one_year()
        .to_string();
    let classes = dir.path().join("classes.yaml");
    let text = std::fs::read_to_string(&classes).unwrap();
    assert!(
        text.contains("waiverExpires: \"2027-06-30\""),
        "the dev registry changed"
    );
    std::fs::write(&classes, text.replace("2027-06-30", &waiver)).unwrap();
    let out = lockctl(&["register", dir.path().to_str().unwrap()], &[]).unwrap();
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{table}");
    let line = |class: &str| {
        table
            .lines()
            .find(|l| l.starts_with(class))
            .unwrap()
            .to_owned()
    };
    assert!(line("pay-old").contains("EXPIRED") && line("pay-old").contains("legacy@example.com"));
    assert!(line("pay-ledger").contains(" ok ") && line("pay-ledger").contains(&waiver));
    assert!(
        !table.contains("orders-default"),
        "efficiency classes are not on the register"
    );

    // JSON, with current holds counted from a live store.
    let stack = lock_integration::Stack::start(lock_integration::StackOptions::default())
        .await
        .unwrap();
    let ops = stack
        .pki
        .svid("ops", lock_integration::pki::OPERATOR)
        .unwrap();
    assert!(
        stack
            .lockctl_as(&ops, &["acquire", "pay/ledger/reg"])
            .unwrap()
            .status
            .success()
    );
    let out = lock_integration::stack::lockctl_etcd(
        &[
            "register",
            dir.path().to_str().unwrap(),
            "--json",
            "--etcd",
            &stack.etcd.client_url,
        ],
        &stack.etcd.pki,
        "operator",
    )
    .unwrap();
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ledger = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["class"] == "pay-ledger")
        .unwrap();
    assert_eq!(ledger["holds"], 1);
    assert_eq!(ledger["expired"], false);
    let old = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["class"] == "pay-old")
        .unwrap();
    assert_eq!(old["expired"], true);
}

/// A copy of the dev registry in a fresh folder, edited by `edit` (file name, from, to).
fn edited(dir: &std::path::Path, edits: &[(&str, &str, &str)]) {
    std::fs::create_dir_all(dir).unwrap();
    for entry in std::fs::read_dir(dev_registry()).unwrap() {
        let p = entry.unwrap().path();
        let mut text = std::fs::read_to_string(&p).unwrap();
        let name = p.file_name().unwrap().to_str().unwrap().to_owned();
        for (file, from, to) in edits {
            if *file == name {
                assert!(text.contains(from), "{name} has no {from:?}");
                text = text.replacen(from, to, 1);
            }
        }
        std::fs::write(dir.join(name), text).unwrap();
    }
}

fn diff(args: &[&str], cwd: Option<&std::path::Path>) -> (Option<i32>, String) {
    let mut cmd =
        std::process::Command::new(lock_integration::paths::workspace_bin("lockctl").unwrap());
    cmd.args(["registry", "diff"]).args(args);
    if let Some(d) = cwd {
        cmd.current_dir(d);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `lockctl registry diff`: hand-made pairs of registries, from folders and from git
/// revisions, with the exit codes CI keys on.
#[test]
fn registry_diff_says_what_a_change_does() {
    let tmp = tempfile::tempdir().unwrap();
    let (old, new) = (tmp.path().join("old"), tmp.path().join("new"));
    edited(&old, &[]);
    let s = |p: &std::path::Path| p.to_str().unwrap().to_owned();

    // Identical: exit 0.
    let (code, out) = diff(&[&s(&old), &s(&dev_registry())], None);
    assert_eq!((code, out.trim()), (Some(0), "no change"), "{out}");

    // A widened grant, a shorter TTL and a namespace moved: all risky, exit 1 either way.
    edited(
        &new,
        &[
            ("classes.yaml", "ttlSeconds: 60", "ttlSeconds: 45"),
            ("namespaces.yaml", "region: local", "region: elsewhere"),
            (
                "grants.yaml",
                "prefixes: [orders]",
                "prefixes: [orders, archive]",
            ),
        ],
    );
    let (code, out) = diff(&[&s(&old), &s(&new)], None);
    assert_eq!(code, Some(1), "{out}");
    for line in [
        "may lock archive   [risk]",
        "ttlSeconds 60 -> 45   [risk]",
        "region local -> elsewhere   [risk]",
        "liveness bound 60s -> 45s",
        "keepalives/s for 1000 sessions 50.0 -> 66.7",
    ] {
        assert!(out.contains(line), "no {line:?} in:\n{out}");
    }
    let (code, _) = diff(&[&s(&old), &s(&new), "--fail-on", "risky"], None);
    assert_eq!(code, Some(1));

    // Only a safe change (a longer TTL): exit 1 by default, 0 with --fail-on risky.
    let safe = tmp.path().join("safe");
    edited(
        &safe,
        &[("classes.yaml", "ttlSeconds: 60", "ttlSeconds: 90")],
    );
    assert_eq!(diff(&[&s(&old), &s(&safe)], None).0, Some(1));
    let (code, out) = diff(&[&s(&old), &s(&safe), "--fail-on", "risky"], None);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("0 risky"), "{out}");

    // Durable fairness (ADR-14): a class turned durable, and one added durable, each get a
    // cost line with the waiters' extra consensus writes; turned back, the writes go.
    let durable = tmp.path().join("durable");
    let added = "---\napiVersion: lock.dev/v1alpha1\nkind: LockClass\nmetadata: {name: orders-queue}\nspec:\n  namespace: orders\n  prefixes: [orders/queue]\n  purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n  fairness: durable\n";
    edited(
        &durable,
        &[
            (
                "classes.yaml",
                "prefixes: [orders/batch]",
                "prefixes: [orders/batch]\n  fairness: durable",
            ),
            (
                "classes.yaml",
                "prefixes: [archive]\n  purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n",
                &format!(
                    "prefixes: [archive]\n  purpose: efficiency\n  tier: entity\n  enforcement: advisory\n  ttlSeconds: 30\n{added}"
                ),
            ),
        ],
    );
    let (code, out) = diff(&[&s(&old), &s(&durable)], None);
    assert_eq!(code, Some(1), "{out}");
    let more = "+2 etcd writes per waiter (durable fairness: the queue entry written and deleted)";
    for line in [
        "~ class     orders-batch: fairness memory -> durable\n".to_owned(),
        "+ class     orders-queue (ttl 30s)\n".to_owned(),
        format!("\n  orders-batch: {more}\n"),
        format!("\n  orders-queue: {more}\n"),
    ] {
        assert!(out.contains(&line), "no {line:?} in:\n{out}");
    }
    let (code, out) = diff(&[&s(&durable), &s(&old)], None);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("\n  orders-batch: -2 etcd writes per waiter (memory fairness: no queue entry written and deleted)\n"),
        "{out}"
    );
    assert!(
        !out.contains("orders-queue: -2") && !out.contains("+2 etcd"),
        "a removed class, or an unchanged one, has no cost line:\n{out}"
    );

    // An invalid registry: exit 2, naming the problem.
    let bad = tmp.path().join("bad");
    edited(&bad, &[("classes.yaml", "ttlSeconds: 60", "ttlSeconds: 1")]);
    let (code, out) = diff(&[&s(&old), &s(&bad)], None);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("ttlSeconds"), "{out}");

    // From git revisions, as the CI job runs it.
    let repo = tmp.path().join("repo");
    edited(&repo.join("registry"), &[]);
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .current_dir(&repo)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&["commit", "-q", "-m", "registry"]);
    edited(
        &repo.join("registry"),
        &[(
            "grants.yaml",
            "prefixes: [orders]",
            "prefixes: [orders, archive]",
        )],
    );
    git(&["commit", "-q", "-am", "widen"]);
    let (code, out) = diff(&["HEAD~1:registry", "HEAD:registry"], Some(&repo));
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("may lock archive   [risk]"), "{out}");
    assert!(out.contains("1 change(s), 1 risky"), "{out}");
    let (code, out) = diff(&["HEAD~5:registry", "HEAD:registry"], Some(&repo));
    assert_eq!(code, Some(2), "{out}");
}

/// The example CI job for the registry repository is a valid GitHub workflow (the schema
/// vendored in check-jsonschema, offline), and the check refuses a broken one.
#[test]
fn the_registry_ci_example_is_a_valid_workflow() {
    let root = lock_integration::paths::workspace_root();
    let tool = root.join(".deps/python-venv/bin/check-jsonschema");
    let run = |file: &std::path::Path| {
        std::process::Command::new(&tool)
            .args(["--builtin-schema", "vendor.github-workflows"])
            .arg(file)
            .output()
            .unwrap()
    };
    let example = root.join("deploy/ci/registry-review.yml");
    let out = run(&example);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let text = std::fs::read_to_string(&example).unwrap();
    assert!(text.contains("lockctl registry diff") && text.contains("lockctl registry check"));
    let tmp = tempfile::tempdir().unwrap();
    let broken = tmp.path().join("broken.yml");
    std::fs::write(
        &broken,
        text.replace("runs-on: ubuntu-latest", "runs_on: ubuntu-latest"),
    )
    .unwrap();
    assert!(!run(&broken).status.success());
}
