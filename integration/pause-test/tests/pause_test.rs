//! Issue 6: the pause-test kit against the PostgreSQL reference fence on a real server, and
//! against two deliberately broken fences, which it must fail; the registry accepts
//! `enforcement: fenced` only with the kit's result. Issue 38 (ADR-16): the same for the
//! S3 reference fence on a real S3-compatible server (moto), with its broken variants.

use lock_integration::Stack;
use lock_integration::paths::{dev_registry, workspace_bin};
use lock_integration::postgres::Postgres;
use lock_integration::registry::{FAST_PREFIX, SEM_PERMITS, SEM_PREFIX, waiter_id};
use lock_integration::s3::S3Server;
use lock_integration::stack::lockctl;
use std::process::Command;

/// The resource under test.
enum Resource {
    Pg(Postgres),
    S3(S3Server),
}

struct Kit {
    stack: Stack,
    resource: Resource,
    _reg: tempfile::TempDir,
}

async fn kit() -> Kit {
    let (stack, reg) = Stack::with_test_registry().await.unwrap();
    let pg = Postgres::start(&stack.dir).unwrap();
    Kit {
        stack,
        resource: Resource::Pg(pg),
        _reg: reg,
    }
}

/// Runs the kit; returns (exit code, stdout).
fn run(
    kit: &Kit,
    fence: &str,
    prefix: &str,
    cycles: usize,
    registry: Option<&std::path::Path>,
) -> (Option<i32>, String) {
    run_as(kit, fence, prefix, cycles, registry, &[], true)
}

/// [`run`] with more flags; `two_identities: false` runs B as a second process of A's
/// identity.
fn run_as(
    kit: &Kit,
    fence: &str,
    prefix: &str,
    cycles: usize,
    registry: Option<&std::path::Path>,
    extra: &[&str],
    two_identities: bool,
) -> (Option<i32>, String) {
    let keys = format!("{FAST_PREFIX}/{prefix}");
    run_under(kit, fence, &keys, cycles, registry, extra, two_identities)
}

/// [`run_as`] on keys under `keys` (whole: a class's prefix and a name).
fn run_under(
    kit: &Kit,
    fence: &str,
    keys: &str,
    cycles: usize,
    registry: Option<&std::path::Path>,
    extra: &[&str],
    two_identities: bool,
) -> (Option<i32>, String) {
    let a = kit.stack.pki.svid("pt-a", &waiter_id(1)).unwrap();
    let b = kit.stack.pki.svid("pt-b", &waiter_id(2)).unwrap();
    let mut cmd = Command::new(workspace_bin("pause-test").unwrap());
    cmd.args(["run", "--fence", fence]);
    match &kit.resource {
        Resource::Pg(pg) => {
            cmd.args(["--db", &pg.url()]);
        }
        Resource::S3(s3) => {
            cmd.args(["--s3", &s3.url(), "--bucket", "fenced-ledger"])
                .envs(s3.env());
        }
    }
    cmd.args(["--key-prefix", keys])
        .args(["--cycles", &cycles.to_string(), "--parallel", "20"])
        .args(["--class", "pay-pg", "--schema-version", "1"])
        .args([
            "--resource",
            match &kit.resource {
                Resource::Pg(_) => "pg/fenced_resource",
                Resource::S3(_) => "s3/fenced-ledger",
            },
        ])
        .env("LOCK_ENDPOINT", kit.stack.endpoint())
        .env("LOCK_SVID", &a.cert)
        .env("LOCK_SVID_KEY", &a.key)
        .env("LOCK_CA", &a.ca)
        .env_remove("LOCK_SVID_B")
        .env_remove("LOCK_SVID_KEY_B");
    if two_identities {
        cmd.env("LOCK_SVID_B", &b.cert)
            .env("LOCK_SVID_KEY_B", &b.key);
    }
    if let Some(r) = registry {
        cmd.arg("--registry").arg(r);
    }
    cmd.args(extra);
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    (out.status.code(), text)
}

fn count(text: &str, what: &str) -> usize {
    let at = text
        .find(what)
        .unwrap_or_else(|| panic!("no {what:?} in {text}"));
    text[at + what.len()..]
        .split(|c: char| !c.is_ascii_digit())
        .find(|s| !s.is_empty())
        .unwrap()
        .parse()
        .unwrap()
}

/// Issue 53: the kit on a semaphore (`--permits 3`): the other two permits are held, so A
/// and B take turns on one, and the record is that permit's. The reference fence refuses
/// the frozen permit holder's late write, as a replica of A's identity and as another
/// identity; the split fence (check, then write) accepts it and fails.
#[tokio::test]
async fn a_frozen_permit_holder_is_refused() {
    let kit = kit().await;
    let permits = SEM_PERMITS.to_string();
    let extra = ["--permits", permits.as_str()];
    for (name, two) in [("sem-two", true), ("sem-one", false)] {
        let keys = format!("{SEM_PREFIX}/{name}");
        let (code, text) = run_under(&kit, "reference", &keys, 5, None, &extra, two);
        assert_eq!(code, Some(0), "{text}");
        assert!(text.contains("5 cycles") && text.contains("PASS"), "{text}");
        assert_eq!(count(&text, "stale writes accepted "), 0);
    }
    let keys = format!("{SEM_PREFIX}/sem-split");
    let (code, text) = run_under(&kit, "split", &keys, 2, None, &extra, true);
    assert_eq!(code, Some(1), "{text}");
    assert_eq!(count(&text, "stale writes accepted "), 2, "{text}");
}

#[tokio::test]
async fn reference_fence_passes_100_cycles_and_broken_fences_fail() {
    let kit = kit().await;
    let results = tempfile::tempdir().unwrap();

    let (code, text) = run(&kit, "reference", "ref", 100, Some(results.path()));
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(count(&text, "stale writes accepted "), 0);
    assert_eq!(count(&text, "replays accepted "), 0);
    assert!(
        text.contains("100 cycles") && text.contains("PASS"),
        "{text}"
    );

    // As a Job runs it, with one SVID: B is a second process of A's identity, which waits
    // for A like anyone else (issue 32), and the fence is proved the same way.
    let (code, text) = run_as(&kit, "reference", "one-id", 10, None, &[], false);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("10 cycles") && text.contains("PASS"),
        "{text}"
    );

    // Check and write in separate statements: the stale holder writes after B.
    let (code, text) = run(&kit, "split", "split", 2, None);
    assert_eq!(code, Some(1), "{text}");
    assert_eq!(count(&text, "stale writes accepted "), 2, "{text}");

    // `<=` accepts a replayed delivery with a used token.
    let (code, text) = run(&kit, "le", "le", 2, None);
    assert_eq!(code, Some(1), "{text}");
    assert_eq!(count(&text, "replays accepted "), 2, "{text}");

    // The owner's own write path (ADR-17: the kit drives the pause against the statement
    // the service really runs): another table, other columns, the owner's statements.
    let Resource::Pg(pg) = &kit.resource else {
        unreachable!()
    };
    let db = lock_pause_test::connect(&pg.url()).await.unwrap();
    db.execute(
        "CREATE TABLE ledger (account BIGINT PRIMARY KEY, balance TEXT NOT NULL, last_token BIGINT NOT NULL)",
        &[],
    )
    .await
    .unwrap();
    let owner = |write: &'static str| {
        [
            "--write-sql",
            write,
            "--read-sql",
            "SELECT balance, last_token FROM ledger WHERE account = $1",
            "--reset-sql",
            "INSERT INTO ledger VALUES ($1, $2, 0) ON CONFLICT (account) DO UPDATE SET balance = $2, last_token = 0",
        ]
    };
    let fenced = owner(
        "UPDATE ledger SET balance = $2, last_token = $3 WHERE account = $1 AND last_token < $3",
    );
    let (code, text) = run_as(&kit, "owner", "own", 20, None, &fenced, true);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("20 cycles") && text.contains("PASS"),
        "{text}"
    );
    // The same kit on an owner's statement that records the token but never compares it.
    let unfenced = owner("UPDATE ledger SET balance = $2, last_token = $3 WHERE account = $1");
    let (code, text) = run_as(&kit, "owner", "own-bad", 2, None, &unfenced, true);
    assert_eq!(code, Some(1), "{text}");
    assert_eq!(count(&text, "stale writes accepted "), 2, "{text}");
    // Half the statements is refused before anything runs.
    let (code, text) = run_as(&kit, "owner", "own-half", 1, None, &fenced[..2], true);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("--fence owner needs --write-sql, --read-sql and --reset-sql"),
        "{text}"
    );

    // The registry: `fenced` without a result is refused naming the class; with the kit's
    // result (written only by the passing run) it is accepted.
    let reg = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(dev_registry()).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, reg.path().join(p.file_name().unwrap())).unwrap();
    }
    std::fs::write(
        reg.path().join("pg.yaml"),
        "apiVersion: lock.dev/v1alpha1\nkind: LockClass\nmetadata: {name: pay-pg}\nspec:\n  namespace: pay\n  prefixes: [pay/pg]\n  purpose: correctness\n  tier: entity\n  enforcement: fenced\n  resource: pg/fenced_resource\n  schemaVersion: \"1\"\n  ttlSeconds: 10\n",
    )
    .unwrap();
    let check = || lockctl(&["registry", "check", reg.path().to_str().unwrap()], &[]).unwrap();
    let out = check();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("class pay-pg is fenced but has no unexpired PauseTestResult")
    );
    let written: Vec<_> = std::fs::read_dir(results.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(written.len(), 1, "one result document");
    std::fs::copy(&written[0], reg.path().join("result.yaml")).unwrap();
    let out = check();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The owner changes the write path and bumps the schema version: the result was about
    // the old one, so the class is no longer fenced until the kit runs again (ADR-17).
    let pg = reg.path().join("pg.yaml");
    let class = std::fs::read_to_string(&pg).unwrap();
    std::fs::write(
        &pg,
        class.replace("schemaVersion: \"1\"", "schemaVersion: \"2\""),
    )
    .unwrap();
    let out = check();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("for pg/fenced_resource at schema version 2 (the unexpired one for this class is for pg/fenced_resource at schema version 1)"),
        "{said}"
    );
}

/// ADR-16's S3 reference fence (a PUT conditional on the ETag read, the token in the bytes)
/// on a real S3-compatible server: it passes; each broken variant is caught, the way it
/// breaks named by the counts.
#[tokio::test]
async fn s3_reference_fence_passes_and_its_broken_variants_fail() {
    let (stack, reg) = Stack::with_test_registry().await.unwrap();
    let s3 = S3Server::start(&stack.dir).unwrap();
    let kit = Kit {
        stack,
        resource: Resource::S3(s3),
        _reg: reg,
    };
    let results = tempfile::tempdir().unwrap();
    let (code, text) = run(&kit, "s3", "s3ref", 40, Some(results.path()));
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(count(&text, "stale writes accepted "), 0, "{text}");
    assert_eq!(count(&text, "replays accepted "), 0, "{text}");
    assert_eq!(count(&text, "values lost "), 0, "{text}");
    assert_eq!(std::fs::read_dir(results.path()).unwrap().count(), 1);

    // No If-Match and nothing compared (the token only recorded): the frozen holder's
    // write lands after B's, and B's replay lands too.
    let (code, text) = run(&kit, "s3-unconditional", "s3u", 2, None);
    assert_eq!(code, Some(1), "{text}");
    assert_eq!(count(&text, "stale writes accepted "), 2, "{text}");
    assert_eq!(count(&text, "replays accepted "), 2, "{text}");

    // The token compared by the client only: the holder frozen after its comparison
    // writes after B, and the lower token it leaves lets B's replay through as well.
    let (code, text) = run(&kit, "s3-client-compare", "s3c", 2, None);
    assert_eq!(code, Some(1), "{text}");
    assert_eq!(count(&text, "stale writes accepted "), 2, "{text}");
    assert_eq!(count(&text, "replays accepted "), 2, "{text}");

    // If-Match, but the token only in metadata: B writes the bytes the record already had,
    // the ETag does not change, and the frozen holder's If-Match still matches.
    let (code, text) = run(&kit, "s3-etag-of-value", "s3e", 2, None);
    assert_eq!(code, Some(1), "{text}");
    assert_eq!(count(&text, "stale writes accepted "), 2, "{text}");
}
