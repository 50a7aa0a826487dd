//! The audit trail (issue 22, item 1) against real etcd, arbiters, Envoy and PostgreSQL:
//! two tailers (one elected), the leader killed mid-load; the table then holds every lock
//! event of etcd's history exactly once, as an independent watch from revision 1 reads it;
//! expiry, close, release, handoff and epoch advance told apart; a compaction past the
//! checkpoint is a gap row and an alarm; a day's rows read back from Parquet; `lockctl
//! audit` prints a key's history.

use lock_audit::classify::{Kind, Row};
use lock_audit::store::{AuditStore, Postgres as AuditDb};
use lock_config::proto::v1::*;
use lock_integration::audit::Tailer;
use lock_integration::postgres::Postgres;
use lock_integration::registry::{FAST_PREFIX, SLOW_PREFIX, waiter_id};
use lock_integration::stack::Stack;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const YEAR_2100_MS: i64 = 4_102_444_800_000;

async fn head(stack: &Stack) -> i64 {
    let mut c = stack.etcd_client().await.unwrap();
    c.get("/sys/epoch", None)
        .await
        .unwrap()
        .header()
        .map_or(0, |h| h.revision())
}

/// Waits (bounded) until the stored checkpoint reaches `revision`; on time out, says so
/// with the tailers' logs.
async fn caught_up(db: &AuditDb, cluster: &str, revision: i64, tailers: &[&Tailer]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let cp = db.checkpoint(cluster).await.unwrap().unwrap_or(0);
        if cp >= revision {
            return;
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = tailers.iter().map(|t| t.proc.log_text()).collect();
            panic!(
                "the tailer's checkpoint stayed at {cp}, below {revision}; logs:\n{}",
                logs.join("\n---\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn stored_rows(db: &AuditDb) -> Vec<Row> {
    let mut rows: Vec<Row> = db
        .between(0, YEAR_2100_MS)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.row)
        .collect();
    rows.sort();
    rows
}

/// One workload's script: on a shared key (contention: waits and handoffs) and keys of
/// its own; every third hold is abandoned (the session expires), every fourth ends with
/// its session's close; the rest are released. Errors are tolerated: the arbiters and
/// the tailers are disturbed meanwhile.
async fn workload(stack: &Stack, w: usize, rounds: usize) -> Vec<String> {
    let mut c = stack.workload(&waiter_id(w)).await.unwrap();
    let mut abandoned = Vec::new();
    for r in 0..rounds {
        let lost = r % 3 == 0;
        let key = if lost {
            format!("{FAST_PREFIX}/audit/lost-{w}-{r}")
        } else {
            format!("{FAST_PREFIX}/audit/shared")
        };
        let Ok(s) = c
            .open_session(OpenSessionRequest { key: key.clone() })
            .await
        else {
            continue;
        };
        let session_id = s.into_inner().session_id;
        let granted = c
            .acquire(AcquireRequest {
                key: key.clone(),
                session_id,
                wait_millis: 4000,
                ..Default::default()
            })
            .await;
        let Ok(g) = granted else {
            let _ = c.close_session(CloseSessionRequest { session_id }).await;
            continue;
        };
        if lost {
            abandoned.push(key);
            continue;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        if r % 4 != 1 {
            let _ = c
                .release(ReleaseRequest {
                    key: key.clone(),
                    token: g.into_inner().token,
                    session_id,
                    ..Default::default()
                })
                .await;
        }
        let _ = c.close_session(CloseSessionRequest { session_id }).await;
    }
    abandoned
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tailer_records_every_lock_event_once_across_a_kill_and_a_compaction() {
    let (stack, _registry) = Stack::with_test_registry().await.unwrap();
    let pg = Postgres::start(&stack.dir.join("audit-pg")).unwrap();
    let url = pg.url();
    let access = stack.etcd_access();
    let dir = stack.dir.clone();
    let mut tailers = vec![
        Tailer::start(&dir, &access, &url, "tailer-a", &[]).unwrap(),
        Tailer::start(&dir, &access, &url, "tailer-b", &[]).unwrap(),
    ];
    let db = AuditDb::connect(&url).await.unwrap();
    let cluster = stack.etcd.cluster_id().await.unwrap();

    // Load from three workloads while the elected tailer is killed and restarted.
    let load = async {
        let (a, b, c) = tokio::join!(
            workload(&stack, 0, 9),
            workload(&stack, 1, 9),
            workload(&stack, 2, 9)
        );
        [a, b, c]
    };
    let disturb = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let leader = tailers
            .iter()
            .position(|t| t.metric("lock_audit_leader").unwrap_or(0) == 1)
            .expect("one tailer is elected");
        tailers[leader].proc.kill();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let id = tailers[leader].id.clone();
        tailers[leader] = Tailer::start(&dir, &access, &url, &id, &[]).unwrap();
    };
    let (abandoned, ()) = tokio::join!(load, disturb);
    let abandoned: Vec<String> = abandoned.into_iter().flatten().collect();
    assert!(
        !abandoned.is_empty(),
        "no hold was abandoned: no expiry to see"
    );

    // Let the abandoned sessions expire (TTL 5 s), bounded.
    let mut root = stack.etcd_client().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let lost_prefix = format!("/l/{FAST_PREFIX}/audit/lost-");
    while root
        .get(
            lost_prefix.as_str(),
            Some(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_count_only(),
            ),
        )
        .await
        .unwrap()
        .count()
        > 0
    {
        assert!(Instant::now() < deadline, "abandoned holds never expired");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // One hold, then an epoch advance, which ends it.
    let mut ops = stack.workload(&waiter_id(0)).await.unwrap();
    let advanced = format!("{FAST_PREFIX}/audit/advanced");
    let s = ops
        .open_session(OpenSessionRequest {
            key: advanced.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .session_id;
    ops.acquire(AcquireRequest {
        key: advanced.clone(),
        session_id: s,
        wait_millis: 0,
        ..Default::default()
    })
    .await
    .unwrap();
    stack.advance_epoch(1).await.unwrap();

    // Every event of etcd's history, exactly once.
    let at = head(&stack).await;
    caught_up(&db, &cluster, at, &tailers.iter().collect::<Vec<_>>()).await;
    let mut want = lock_audit::tailer::replay(&mut root, 1).await.unwrap();
    want.sort();
    let got = stored_rows(&db).await;
    let missing: Vec<&Row> = want.iter().filter(|r| !got.contains(r)).collect();
    let extra: Vec<&Row> = got.iter().filter(|r| !want.contains(r)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing {missing:#?}\nextra {extra:#?}"
    );
    assert_eq!(got.len(), want.len());
    let mut kinds: BTreeMap<Kind, usize> = BTreeMap::new();
    for r in &got {
        *kinds.entry(r.kind).or_default() += 1;
    }
    println!("audit rows by kind: {kinds:?}");
    // The owners' signal (ADR-22): holds that expired without a release, per class, as
    // the tailers counted them (a failover's replay may count one twice, never miss one
    // the store has).
    let expired: i64 = tailers
        .iter()
        .map(|t| {
            t.metric(r#"lock_audit_hold_ends_total{class="pay-fast",kind="expiry"}"#)
                .unwrap_or(0)
        })
        .sum();
    let expiry_rows = got.iter().filter(|r| r.kind == Kind::Expiry).count();
    assert!(
        usize::try_from(expired).unwrap() >= expiry_rows.min(1),
        "expiries counted {expired}, rows {expiry_rows}"
    );

    // Told apart: each abandoned hold expired with its session; closes and releases are
    // what they were; the advance revoked the hold it found.
    for key in &abandoned {
        let rows: Vec<&Row> = got.iter().filter(|r| &r.key == key).collect();
        let seq: Vec<Kind> = rows.iter().map(|r| r.kind).collect();
        assert_eq!(seq, vec![Kind::Grant, Kind::Expiry], "{key}");
        let session = format!("/s/{}", rows[0].session);
        let seq: Vec<Kind> = got
            .iter()
            .filter(|r| r.key == session)
            .map(|r| r.kind)
            .collect();
        assert_eq!(
            seq,
            vec![Kind::SessionOpen, Kind::SessionExpiry],
            "{session}"
        );
    }
    for k in [
        Kind::Grant,
        Kind::Release,
        Kind::ClosedWithSession,
        Kind::SessionClose,
        Kind::Handoff,
        Kind::EpochAdvance,
    ] {
        assert!(
            kinds.get(&k).copied().unwrap_or(0) > 0,
            "no {k:?} row: {kinds:?}"
        );
    }
    let ended: Vec<Kind> = got
        .iter()
        .filter(|r| r.key == advanced)
        .map(|r| r.kind)
        .collect();
    assert_eq!(ended, vec![Kind::Grant, Kind::RevokedByAdvance]);
    // Never a token in the trail.
    let text = format!("{got:?}");
    assert!(!text.contains("token"), "{text}");

    // `lockctl audit KEY`.
    let out =
        std::process::Command::new(lock_integration::paths::workspace_bin("lockctl").unwrap())
            .args(["audit", &abandoned[0], "--since", "1h", "--db", &url])
            .output()
            .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("grant") && text.contains("expiry"), "{text}");

    // A day's rows to Parquet and back.
    let day = time::OffsetDateTime::now_utc().date().to_string();
    let export =
        std::process::Command::new(lock_integration::paths::workspace_bin("lock-audit").unwrap())
            .args(["export", "--db", &url, "--day", &day, "--out"])
            .arg(dir.join("archive"))
            .output()
            .unwrap();
    assert!(
        export.status.success(),
        "{}",
        String::from_utf8_lossy(&export.stderr)
    );
    let back = lock_audit::export::read(
        &dir.join("archive")
            .join(format!("lock-audit-{day}.parquet")),
    )
    .unwrap();
    let (from, to) = lock_audit::export::day_bounds(&day).unwrap();
    assert_eq!(back, db.between(from, to).await.unwrap());
    assert!(back.len() >= got.len());
    // The same day to an object-store URL (object_store's file:// store; S3 takes the same
    // path with AWS_* credentials) reads back the same.
    let store_url = format!("file://{}/bucket/audit", dir.display());
    std::fs::create_dir_all(dir.join("bucket/audit")).unwrap();
    let export =
        std::process::Command::new(lock_integration::paths::workspace_bin("lock-audit").unwrap())
            .args(["export", "--db", &url, "--day", &day, "--out", &store_url])
            .output()
            .unwrap();
    let said = String::from_utf8_lossy(&export.stdout);
    assert!(
        export.status.success() && said.contains(&format!("{store_url}/lock-audit-{day}.parquet")),
        "{said}{}",
        String::from_utf8_lossy(&export.stderr)
    );
    let from_store = lock_audit::export::read(
        &dir.join("bucket/audit")
            .join(format!("lock-audit-{day}.parquet")),
    )
    .unwrap();
    assert_eq!(from_store, back);

    // A compaction past the checkpoint: tailers stopped, more events, etcd compacted at
    // the head, a tailer started: an explicit gap row and the alarm metric.
    for t in &mut tailers {
        t.proc.kill();
    }
    let checkpoint = db.checkpoint(&cluster).await.unwrap().unwrap_or(0);
    for i in 0..3 {
        let key = format!("{FAST_PREFIX}/audit/compacted-{i}");
        let s = ops
            .open_session(OpenSessionRequest { key: key.clone() })
            .await
            .unwrap()
            .into_inner()
            .session_id;
        ops.acquire(AcquireRequest {
            key,
            session_id: s,
            wait_millis: 0,
            ..Default::default()
        })
        .await
        .unwrap();
        ops.close_session(CloseSessionRequest { session_id: s })
            .await
            .unwrap();
    }
    let compacted_at = head(&stack).await;
    root.compact(
        compacted_at,
        Some(etcd_client::CompactionOptions::new().with_physical()),
    )
    .await
    .unwrap();
    let late = Tailer::start(&dir, &access, &url, "tailer-late", &[]).unwrap();
    caught_up(&db, &cluster, compacted_at, &[&late]).await;
    let gaps: Vec<Row> = stored_rows(&db)
        .await
        .into_iter()
        .filter(|r| r.kind == Kind::Gap)
        .collect();
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    assert_eq!(
        gaps[0].detail,
        format!(
            "{{\"from\":{},\"to\":{}}}",
            checkpoint + 1,
            compacted_at - 1
        )
    );
    assert_eq!(late.metric("lock_audit_gaps_total").unwrap(), 1);

    // Every tailer series the alert rules name is one the tailer exports. A family with
    // no series yet (the longest hold, while no hold is scanned) prints no metadata, so
    // the names are also read from the tailer's own registry with every family given a
    // series, in this process.
    let mut exported = lock_integration::admin_get(late.admin, "/metrics").unwrap();
    {
        use lock_audit::metrics::{ClassLabel, HoldEndLabel, METRICS};
        let class = || "any".to_owned();
        METRICS
            .longest_hold
            .get_or_create(&ClassLabel { class: class() })
            .set(0.0);
        METRICS
            .hold_ends
            .get_or_create(&HoldEndLabel {
                class: class(),
                kind: "expiry",
            })
            .inc();
        exported.push_str(&METRICS.encode());
    }
    let rules = std::fs::read_to_string(
        lock_integration::paths::workspace_root().join("deploy/prometheus/alerts.yaml"),
    )
    .unwrap();
    for (name, base) in lock_integration::prometheus::names_used(&rules, "lock_audit_") {
        assert!(
            exported.contains(&format!("# TYPE {base} ")),
            "alerts.yaml uses {name}, which the tailer does not export:\n{exported}"
        );
    }
}

/// A seeded audit row of class `class` (the register and export tests).
fn seeded(revision: i64, kind: Kind, class: &str) -> Row {
    Row {
        revision,
        key: format!("pay/ledger/{revision}"),
        kind,
        spiffe_id: waiter_id(1),
        session: "1f".into(),
        class: class.into(),
        detail: String::new(),
    }
}

/// A finished command's stdout, which must have succeeded (else its words fail the test).
fn stdout_of(out: std::process::Output) -> String {
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// ADR-01: the risk register counts an advisory class's grants from the audit trail (its
/// own transactions and handoffs, not releases), over a window, on a real PostgreSQL.
#[tokio::test]
async fn the_register_counts_grants_per_class_from_the_audit_store() {
    let dir = tempfile::tempdir().unwrap();
    let pg = Postgres::start(dir.path()).unwrap();
    let db = AuditDb::connect(&pg.url()).await.unwrap();
    let rows = [
        seeded(1, Kind::Grant, "pay-ledger"),
        seeded(2, Kind::Grant, "pay-ledger"),
        seeded(3, Kind::Handoff, "pay-ledger"),
        seeded(4, Kind::Release, "pay-ledger"),
        seeded(5, Kind::Expiry, "pay-ledger"),
        seeded(6, Kind::Grant, "orders-default"),
    ];
    assert_eq!(db.insert("c1", &rows).await.unwrap(), 6);
    let register = |extra: &[&str]| {
        let dev = lock_integration::paths::dev_registry();
        let mut args = vec!["register", dev.to_str().unwrap()];
        args.extend_from_slice(extra);
        stdout_of(lock_integration::stack::lockctl(&args, &[]).unwrap())
    };
    let url = pg.url();
    let json: serde_json::Value =
        serde_json::from_str(&register(&["--json", "--audit-db", &url])).unwrap();
    let ledger = json
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["class"] == "pay-ledger")
        .unwrap();
    assert_eq!(ledger["auditedGrants"], 3, "{json}");
    // The table says what the column counts.
    let table = register(&["--audit-db", &url, "--audit-days", "7"]);
    assert!(
        table.contains("AUDITED: grants in the last 7 days, from the audit trail"),
        "{table}"
    );
}

/// What the test does to the S3 server as an independent client (boto3, moto's own
/// dependency): make the buckets as an operator would, then check what the export left.
const S3_FIXTURE: &str = r#"
import sys, datetime, boto3
from botocore.exceptions import ClientError
endpoint, step = sys.argv[1], sys.argv[2]
s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                  aws_access_key_id="pause-test", aws_secret_access_key="pause-test-secret")
if step == "buckets":
    s3.create_bucket(Bucket="lock-audit-archive")
    for name, mode in (("lock-force-archive", "COMPLIANCE"), ("lock-force-governed", "GOVERNANCE")):
        s3.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
        s3.put_object_lock_configuration(Bucket=name, ObjectLockConfiguration={
            "ObjectLockEnabled": "Enabled",
            "Rule": {"DefaultRetention": {"Mode": mode, "Years": 7}}})
elif step == "get":
    bucket, key, path = sys.argv[3], sys.argv[4], sys.argv[5]
    s3.download_file(bucket, key, path)
elif step == "locked":
    bucket, key = sys.argv[3], sys.argv[4]
    # The object's own lock, as HEAD reports it (moto's GetObjectRetention answers 500).
    head = s3.head_object(Bucket=bucket, Key=key)
    version = head["VersionId"]
    until = head["ObjectLockRetainUntilDate"].replace(tzinfo=None)
    years = (until - datetime.datetime.utcnow()).days / 365
    try:
        s3.delete_object(Bucket=bucket, Key=key, VersionId=version)
        print("deleted")
    except ClientError as e:
        print("delete refused", e.response["Error"]["Code"])
    print(head["ObjectLockMode"], int(years))
"#;

/// ADR-20/21: force releases are kept seven years in a write-once bucket. The export of
/// force rows reads the bucket's Object Lock configuration first and refuses one that would
/// not keep them (GOVERNANCE mode), writes to one that would (COMPLIANCE, seven years), and
/// the object it left cannot be deleted. The day's full archive goes to an ordinary bucket.
/// All against a real S3-compatible server (moto).
#[tokio::test]
async fn force_releases_go_to_a_write_once_bucket_kept_seven_years() {
    use lock_integration::s3::S3Server;
    let dir = tempfile::tempdir().unwrap();
    let pg = Postgres::start(dir.path()).unwrap();
    let db = AuditDb::connect(&pg.url()).await.unwrap();
    let rows = [
        seeded(1, Kind::Grant, "pay-ledger"),
        seeded(2, Kind::ForceRequest, "pay-ledger"),
        seeded(3, Kind::ForceRelease, "pay-ledger"),
        seeded(4, Kind::Release, "pay-ledger"),
    ];
    db.insert("c1", &rows).await.unwrap();
    let s3 = S3Server::start(dir.path()).unwrap();
    let python = lock_integration::paths::workspace_root().join(".deps/python-venv/bin/python");
    let fixture = |args: &[&str]| {
        stdout_of(
            std::process::Command::new(&python)
                .args(["-c", S3_FIXTURE, &s3.url()])
                .args(args)
                .output()
                .unwrap(),
        )
    };
    fixture(&["buckets"]);
    let day = time::OffsetDateTime::now_utc().date().to_string();
    let export = |out: &str, extra: &[&str]| {
        std::process::Command::new(lock_integration::paths::workspace_bin("lock-audit").unwrap())
            .args(["export", "--db", &pg.url(), "--day", &day, "--out", out])
            .args(extra)
            .envs(s3.env())
            .env("AWS_ENDPOINT", s3.url())
            .env("AWS_ALLOW_HTTP", "true")
            // Real S3 wants a checksum on every PUT into a bucket with Object Lock.
            .env("AWS_CHECKSUM_ALGORITHM", "SHA256")
            .output()
            .unwrap()
    };
    let read_back = |bucket: &str, key: &str| {
        let path = dir.path().join(key.replace('/', "-"));
        fixture(&["get", bucket, key, path.to_str().unwrap()]);
        lock_audit::export::read(&path).unwrap()
    };

    // The year's archive: every row of the day, to an ordinary bucket.
    let out = export("s3://lock-audit-archive/c1", &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all = read_back(
        "lock-audit-archive",
        &format!("c1/lock-audit-{day}.parquet"),
    );
    assert_eq!(all.len(), 4);

    // A bucket in GOVERNANCE mode can be emptied by a privileged user: refused, nothing written.
    let out = export(
        "s3://lock-force-governed/c1",
        &["--force-only", "--retention-years", "7"],
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("GOVERNANCE"), "{said}");
    // An ordinary bucket has no Object Lock at all.
    let out = export(
        "s3://lock-audit-archive/force",
        &["--force-only", "--retention-years", "7"],
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("Object Lock is not enabled"), "{said}");

    // COMPLIANCE for seven years: the force rows alone, and the object cannot be deleted.
    let out = export(
        "s3://lock-force-archive/c1",
        &["--force-only", "--retention-years", "7"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let key = format!("c1/lock-force-{day}.parquet");
    let force = read_back("lock-force-archive", &key);
    let kinds: Vec<Kind> = force.iter().map(|s| s.row.kind).collect();
    assert_eq!(kinds, [Kind::ForceRequest, Kind::ForceRelease]);
    let locked = fixture(&["locked", "lock-force-archive", &key]);
    assert!(locked.contains("delete refused AccessDenied"), "{locked}");
    assert!(
        locked.contains("COMPLIANCE 6") || locked.contains("COMPLIANCE 7"),
        "{locked}"
    );
}

/// ADR-21: with tiers, the tailers of an entity shard hold their election on the coord
/// cluster (`--election-etcd`), under the shard's cluster ID; the shard itself carries no
/// election key. Two tailers of e1: one leads; killed, the other takes over and records e1's
/// lock events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entity_shards_tailers_hold_their_election_on_the_coord_cluster() {
    let (stack, _reg, keys) = Stack::with_two_shards(&format!("{FAST_PREFIX}/elect"))
        .await
        .unwrap();
    let pg = Postgres::start(&stack.dir.join("audit-pg")).unwrap();
    let url = pg.url();
    let e1 = &stack.shards[0];
    let e1_access = e1.access(&e1.client_url);
    let coord = stack.etcd_urls();
    let on_coord = ["--election-etcd", coord.as_str()];
    let dir = stack.dir.clone();
    let mut tailers = vec![
        Tailer::start(&dir, &e1_access, &url, "e1-tailer-a", &on_coord).unwrap(),
        Tailer::start(&dir, &e1_access, &url, "e1-tailer-b", &on_coord).unwrap(),
    ];
    let leaders = |tailers: &[Tailer]| -> Vec<usize> {
        (0..tailers.len())
            .filter(|i| tailers[*i].metric("lock_audit_leader").unwrap_or(0) == 1)
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while leaders(&tailers).len() != 1 {
        assert!(Instant::now() < deadline, "no tailer was elected");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The election is on the coord cluster, named for e1's cluster ID; none on e1.
    let mut e1_root = e1.client_as("root").await.unwrap();
    let e1_id = format!(
        "{:x}",
        e1_root
            .get("/sys/epoch", None)
            .await
            .unwrap()
            .header()
            .unwrap()
            .cluster_id()
    );
    let prefix = Some(etcd_client::GetOptions::new().with_prefix());
    let mut coord_root = stack.etcd.client_as("root").await.unwrap();
    let on_coord_keys = coord_root
        .get(format!("/audit/election/{e1_id}"), prefix.clone())
        .await
        .unwrap()
        .count();
    assert!(on_coord_keys >= 1, "no election key on the coord cluster");
    assert_eq!(
        e1_root.get("/audit/", prefix).await.unwrap().count(),
        0,
        "an election key on the audited shard"
    );
    // The leader goes; the other takes over and records a hold on e1.
    let first = leaders(&tailers)[0];
    tailers[first].proc.kill();
    let other = 1 - first;
    let deadline = Instant::now() + Duration::from_secs(30);
    while tailers[other].metric("lock_audit_leader").unwrap_or(0) != 1 {
        assert!(Instant::now() < deadline, "the standby never took over");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut c = stack.workload(&waiter_id(1)).await.unwrap();
    let s = c
        .open_session(OpenSessionRequest {
            key: keys[0].clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .session_id;
    c.acquire(AcquireRequest {
        key: keys[0].clone(),
        session_id: s,
        wait_millis: 0,
        ..Default::default()
    })
    .await
    .unwrap();
    let db = AuditDb::connect(&url).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let rows = db.history(&keys[0], 0).await.unwrap();
        if rows
            .iter()
            .any(|r| r.row.kind == Kind::Grant && r.cluster_id == e1_id)
        {
            break;
        }
        assert!(Instant::now() < deadline, "e1's grant was never recorded");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The longest hold per class (ADR-22): the elected tailer's scan reports the age of the
/// oldest hold of each class, across two processes of one identity; a standby reports
/// nothing; the series goes when the class's last hold ends (each scan clears the
/// family before setting it: without that, the ended hold's series would stay).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_elected_tailer_reports_the_longest_hold_per_class() {
    let (stack, _registry) = Stack::with_test_registry().await.unwrap();
    let pg = Postgres::start(&stack.dir.join("audit-pg")).unwrap();
    let access = stack.etcd_access();
    let scan = ["--hold-scan-seconds", "1"];
    let a = Tailer::start(&stack.dir, &access, &pg.url(), "tailer-a", &scan).unwrap();
    let b = Tailer::start(&stack.dir, &access, &pg.url(), "tailer-b", &scan).unwrap();
    let series = r#"lock_audit_longest_hold_seconds{class="pay-slow"}"#;
    let leader = || {
        [&a, &b]
            .into_iter()
            .find(|t| t.metric("lock_audit_leader").unwrap_or(0) == 1)
    };
    // Two replicas of one identity, each holding a key of the class.
    let id = waiter_id(0);
    let svid = stack.pki.svid("replica", &id).unwrap();
    let first = stack.lock_client_with(&svid, Some("replica-1")).unwrap();
    let second = stack.lock_client_with(&svid, Some("replica-2")).unwrap();
    let old = first
        .acquire(
            &format!("{SLOW_PREFIX}/longest/1"),
            Duration::from_secs(10),
            || {},
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let young = second
        .acquire(
            &format!("{SLOW_PREFIX}/longest/2"),
            Duration::from_secs(10),
            || {},
        )
        .await
        .unwrap();
    // The oldest hold's age, by the leader; the standby has no series.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let age = loop {
        if let Some(l) = leader()
            && let Some(age) = l.metric_value(series).unwrap()
            && age >= 3.0
        {
            let standby = if std::ptr::eq(l, &a) { &b } else { &a };
            assert_eq!(standby.metric_value(series).unwrap(), None);
            break age;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no longest-hold series of 3 s or more"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert!(age < 600.0, "{age}");
    // The class's last hold ends: its series goes at the next scan.
    old.release().await.unwrap();
    young.release().await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while leader()
        .and_then(|l| l.metric_value(series).unwrap())
        .is_some()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the ended holds' series stayed"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    first.shutdown().await.unwrap();
    second.shutdown().await.unwrap();
}
