//! A singleton worker, run as N replicas of one Deployment (one SPIFFE ID): the replicas
//! campaign for leadership of one key, and only the leader works. Its work is a write to
//! PostgreSQL, fenced by its term:
//!
//! ```sql
//! UPDATE fenced_resource SET value = $2, fence = $3 WHERE id = $1 AND fence <= $3
//! ```
//!
//! Not the lock's strictly-less reference fence: a lock's grant writes once, so `<` also
//! refuses a replayed delivery; a leader writes many times in one term, so its fence
//! accepts its own term again and refuses every older one (the first run of this example,
//! with `<`, was refused its own second write).
//!
//! A leader frozen past its TTL (a GC pause, a paused VM, SIGSTOP) wakes after another
//! replica was elected. If it wakes between its check and its write, the write carries the
//! older term, and PostgreSQL refuses it: 0 rows. The worker then knows it was deposed,
//! stops and campaigns again. `integration/tests/election.rs` runs three of these and
//! freezes the leader at exactly that point.
//!
//! Configuration, from the environment:
//! - `LOCK_ENDPOINT`, `LOCK_SVID`, `LOCK_SVID_KEY`, `LOCK_CA`: the edge and the SVID files;
//! - `LOCK_INSTANCE`: this replica's instance (e.g. the pod name);
//! - `WORKER_KEY`: the leadership key; `WORKER_PG`: a PostgreSQL URL; `WORKER_RECORD`: the
//!   record's id; `WORKER_NAME`: how the replica names itself in its lines and writes.
//!
//! SIGUSR1 asks the worker to freeze itself (SIGSTOP) after its next check, before its
//! write: the pause the fence exists for, at the point where it matters.
//!
//! Output, one line per event: `<name> campaigns`, `<name> leads`, `<name> wrote <n>`,
//! `<name> freezes`, `<name> refused by the fence`, `<name> deposed`. The term is never
//! printed: a token is a capability.

use lock_client::{Config, LockClient, LockError};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const WRITE: &str =
    "UPDATE fenced_resource SET value = $2, fence = $3 WHERE id = $1 AND fence <= $3";

fn env(name: &str) -> Result<String, Box<dyn std::error::Error>> {
    std::env::var(name).map_err(|_| format!("{name} is not set").into())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let name = env("WORKER_NAME")?;
    let key = env("WORKER_KEY")?;
    let record: i64 = env("WORKER_RECORD")?.parse()?;
    let (db, connection) =
        tokio_postgres::connect(&env("WORKER_PG")?, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let locks = LockClient::new(Config::files(
        env("LOCK_ENDPOINT")?,
        env("LOCK_SVID")?,
        env("LOCK_SVID_KEY")?,
        env("LOCK_CA")?,
        "localhost",
    ))?;
    let freeze = Arc::new(AtomicBool::new(false));
    let mut usr1 = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())?;
    tokio::spawn({
        let freeze = freeze.clone();
        async move {
            while usr1.recv().await.is_some() {
                freeze.store(true, Ordering::SeqCst);
            }
        }
    });
    let mut n = 0u64;
    loop {
        println!("{name} campaigns");
        let deposed_name = name.clone();
        let leadership = match locks
            .campaign(&key, move || println!("{deposed_name} deposed"))
            .await
        {
            Ok(l) => l,
            Err(e) if e.is_transient() => {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        println!("{name} leads");
        while leadership.can_lead() {
            if freeze.swap(false, Ordering::SeqCst) {
                // Checked, not yet written: stop here until SIGCONT.
                println!("{name} freezes");
                rustix::process::kill_process(
                    rustix::process::getpid(),
                    rustix::process::Signal::STOP,
                )?;
            }
            n += 1;
            let value = format!("{name}:{n}");
            let term = leadership.term().as_i64();
            if db.execute(WRITE, &[&record, &value, &term]).await? == 0 {
                // A newer term has written: this leadership is over, whatever it thinks.
                println!("{name} refused by the fence");
                break;
            }
            println!("{name} wrote {n}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        match leadership.resign().await {
            Ok(()) | Err(LockError::StaleToken) | Err(LockError::SessionExpired) => {}
            Err(e) => eprintln!("{name}: resign: {e}"),
        }
    }
}
