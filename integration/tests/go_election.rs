//! Fenced leader election for Go controllers (clients/go/leaderelection), with processes:
//! two replicas of the sample controller `clients/go/leaderelection/example/controller`
//! with ONE identity (one SVID, two processes, as a Deployment's replicas share one SPIFFE
//! ID) against the real stack and a real PostgreSQL. The leader writes its record under
//! its term; it is frozen with SIGSTOP after its check, before its write (SIGUSR1 makes
//! it pause there, SIGUSR2 lets it go on), past its TTL; the other replica leads and
//! writes; the frozen one is thawed (SIGCONT) and makes the write it had checked.
//!
//! - Fenced (`... WHERE id = $1 AND fence <= $term`): PostgreSQL refuses the late write
//!   (0 rows), the controller says so, and the record's fence never went down (a trigger
//!   keeps every fence the table took).
//! - Unfenced (`--unfenced`: `WHERE id = $1`), the same scenario: the late write lands and
//!   the fence goes down. The check the fenced test passes fails here: the "seen failing"
//!   proof that the fence, not luck or timing, is what refuses the late write.
//!
//! Needs `go` (1.26) on the PATH and PostgreSQL's server binaries (install-deps.sh).

use lock_integration::Stack;
use lock_integration::paths::workspace_root;
use lock_integration::pki::ENVOY_ID;
use lock_integration::postgres::Postgres;
use lock_integration::process::Proc;
use lock_integration::registry::{FAST_PREFIX, FAST_TTL, waiter_id};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const RECORD: i64 = 7;

/// The record, and a trigger that keeps every fence it took, in order.
const SCHEMA: &str = "
CREATE TABLE fenced_resource (id BIGINT PRIMARY KEY, value TEXT NOT NULL, fence BIGINT NOT NULL DEFAULT 0);
INSERT INTO fenced_resource (id, value) VALUES (7, 'initial');
CREATE TABLE fence_history (seq BIGSERIAL PRIMARY KEY, fence BIGINT NOT NULL, value TEXT NOT NULL);
CREATE FUNCTION keep_fence() RETURNS trigger AS $$
BEGIN
  INSERT INTO fence_history (fence, value) VALUES (NEW.fence, NEW.value);
  RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER keep_fence AFTER UPDATE ON fenced_resource FOR EACH ROW EXECUTE FUNCTION keep_fence();
";

/// Builds the sample controller into `dir`.
fn build_controller(dir: &Path) -> PathBuf {
    let out = dir.join("go-controller");
    let built = Command::new("go")
        .args(["build", "-o"])
        .arg(&out)
        .arg(".")
        .current_dir(workspace_root().join("clients/go/leaderelection/example/controller"))
        .output()
        .expect("go build (is Go 1.26 on the PATH?)");
    assert!(
        built.status.success(),
        "go build of the controller:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    out
}

/// Each replica's lines after `since` (a count per replica).
fn lines_after(replicas: &[Proc], since: &[usize]) -> Vec<String> {
    replicas
        .iter()
        .zip(since)
        .flat_map(|(r, n)| {
            r.log_text()
                .lines()
                .skip(*n)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

fn mark(replicas: &[Proc]) -> Vec<usize> {
    replicas
        .iter()
        .map(|r| r.log_text().lines().count())
        .collect()
}

fn all_lines(replicas: &[Proc]) -> String {
    replicas
        .iter()
        .map(|r| r.log_text())
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Waits until a line some replica wrote after `since` satisfies `pred`; returns it.
fn wait_for(
    replicas: &mut [Proc],
    since: &[usize],
    what: &str,
    secs: u64,
    pred: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(l) = lines_after(replicas, since).into_iter().find(|l| pred(l)) {
            return l;
        }
        for r in replicas.iter_mut() {
            if let Err(e) = r.check_running() {
                panic!("{what}: {e}\n{}", all_lines(replicas));
            }
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {secs} s; lines:\n{}",
            all_lines(replicas)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The process's state letter (`T`: stopped) from /proc.
fn process_state(p: &Proc) -> char {
    let stat =
        std::fs::read_to_string(format!("/proc/{}/stat", p.pid().unwrap())).unwrap_or_default();
    stat.rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next())
        .unwrap_or('?')
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

async fn fence_now(db: &tokio_postgres::Client) -> i64 {
    db.query_one(
        "SELECT fence FROM fenced_resource WHERE id = $1",
        &[&RECORD],
    )
    .await
    .unwrap()
    .get(0)
}

/// Every fence the record took, in order.
async fn history(db: &tokio_postgres::Client) -> Vec<(i64, String)> {
    db.query("SELECT fence, value FROM fence_history ORDER BY seq", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// The property the fence keeps: the record's fence never went down.
fn fence_only_increased(history: &[(i64, String)]) -> Result<(), String> {
    for w in history.windows(2) {
        if w[1].0 < w[0].0 {
            return Err(format!(
                "the fence went down: {:?} was written after {:?}",
                w[1].1, w[0].1
            ));
        }
    }
    Ok(())
}

/// What the scenario saw.
struct Run {
    lines: String,
    history: Vec<(i64, String)>,
    leader: String,
}

/// Two replicas of one identity; freeze the leader after its check past the TTL; wait
/// for the other's write; thaw the frozen one and wait for its late write's outcome
/// (`expect`).
async fn freeze_the_leader(unfenced: bool, expect: &str) -> Run {
    let (stack, _reg) = Stack::with_test_registry().await.unwrap();
    let pg = Postgres::start(&stack.dir).unwrap();
    let db = connect(&pg.url()).await;
    db.batch_execute(SCHEMA).await.unwrap();
    let controller = build_controller(&stack.dir);
    let key = format!("{FAST_PREFIX}/go-controller");
    // One Deployment: one identity, two processes.
    let svid = stack.pki.svid("go-controller", &waiter_id(5)).unwrap();
    let names = ["r1", "r2"];
    let mut replicas: Vec<Proc> = names
        .iter()
        .map(|name| {
            let mut cmd = Command::new(&controller);
            // Its own process group: the test's group may be orphaned (its parent in
            // another session), and then any member's exit while a member is stopped
            // makes the kernel send the whole group SIGHUP and SIGCONT (POSIX orphaned
            // process groups), thawing the frozen leader early.
            cmd.process_group(0);
            if unfenced {
                cmd.arg("--unfenced");
            }
            cmd.env("LOCK_ENDPOINT", stack.endpoint())
                .env("LOCK_SVID", &svid.cert)
                .env("LOCK_SVID_KEY", &svid.key)
                .env("LOCK_CA", &svid.ca)
                .env("LOCK_SERVER_ID", ENVOY_ID)
                .env("LOCK_INSTANCE", format!("go-controller-{name}"))
                .env("CONTROLLER_NAME", name)
                .env("CONTROLLER_KEY", &key)
                .env("CONTROLLER_PG", pg.url())
                .env("CONTROLLER_RECORD", RECORD.to_string());
            Proc::spawn(&format!("go-controller-{name}"), cmd, &stack.dir).unwrap()
        })
        .collect();

    // One leads and writes; the other waits in the queue and is told who leads.
    let start = vec![0; replicas.len()];
    let first = wait_for(&mut replicas, &start, "a first write", 60, |l| {
        l.ends_with(" wrote 2")
    });
    let leader = first.split(' ').next().unwrap().to_owned();
    let other = names.iter().find(|n| **n != leader).unwrap().to_string();
    let li = names.iter().position(|n| *n == leader).unwrap();
    wait_for(
        &mut replicas,
        &start,
        "the follower told who leads",
        15,
        |l| l.starts_with(&format!("{other} new leader go-controller-{leader}:")),
    );
    assert!(
        !lines_after(&replicas, &start).contains(&format!("{other} leads")),
        "two leaders at once:\n{}",
        all_lines(&replicas)
    );
    let old_term = fence_now(&db).await;

    // Freeze it after its check, before its write (it pauses there on SIGUSR1); past
    // the TTL.
    let before_freeze = mark(&replicas);
    replicas[li].signal("USR1").unwrap();
    wait_for(&mut replicas, &before_freeze, "the pause", 10, |l| {
        l == format!("{leader} freezes")
    });
    replicas[li].signal("STOP").unwrap();
    let frozen_at = Instant::now();
    let frozen = mark(&replicas);
    wait_for(
        &mut replicas,
        &frozen,
        "the other replica's write",
        u64::from(FAST_TTL) * 6,
        |l| l.starts_with(&format!("{other} wrote ")),
    );
    assert!(
        frozen_at.elapsed() > Duration::from_secs(u64::from(FAST_TTL) - 1),
        "the other replica wrote {:?} after the freeze, before the TTL could pass",
        frozen_at.elapsed()
    );
    let new_term = fence_now(&db).await;
    assert!(new_term > old_term, "the new term is above the old one");
    let state = process_state(&replicas[li]);
    assert_eq!(
        state,
        'T',
        "the frozen leader is running before its SIGCONT (state {state}); something else thawed it:\n{}",
        all_lines(&replicas)
    );

    // Thaw: the frozen leader makes the write it had checked.
    let before_wake = mark(&replicas);
    replicas[li].signal("CONT").unwrap();
    replicas[li].signal("USR2").unwrap();
    let outcome = wait_for(
        &mut replicas,
        &before_wake,
        "the late write's outcome",
        20,
        |l| l.starts_with(&format!("{leader} late write ")),
    );
    assert_eq!(
        outcome,
        format!("{leader} {expect}"),
        "history: {:?}\nlines:\n{}",
        history(&db).await,
        all_lines(&replicas)
    );
    // The old leader learns it was deposed: OnStoppedLeading (at the fence on waking, or
    // at the latest when it sees the refusal), and it campaigns again.
    wait_for(&mut replicas, &before_wake, "stopped leading", 20, |l| {
        l == format!("{leader} stopped leading")
    });
    wait_for(&mut replicas, &before_wake, "a new campaign", 20, |l| {
        l == format!("{leader} campaigns")
    });
    // Let the new leader write once more after the late write.
    let after = mark(&replicas);
    wait_for(&mut replicas, &after, "the new leader writes on", 10, |l| {
        l.starts_with(&format!("{other} wrote "))
    });
    let run = Run {
        lines: all_lines(&replicas),
        history: history(&db).await,
        leader,
    };
    for r in &mut replicas {
        r.kill();
    }
    run
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_go_controllers_late_write_is_refused_by_the_fence() {
    let run = freeze_the_leader(false, "late write refused by the fence").await;
    if let Err(e) = fence_only_increased(&run.history) {
        panic!("{e}\nhistory: {:?}\nlines:\n{}", run.history, run.lines);
    }
    // The late write left no trace: every value after the other's first write is its.
    assert!(
        !run.lines
            .contains(&format!("{} late write landed", run.leader)),
        "{}",
        run.lines
    );
    println!("{}", run.lines);
}

/// The seen-failing proof: without the fence in the WHERE clause the same freeze lets the
/// late write land, and the check the fenced test passes fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_fence_the_late_write_lands() {
    let run = freeze_the_leader(true, "late write landed").await;
    let verdict = fence_only_increased(&run.history);
    assert!(
        verdict.is_err(),
        "the unfenced late write should have taken the fence down:\nhistory: {:?}\nlines:\n{}",
        run.history,
        run.lines
    );
    println!("as expected without the fence: {}", verdict.unwrap_err());
}
