//! `lock-audit tail`: the audit tailer (one active per cluster; run two or three for
//! failover). `lock-audit export --day D --out DIR`: a day's rows to Parquet.

use anyhow::Context;
use clap::{Parser, Subcommand};
use lock_audit::store::Postgres;
use lock_audit::tailer::{self, TailerOptions};
use lock_store::etcd_tls::{self, EtcdTlsFiles};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser)]
#[command(about = "The lock service's audit trail (ADR-21)")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Tail etcd's revision log into the audit store.
    Tail {
        #[arg(
            long,
            env = "LOCK_ETCD",
            value_delimiter = ',',
            default_value = "http://127.0.0.1:2379"
        )]
        etcd: Vec<String>,
        /// The tailer's etcd credential (the `auditor` user).
        #[command(flatten)]
        credential: EtcdTlsFiles,
        /// Where the tailers' election runs: the coord cluster (ADR-21), with the same
        /// credential. Unset: the audited cluster itself.
        #[arg(long, env = "LOCK_AUDIT_ELECTION_ETCD", value_delimiter = ',')]
        election_etcd: Vec<String>,
        /// The audit store (PostgreSQL URL).
        #[arg(long, env = "LOCK_AUDIT_DB")]
        db: String,
        /// This tailer's name in the election.
        #[arg(long, default_value = "lock-audit")]
        id: String,
        #[arg(long, default_value_t = 2000)]
        checkpoint_every_ms: u64,
        /// etcd's compaction window in revisions: alarm at half of it.
        #[arg(long)]
        compaction_window: Option<i64>,
        /// The election lease TTL (seconds): how soon a standby takes over.
        #[arg(long, default_value_t = 5)]
        lease_ttl: i64,
        /// How often the elected tailer reads every hold for the longest per class
        /// (`lock_audit_longest_hold_seconds`); 0: never.
        #[arg(long, default_value_t = 30)]
        hold_scan_seconds: u64,
        /// `GET /metrics` here (plaintext; loopback or a pod address).
        #[arg(long, default_value = "127.0.0.1:0")]
        admin_listen: SocketAddr,
    },
    /// Write the rows observed on one UTC day to `OUT/lock-audit-<day>.parquet`.
    Export {
        #[arg(long, env = "LOCK_AUDIT_DB")]
        db: String,
        /// YYYY-MM-DD (UTC), or `yesterday` / `today` (UTC).
        #[arg(long)]
        day: String,
        /// A local folder, or an object-store URL (`s3://bucket/prefix`, `file:///path`;
        /// S3 credentials and endpoint from AWS_* variables).
        #[arg(long)]
        out: String,
        /// Only force releases and their requests, to `lock-force-<day>.parquet` in the
        /// write-once `s3://` bucket (ADR-20): written only if the bucket's Object Lock keeps
        /// every object `--retention-years` in COMPLIANCE mode, and locked that long itself.
        #[arg(long)]
        force_only: bool,
        /// With --force-only: the years the record must be kept.
        #[arg(long, default_value_t = 7)]
        retention_years: u32,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    lock_store::logging::init();
    match Args::parse().cmd {
        Cmd::Tail {
            etcd,
            credential,
            election_etcd,
            db,
            id,
            checkpoint_every_ms,
            compaction_window,
            lease_ttl,
            hold_scan_seconds,
            admin_listen,
        } => {
            let tls = etcd_tls::load(&etcd, &credential).context("etcd transport")?;
            let mut options = etcd_client::ConnectOptions::new()
                .with_connect_timeout(Duration::from_secs(5))
                .with_keep_alive(Duration::from_secs(5), Duration::from_secs(5));
            if let Some(tls) = &tls {
                options = options.with_tls(tls.options());
            }
            let client = etcd_client::Client::connect(&etcd, Some(options.clone()))
                .await
                .context("connecting to etcd")?;
            let election = if election_etcd.is_empty() {
                client.clone()
            } else {
                etcd_client::Client::connect(&election_etcd, Some(options))
                    .await
                    .context("connecting to the election's etcd")?
            };
            let store = Postgres::connect(&db).await.context("audit store")?;
            let admin = tokio::net::TcpListener::bind(admin_listen).await?;
            // The harness reads the bound address from here, as it does the arbiter's.
            println!("admin listening on {}", admin.local_addr()?);
            tokio::spawn(lock_store::admin::serve_with(admin, |path| {
                lock_store::admin::metrics_only(path, || lock_audit::metrics::METRICS.encode())
            }));
            let (stop_tx, stop) = tokio::sync::watch::channel(false);
            tokio::spawn(async move {
                let _ = tokio::signal::ctrl_c().await;
                let _ = stop_tx.send(true);
            });
            let opts = TailerOptions {
                id,
                checkpoint_every: Duration::from_millis(checkpoint_every_ms),
                compaction_window,
                lease_ttl,
                hold_scan_every: (hold_scan_seconds > 0)
                    .then(|| Duration::from_secs(hold_scan_seconds)),
            };
            tailer::run(client, election, &store, &opts, stop).await?;
        }
        Cmd::Export {
            db,
            day,
            out,
            force_only,
            retention_years,
        } => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            let day = lock_audit::export::resolve_day(&day, now)?;
            let store = Postgres::connect(&db).await.context("audit store")?;
            if force_only {
                let (url, n) = export_force(&store, &day, &out, retention_years).await?;
                println!("{n} rows to {url}, locked {retention_years} years");
            } else if lock_audit::export::is_url(&out) {
                let (url, n) = lock_audit::export::export_day_to_url(&store, &day, &out).await?;
                println!("{n} rows to {url}");
            } else {
                let out = PathBuf::from(out);
                std::fs::create_dir_all(&out)?;
                let (path, n) = lock_audit::export::export_day(&store, &day, &out).await?;
                println!("{n} rows to {}", path.display());
            }
        }
    }
    Ok(())
}

/// `--force-only`: the day's force rows to the write-once bucket of `out` (`s3://bucket/
/// prefix`, the endpoint from `AWS_ENDPOINT` as object_store takes it), after checking the
/// bucket keeps objects `years` in COMPLIANCE mode; the object locked that long itself.
async fn export_force(
    store: &Postgres,
    day: &str,
    out: &str,
    years: u32,
) -> anyhow::Result<(String, usize)> {
    use lock_audit::export::{Selection, encode_selection};
    let url = url::Url::parse(out).context("--force-only needs an s3:// URL")?;
    anyhow::ensure!(
        url.scheme() == "s3",
        "--force-only writes to the write-once bucket, an s3:// URL, not {out}"
    );
    let bucket = url.host_str().context("no bucket in the URL")?;
    let endpoint = std::env::var("AWS_ENDPOINT")
        .or_else(|_| std::env::var("AWS_ENDPOINT_URL"))
        .unwrap_or_else(|_| "https://s3.amazonaws.com".into());
    let worm = lock_audit::retention::WriteOnceBucket::new(&endpoint, bucket)?;
    let found = worm.retention().await?;
    lock_audit::retention::verdict(&found, years)
        .with_context(|| format!("bucket {bucket} would not keep the record {years} years"))?;
    let (bytes, n) = encode_selection(store, day, Selection::Force).await?;
    let name = Selection::Force.file_name(day);
    let key = match url.path().trim_matches('/') {
        "" => name,
        prefix => format!("{prefix}/{name}"),
    };
    worm.put_locked(&key, bytes, years).await?;
    Ok((format!("s3://{bucket}/{key}"), n))
}
