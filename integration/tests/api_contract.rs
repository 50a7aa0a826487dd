//! Issue 20, item 4: lock.v1 as a published contract. `buf lint` passes on config/proto,
//! `buf breaking` finds nothing against the last released version (config/proto-released),
//! and the check is seen to catch what it is for: a renumbered field, a retyped field, a
//! removed method and a renamed service are each refused.

use lock_integration::paths::{dep, workspace_root};
use lock_integration::process::run_text;
use std::path::Path;
use std::process::Command;

fn buf(args: &[&str], dir: &Path) -> (bool, String) {
    run_text(
        Command::new(dep("buf").unwrap())
            .args(args)
            .current_dir(dir),
    )
    .unwrap()
}

#[test]
fn the_api_passes_lint_and_is_not_broken_against_the_release() {
    let root = workspace_root();
    let (ok, out) = buf(&["lint", "config/proto"], &root);
    assert!(ok, "buf lint:\n{out}");
    let (ok, out) = buf(
        &[
            "breaking",
            "config/proto",
            "--against",
            "config/proto-released",
        ],
        &root,
    );
    assert!(ok, "buf breaking against the last release:\n{out}");
}

/// A copy of config/proto with `edit` applied to lock.proto.
fn edited(dir: &Path, edit: impl Fn(&str) -> String) -> std::path::PathBuf {
    let src = workspace_root().join("config/proto");
    let dst = dir.join("proto");
    for rel in ["buf.yaml", "lock/v1/lock.proto", "google/rpc/status.proto"] {
        let to = dst.join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(src.join(rel), &to).unwrap();
    }
    let proto = dst.join("lock/v1/lock.proto");
    let text = std::fs::read_to_string(&proto).unwrap();
    let changed = edit(&text);
    assert_ne!(changed, text, "the edit applied");
    std::fs::write(&proto, changed).unwrap();
    dst
}

/// An edit of lock.proto's text.
type Edit = fn(&str) -> String;

#[test]
fn breaking_changes_are_refused() {
    let released = workspace_root().join("config/proto-released");
    let cases: [(&str, Edit, &str); 4] = [
        (
            "a renumbered field",
            |t| t.replace("int64 session_id = 2;", "int64 session_id = 7;"),
            "FIELD_NO_DELETE",
        ),
        (
            "a retyped field",
            |t| t.replace("fixed64 token = 1;", "uint64 token = 1;"),
            "FIELD_SAME_TYPE",
        ),
        (
            "a removed method",
            |t| {
                t.replace(
                    "  rpc Inspect(InspectRequest) returns (InspectResponse);\n",
                    "",
                )
            },
            "RPC_NO_DELETE",
        ),
        (
            "a renamed service",
            |t| t.replace("service Lock {", "service LockService {"),
            "SERVICE_NO_DELETE",
        ),
    ];
    for (what, edit, rule) in cases {
        let dir = tempfile::tempdir().unwrap();
        let proto = edited(dir.path(), edit);
        let (ok, out) = buf(
            &[
                "breaking",
                "--error-format=json",
                proto.to_str().unwrap(),
                "--against",
                released.to_str().unwrap(),
            ],
            dir.path(),
        );
        assert!(!ok, "{what} passed buf breaking:\n{out}");
        assert!(
            out.contains(&format!("\"type\":\"{rule}\"")),
            "{what}: expected {rule} in:\n{out}"
        );
    }
}

/// The manual's "Without a client library" example (docs/src/using/lock-v1.md), run as written there against a real
/// stack: grpcurl with the proto and an SVID opens a session, takes a key, and is refused
/// a key its identity has no grant for, with the contract's reason.
#[tokio::test]
async fn the_readme_grpcurl_example_works() {
    use lock_integration::pki::LEDGER;
    use lock_integration::{Stack, StackOptions};
    let stack = Stack::start(StackOptions::default()).await.unwrap();
    let svid = stack.pki.svid("ledger", LEDGER).unwrap();
    let root = workspace_root();
    let target = format!("localhost:{}", stack.envoy.listen.port());
    let grpcurl = |data: &str, key: &str, method: &str| {
        let out = Command::new(dep("grpcurl").unwrap())
            .current_dir(&root)
            .args(["-cacert"])
            .arg(&svid.ca)
            .arg("-cert")
            .arg(&svid.cert)
            .arg("-key")
            .arg(&svid.key)
            .args([
                "-import-path",
                "config/proto",
                "-proto",
                "lock/v1/lock.proto",
                "-proto",
                "google/rpc/status.proto",
                "-H",
                &format!("lock-key: {key}"),
                "-d",
                data,
                &target,
                method,
            ])
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, out, err) = grpcurl(
        r#"{"key": "pay/ledger/42"}"#,
        "pay/ledger/42",
        "lock.v1.Lock/OpenSession",
    );
    assert!(ok, "{out}{err}");
    let session: serde_json::Value = serde_json::from_str(&out).unwrap();
    let id = session["sessionId"].as_str().unwrap().to_owned();
    let (ok, out, err) = grpcurl(
        &format!(r#"{{"key": "pay/ledger/42", "sessionId": "{id}"}}"#),
        "pay/ledger/42",
        "lock.v1.Lock/Acquire",
    );
    assert!(ok, "{out}{err}");
    let granted: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(granted["token"].as_str().is_some(), "{out}");
    let (ok, out, err) = grpcurl(r#"{"key": "orders/7"}"#, "orders/7", "lock.v1.Lock/Inspect");
    assert!(!ok, "{out}");
    assert!(
        err.contains("PermissionDenied") && err.contains("NOT_GRANTED"),
        "{err}"
    );
}

/// The contract a client author reads is complete: the proto's header and the porting
/// guide list every reason the service sends (lock_config::Reason, the one table the
/// arbiter and the edge answer from) and every request metadata key it reads, and name
/// nothing else as a reason.
#[test]
fn the_proto_and_the_porting_guide_list_every_reason_and_metadata_key() {
    let root = workspace_root();
    let proto = std::fs::read_to_string(root.join("config/proto/lock/v1/lock.proto")).unwrap();
    let header: String = proto
        .lines()
        .take_while(|l| !l.starts_with("syntax"))
        .map(|l| format!("{l}\n"))
        .collect();
    let guide = std::fs::read_to_string(root.join("docs/src/using/porting.md")).unwrap();
    let reasons: std::collections::BTreeSet<&str> = lock_config::Reason::all()
        .iter()
        .map(|r| r.as_str())
        .collect();

    // The proto's table: rows `//   NAME[, NAME,]   CODE   meaning`.
    let table = header
        .split("// Errors.")
        .nth(1)
        .and_then(|t| t.split("// Retry").next())
        .expect("the proto's header has an Errors table");
    let mut in_proto = std::collections::BTreeSet::new();
    for line in table.lines() {
        let Some(row) = line.strip_prefix("//   ") else {
            continue;
        };
        if !row.starts_with(|c: char| c.is_ascii_uppercase()) {
            continue;
        }
        let names = row.split("  ").next().unwrap();
        for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            in_proto.insert(name.to_owned());
        }
    }
    let in_proto: std::collections::BTreeSet<&str> = in_proto.iter().map(String::as_str).collect();
    assert_eq!(
        in_proto, reasons,
        "the proto's Errors table and lock_config::Reason differ"
    );

    // The guide's table: rows `| `NAME` | ... |`.
    let in_guide: std::collections::BTreeSet<&str> = guide
        .lines()
        .filter_map(|l| l.strip_prefix("| `")?.split('`').next())
        .filter(|n| n.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        .collect();
    assert_eq!(
        in_guide, reasons,
        "porting.md's reason table and lock_config::Reason differ"
    );

    // Every request metadata key a client may send, in both.
    for key in [
        lock_config::edge_headers::METADATA_KEY_HEADER,
        lock_config::instance::INSTANCE_HEADER,
        "traceparent",
    ] {
        assert!(
            header.contains(&format!("//   {key} ")),
            "the proto does not document {key}"
        );
        assert!(
            guide.contains(&format!("| `{key}` |")),
            "porting.md does not document {key}"
        );
    }
    // And the edge's own headers are named as removed, never as something to send.
    assert!(header.contains("`x-lock-*`"));
}
