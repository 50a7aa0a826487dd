//! `pause-test`: the pause-test kit (ADR-17). Proves a resource's fence by observation:
//!
//! 1. holder A acquires the key and writes (a warm-up record: A may write);
//! 2. A checks the fence for its next write and is frozen with SIGSTOP right there, past
//!    its TTL (the moment a check-then-write fence breaks);
//! 3. holder B acquires (a larger token, after A's lease expired) and writes;
//! 4. A is resumed (SIGCONT) and completes its write with the old token: it must be refused;
//! 5. B's write is delivered again (a replay with a used token): it must be refused too;
//! 6. the record must hold B's value.
//!
//! With `--permits N` the key is a semaphore's (a `permits: N` class): N-1 other holders
//! take the other permits first, so A and B hold the same permit in turn, and the record is
//! that permit's (the resource fences per permit: `WHERE key = $k AND permit = $p`). A
//! frozen permit holder must be refused once its permit has been given to B.
//!
//! Over N cycles it counts stale writes accepted, replays accepted and lost values; it
//! passes only if all are zero, and then (with --registry) writes a PauseTestResult document
//! that lets the class be declared `enforcement: fenced`.
//!
//!   pause-test run --db URL --fence reference --key-prefix pay/fast/pt --class pay-ledger \
//!       --resource pg/ledger --schema-version 3 --cycles 10 [--registry DIR]
//!   pause-test run --s3 URL --bucket NAME --fence s3 ...      (an S3-compatible store)
//!
//! The record B writes is prepared holding B's bytes already: the worst case for a fence
//! that compares content (an S3 ETag) rather than the token.
//!
//! Identities: A uses LOCK_SVID / LOCK_SVID_KEY, B uses LOCK_SVID_B / LOCK_SVID_KEY_B (or
//! A's when unset: a second process of one identity); both LOCK_ENDPOINT and LOCK_CA.
//! Without LOCK_SVID, both use the SPIFFE Workload API (SPIFFE_ENDPOINT_SOCKET). The keys
//! locked may belong to any class (a short TTL makes a run fast); the property tested is
//! the resource's fence.

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};
use lock_pause_test::resource::{self, Kind, Resource, Target};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the kit.
    Run(RunArgs),
    /// A holder process driven by the kit over stdin/stdout (internal).
    Holder {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        fence: Kind,
        #[arg(long)]
        key: String,
        #[arg(long, default_value_t = 60)]
        wait_secs: u64,
        /// Take one permit of a semaphore's key instead of the key.
        #[arg(long)]
        permit: bool,
    },
}

#[derive(clap::Args, Clone)]
struct RunArgs {
    #[command(flatten)]
    target: Target,
    /// The fence under test: reference, split, le (PostgreSQL); s3, s3-unconditional,
    /// s3-client-compare, s3-etag-of-value (S3). The broken ones exist to be caught.
    #[arg(long, default_value = "reference")]
    fence: Kind,
    #[arg(long)]
    key_prefix: String,
    #[arg(long, default_value_t = 1)]
    cycles: usize,
    /// Cycles run at once (each on its own key and records).
    #[arg(long, default_value_t = 10)]
    parallel: usize,
    /// The class the result is evidence for.
    #[arg(long)]
    class: String,
    #[arg(long)]
    resource: String,
    #[arg(long, default_value = "1")]
    schema_version: String,
    /// Write the PauseTestResult document here when the run passes.
    #[arg(long)]
    registry: Option<PathBuf>,
    /// The keys are a semaphore's with this many permits (a `permits: N` class): the
    /// record under test is one permit's, and the other N-1 are held by other holders.
    #[arg(long)]
    permits: Option<u32>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().cmd {
        Cmd::Holder {
            target,
            fence,
            key,
            wait_secs,
            permit,
        } => holder(&target, fence, &key, wait_secs, permit).await,
        Cmd::Run(args) => {
            let passed = run(&args).await?;
            std::process::exit(if passed { 0 } else { 1 });
        }
    }
}

/// One holder: acquire (the key, or one permit of it), print `token T` (and ` permit P`),
/// then serve `write ROW VALUE` commands; between the fence check and the write it prints
/// `checked` and waits for `go`.
async fn holder(
    target: &Target,
    fence: Kind,
    key: &str,
    wait_secs: u64,
    permit: bool,
) -> anyhow::Result<()> {
    let client = lock_client::LockClient::new(holder_config().await?)?;
    let resource = Resource::open(fence, target).await?;
    // The kit, not the library, decides when this holder writes: a paused holder that
    // already passed its checks is exactly what fencing must stop.
    let wait = Duration::from_secs(wait_secs);
    let (hold, token) = if permit {
        let p = client.acquire_permit(key, wait, || {}).await?;
        let token = p.token().as_i64();
        println!("token {token} permit {}", p.permit());
        (Box::new(p) as Box<dyn std::any::Any>, token)
    } else {
        let h = client.acquire(key, wait, || {}).await?;
        let token = h.token().as_i64();
        println!("token {token}");
        (Box::new(h) as Box<dyn std::any::Any>, token)
    };
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        let mut parts = line.splitn(3, ' ');
        match (parts.next(), parts.next(), parts.next()) {
            (Some("write"), Some(row), Some(value)) => {
                let row: i64 = row.parse()?;
                let next = &mut lines;
                let checked = async move {
                    println!("checked");
                    let _ = next.next_line().await;
                };
                let accepted = resource.write(row, value, token, checked).await?;
                println!("{}", if accepted { "accepted" } else { "rejected" });
            }
            (Some("exit"), _, _) => break,
            _ => bail!("holder: unknown command {line:?}"),
        }
    }
    // The hold (a key's or a permit's) is never released here: the kit tears the process
    // down.
    std::mem::forget(hold);
    Ok(())
}

/// The holder's identity: SVID files (`LOCK_SVID`, `LOCK_SVID_KEY`, `LOCK_CA`), or the
/// SPIFFE Workload API (`SPIFFE_ENDPOINT_SOCKET`, as in a Kubernetes Job with the SPIFFE
/// CSI driver).
async fn holder_config() -> anyhow::Result<lock_client::Config> {
    let env = |k: &str| std::env::var(k).with_context(|| format!("{k} is not set"));
    let endpoint = env("LOCK_ENDPOINT")?;
    let server_name = std::env::var("LOCK_SERVER_NAME").unwrap_or_else(|_| "localhost".into());
    if let Ok(cert) = std::env::var("LOCK_SVID") {
        return Ok(lock_client::Config::files(
            endpoint,
            cert,
            env("LOCK_SVID_KEY")?,
            env("LOCK_CA")?,
            server_name,
        ));
    }
    let socket = env("SPIFFE_ENDPOINT_SOCKET").context(
        "no identity: set LOCK_SVID, LOCK_SVID_KEY and LOCK_CA, or SPIFFE_ENDPOINT_SOCKET",
    )?;
    Ok(lock_client::Config {
        endpoint,
        credentials: lock_client::Credentials::WorkloadApi {
            source: lock_client::workload_api_source(&socket).await?,
            server_name,
        },
        instance: None,
    })
}

struct Holder {
    child: Child,
    stdin: ChildStdin,
    out: Lines<BufReader<ChildStdout>>,
}

impl Holder {
    async fn spawn(args: &RunArgs, key: &str, b: bool) -> anyhow::Result<Self> {
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.arg("holder")
            .args(args.target.args())
            .args(["--fence", args.fence.name()])
            .args(["--key", key]);
        if args.permits.is_some() {
            cmd.arg("--permit");
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            // A and B are two processes: two instances even where the Job sets one for
            // the pod (issue 32: one identity's processes contend like any two).
            .env_remove("LOCK_INSTANCE")
            .kill_on_drop(true);
        // B's own identity if given; else A's (a Job has one SVID: B is a second process
        // of the same identity, which waits for A like anyone else).
        if b && let Ok(cert) = std::env::var("LOCK_SVID_B") {
            cmd.env("LOCK_SVID", cert);
            cmd.env(
                "LOCK_SVID_KEY",
                std::env::var("LOCK_SVID_KEY_B").context("LOCK_SVID_KEY_B is not set")?,
            );
        }
        let mut child = cmd.spawn()?;
        let stdin = child.stdin.take().context("stdin")?;
        let out = BufReader::new(child.stdout.take().context("stdout")?).lines();
        Ok(Self { child, stdin, out })
    }

    async fn say(&mut self, line: &str) -> anyhow::Result<()> {
        self.stdin.write_all(format!("{line}\n").as_bytes()).await?;
        Ok(self.stdin.flush().await?)
    }

    async fn hear(&mut self) -> anyhow::Result<String> {
        let line = tokio::time::timeout(Duration::from_secs(90), self.out.next_line())
            .await
            .context("holder did not answer in 90 s")??;
        line.context("holder exited")
    }

    /// The grant's token, and its permit (a semaphore's key).
    async fn token(&mut self) -> anyhow::Result<(i64, Option<u32>)> {
        let line = self.hear().await?;
        let rest = line.strip_prefix("token ").context("expected a token")?;
        Ok(match rest.split_once(" permit ") {
            Some((t, p)) => (t.parse()?, Some(p.parse()?)),
            None => (rest.parse()?, None),
        })
    }

    /// A whole write; returns whether the resource accepted it.
    async fn write(&mut self, row: i64, value: &str) -> anyhow::Result<bool> {
        self.say(&format!("write {row} {value}")).await?;
        match self.hear().await?.as_str() {
            "checked" => {}
            "rejected" => return Ok(false),
            other => bail!("unexpected {other:?}"),
        }
        self.say("go").await?;
        Ok(self.hear().await? == "accepted")
    }

    fn signal(&self, sig: &str) -> anyhow::Result<()> {
        let pid = self.child.id().context("holder gone")?;
        let ok = std::process::Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(pid.to_string())
            .status()?;
        if !ok.success() {
            bail!("kill -{sig} {pid} failed");
        }
        Ok(())
    }
}

#[derive(Default, Debug)]
struct Tally {
    cycles: usize,
    stale_accepted: usize,
    replay_accepted: usize,
    lost_values: usize,
}

async fn cycle(args: &RunArgs, i: usize) -> anyhow::Result<Tally> {
    let resource = Resource::open(args.fence, &args.target).await?;
    let base = i64::try_from(i)? * 2 + 1;
    let (warm, row) = (base, base + 1);
    resource.prepare(warm, "").await?;
    resource.prepare(row, &format!("B1-{i}")).await?;
    let key = format!("{}/{i}", args.key_prefix);

    // A semaphore: the other permits are held throughout, so A and B take turns on one.
    let mut others = Vec::new();
    for _ in 1..args.permits.unwrap_or(1) {
        let mut o = Holder::spawn(args, &key, false).await?;
        o.token().await?;
        others.push(o);
    }
    let mut a = Holder::spawn(args, &key, false).await?;
    let (ta, pa) = a.token().await?;
    if !a.write(warm, &format!("A1-{i}")).await? {
        bail!("cycle {i}: the fence refused the current holder's first write");
    }
    // A checks the fence for its next write, and is frozen right there.
    a.say(&format!("write {row} A2-{i}")).await?;
    let checked = a.hear().await?;
    a.signal("STOP")?;

    // B waits in the key's queue until A's lease has expired, then writes.
    let mut b = Holder::spawn(args, &key, true).await?;
    let (tb, pb) = b.token().await?;
    if tb <= ta {
        bail!("cycle {i}: B's token is not larger than A's");
    }
    if pb != pa {
        bail!("cycle {i}: B holds permit {pb:?}, not A's {pa:?}: the others did not hold theirs");
    }
    if !b.write(row, &format!("B1-{i}")).await? {
        bail!("cycle {i}: the fence refused the current holder's write");
    }

    // A wakes up and completes its write with the old token.
    a.signal("CONT")?;
    let stale_accepted = if checked == "checked" {
        a.say("go").await?;
        a.hear().await? == "accepted"
    } else {
        checked == "accepted"
    };
    // The same write of B delivered twice.
    let replay_accepted = b.write(row, &format!("B1-{i}")).await?;
    let (value, fence_now) = resource.read(row).await?;
    let lost = value != format!("B1-{i}") || fence_now != tb;
    let _ = (a.child.kill().await, b.child.kill().await);
    for mut o in others {
        let _ = o.child.kill().await;
    }
    Ok(Tally {
        cycles: 1,
        stale_accepted: usize::from(stale_accepted),
        replay_accepted: usize::from(replay_accepted),
        lost_values: usize::from(lost),
    })
}

async fn run(args: &RunArgs) -> anyhow::Result<bool> {
    resource::check(&args.target)?;
    Resource::open(args.fence, &args.target)
        .await?
        .setup()
        .await?;
    let shared = std::sync::Arc::new(args.clone());
    let mut total = Tally::default();
    let indices: Vec<usize> = (0..args.cycles).collect();
    for batch in indices.chunks(args.parallel.max(1)) {
        let mut set = tokio::task::JoinSet::new();
        for &i in batch {
            let a = shared.clone();
            set.spawn(async move { cycle(&a, i).await });
        }
        while let Some(t) = set.join_next().await {
            let t = t??;
            total.cycles += t.cycles;
            total.stale_accepted += t.stale_accepted;
            total.replay_accepted += t.replay_accepted;
            total.lost_values += t.lost_values;
        }
    }
    let passed = total.stale_accepted == 0 && total.replay_accepted == 0 && total.lost_values == 0;
    println!(
        "pause-test {} fence on {}: {} cycles, stale writes accepted {}, replays accepted {}, values lost {} -> {}",
        args.fence.name(),
        args.resource,
        total.cycles,
        total.stale_accepted,
        total.replay_accepted,
        total.lost_values,
        if passed { "PASS" } else { "FAIL" }
    );
    if passed && let Some(dir) = &args.registry {
        let path = write_result(dir, args)?;
        println!("wrote {}", path.display());
    }
    Ok(passed)
}

fn write_result(dir: &std::path::Path, args: &RunArgs) -> anyhow::Result<PathBuf> {
    let today = lock_store::registry_files::today();
    let name: String = format!("{}-{}", args.class, args.resource)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let doc = format!(
        "# Written by pause-test: {} fence passed {} cycles.\napiVersion: lock.dev/v1alpha1\nkind: PauseTestResult\nmetadata: {{name: {name}}}\nspec:\n  class: {}\n  resource: {}\n  schemaVersion: \"{}\"\n  passedAt: \"{today}\"\n  expires: \"{}\"\n",
        args.fence.name(),
        args.cycles,
        args.class,
        args.resource,
        args.schema_version,
        today.plus_one_year()
    );
    let path = dir.join(format!("pause-test-{name}.yaml"));
    std::fs::write(&path, doc)?;
    Ok(path)
}
