//! Issue 35, item 2: leader election, the way a singleton runs in a mesh. Three replicas of
//! one Deployment (one SVID, three processes: `client/examples/singleton_worker.rs`)
//! campaign for one key, and only the leader writes, to PostgreSQL through the reference
//! fence under its term. The leader is frozen (SIGSTOP) after its check and before its
//! write, past its TTL. Another replica is elected and writes. Then the old leader wakes and
//! makes the write it had checked. PostgreSQL refuses it, and the old leader campaigns
//! again.

use lock_integration::Stack;
use lock_integration::paths::workspace_example;
use lock_integration::postgres::Postgres;
use lock_integration::process::Proc;
use lock_integration::registry::{FAST_PREFIX, FAST_TTL, waiter_id};
use std::process::Command;
use std::time::{Duration, Instant};

const RECORD: i64 = 7;

/// The replicas' lines so far, each `<name> <event...>` (each replica's in order).
fn lines(workers: &[Proc]) -> Vec<String> {
    workers
        .iter()
        .flat_map(|w| w.log_text().lines().map(str::to_owned).collect::<Vec<_>>())
        .collect()
}

/// How many lines each replica has written so far: a mark to look after.
fn mark(workers: &[Proc]) -> Vec<usize> {
    workers
        .iter()
        .map(|w| w.log_text().lines().count())
        .collect()
}

/// The lines each replica wrote after `since`.
fn lines_after(workers: &[Proc], since: &[usize]) -> Vec<String> {
    workers
        .iter()
        .zip(since)
        .flat_map(|(w, n)| {
            w.log_text()
                .lines()
                .skip(*n)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Waits until a line some replica wrote after `since` satisfies `pred`; returns it.
fn wait_for(
    workers: &mut [Proc],
    since: &[usize],
    what: &str,
    secs: u64,
    pred: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(l) = lines_after(workers, since).into_iter().find(|l| pred(l)) {
            return l;
        }
        for w in workers.iter_mut() {
            if let Err(e) = w.check_running() {
                panic!("{what}: {e}");
            }
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {secs} s; lines: {:#?}",
            lines(workers)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_leaders_late_write_is_refused_by_the_fence() {
    let (stack, _reg) = Stack::with_test_registry().await.unwrap();
    let pg = Postgres::start(&stack.dir).unwrap();
    let db = connect(&pg.url()).await;
    db.batch_execute(
        "CREATE TABLE fenced_resource (id BIGINT PRIMARY KEY, value TEXT NOT NULL, fence BIGINT NOT NULL DEFAULT 0);
         INSERT INTO fenced_resource (id, value) VALUES (7, 'initial');",
    )
    .await
    .unwrap();
    let key = format!("{FAST_PREFIX}/singleton");
    // One Deployment: one identity, three processes.
    let svid = stack.pki.svid("singleton", &waiter_id(1)).unwrap();
    let worker_bin = workspace_example("singleton_worker").unwrap();
    let mut workers: Vec<Proc> = ["r1", "r2", "r3"]
        .iter()
        .map(|name| {
            let mut cmd = Command::new(&worker_bin);
            cmd.env("LOCK_ENDPOINT", stack.endpoint())
                .env("LOCK_SVID", &svid.cert)
                .env("LOCK_SVID_KEY", &svid.key)
                .env("LOCK_CA", &svid.ca)
                .env("LOCK_INSTANCE", format!("singleton-{name}"))
                .env("WORKER_NAME", name)
                .env("WORKER_KEY", &key)
                .env("WORKER_PG", pg.url())
                .env("WORKER_RECORD", RECORD.to_string());
            Proc::spawn(&format!("worker-{name}"), cmd, &stack.dir).unwrap()
        })
        .collect();

    // One leads and writes; the other two wait in the queue.
    let start = vec![0; workers.len()];
    let first = wait_for(&mut workers, &start, "a first write", 30, |l| {
        l.ends_with(" wrote 2")
    });
    let leader_name = first.split(' ').next().unwrap().to_owned();
    let leads = lines(&workers)
        .iter()
        .filter(|l| l.ends_with(" leads"))
        .count();
    assert_eq!(leads, 1, "one leader at a time: {:#?}", lines(&workers));
    let leader = workers
        .iter()
        .position(|w| w.log.ends_with(format!("worker-{leader_name}.log")))
        .unwrap();
    let (_, old_term): (String, i64) = read(&db).await;

    // Freeze it after its check, before its write; past the TTL.
    let before_freeze = mark(&workers);
    workers[leader].signal("USR1").unwrap();
    wait_for(&mut workers, &before_freeze, "the freeze", 10, |l| {
        l == format!("{leader_name} freezes")
    });
    let frozen_at = Instant::now();
    let frozen = mark(&workers);
    let successor = wait_for(
        &mut workers,
        &frozen,
        "a new leader's write",
        u64::from(FAST_TTL) * 6,
        |l| !l.starts_with(&leader_name) && l.ends_with(" wrote 1"),
    );
    assert!(
        frozen_at.elapsed() > Duration::from_secs(u64::from(FAST_TTL) - 1),
        "elected {:?} after the freeze, before the TTL could pass",
        frozen_at.elapsed()
    );
    let (value, new_term) = read(&db).await;
    assert!(new_term > old_term, "the new term is above the old one");
    assert!(value.starts_with(successor.split(' ').next().unwrap()));

    // The old leader wakes and makes the write it had checked: refused.
    let before_wake = mark(&workers);
    workers[leader].signal("CONT").unwrap();
    wait_for(&mut workers, &before_wake, "the fence's refusal", 15, |l| {
        l == format!("{leader_name} refused by the fence")
    });
    let (_, fence) = read(&db).await;
    assert!(
        fence >= new_term,
        "the old term never overwrote the new one"
    );
    // It stepped down and campaigns again.
    wait_for(
        &mut workers,
        &before_wake,
        "the old leader's new campaign",
        15,
        |l| l == format!("{leader_name} campaigns"),
    );
    // Two leaderships in all (the second after the first's term was over).
    let leads_total = lines(&workers)
        .iter()
        .filter(|l| l.ends_with(" leads"))
        .count();
    assert!(leads_total >= 2, "{:#?}", lines(&workers));
    println!("{}", lines(&workers).join("\n"));
    for w in &mut workers {
        w.kill();
    }
}

async fn read(db: &tokio_postgres::Client) -> (String, i64) {
    let row = db
        .query_one(
            "SELECT value, fence FROM fenced_resource WHERE id = $1",
            &[&RECORD],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

/// `lockctl elect --again`: two replicas of one identity (one SVID, two processes) run a
/// command that leads for a moment and fails. Each failure is a new campaign, so they take
/// turns: never two terms at once, every term above the last, and a SIGTERM ends each
/// replica (128+15) with its session closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_elect_again_takes_turns_between_replicas_of_one_identity() {
    let (stack, _reg) = Stack::with_test_registry().await.unwrap();
    let key = format!("{FAST_PREFIX}/elect");
    let log = stack.dir.join("terms");
    let svid = stack.pki.svid("elect", &waiter_id(2)).unwrap();
    let script = format!(
        "echo start $LOCK_TOKEN $WHO >> {log}; sleep 0.3; echo end $LOCK_TOKEN $WHO >> {log}; exit 1",
        log = log.display()
    );
    let mut replicas = KillOnDrop(
        ["e1", "e2"]
            .iter()
            .map(|who| {
                stack
                    .lockctl_cmd(
                        &svid,
                        &["elect", "--again", &key, "--", "sh", "-c", &script],
                    )
                    .unwrap()
                    .env("WHO", who)
                    .env("LOCK_INSTANCE", format!("elect-{who}"))
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect(),
    );
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(60);
    while text().lines().filter(|l| l.starts_with("end ")).count() < 6 {
        assert!(Instant::now() < deadline, "six terms: {}", text());
        std::thread::sleep(Duration::from_millis(100));
    }
    for r in &replicas.0 {
        let pid = rustix::process::Pid::from_raw(r.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    }
    // Each exits on its own, within a bound (a lost SIGTERM would leave it campaigning).
    let until = Instant::now() + Duration::from_secs(20);
    for r in &mut replicas.0 {
        let status = loop {
            if let Some(s) = r.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > until {
                let _ = r.kill();
                panic!("a replica did not exit on SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(status.code(), Some(128 + 15), "{status:?}");
    }
    // Terms: start/end pairs, never overlapping, each term above the last.
    let mut open: Option<(u64, String)> = None;
    let mut last = 0u64;
    let mut who_led = std::collections::BTreeSet::new();
    for line in text().lines() {
        let [what, token, who] = line.split(' ').collect::<Vec<_>>()[..] else {
            panic!("bad line {line:?}")
        };
        let token: u64 = token.parse().unwrap();
        match what {
            "start" => {
                assert!(open.is_none(), "two terms at once: {}", text());
                assert!(token > last, "terms must rise: {}", text());
                open = Some((token, who.to_owned()));
                who_led.insert(who.to_owned());
            }
            "end" => {
                assert_eq!(open.take(), Some((token, who.to_owned())), "{}", text());
                last = token;
            }
            _ => panic!("bad line {line:?}"),
        }
    }
    assert_eq!(who_led.len(), 2, "both replicas led: {}", text());
}

/// Children killed when the test ends, however it ends.
struct KillOnDrop(Vec<std::process::Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
