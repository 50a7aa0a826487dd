//! `arbiter`: parse flags, load and validate the registry and the TLS files, connect to
//! etcd, bind, serve until SIGINT/SIGTERM.

use anyhow::{Context as _, bail};
use clap::Parser;
use lock_arbiter::clusters::Clusters;
use lock_arbiter::peer_tls::{PeerPolicy, PeerTls, TlsFiles};
use lock_arbiter::server::Transport;
use lock_arbiter::{Engine, server};
use lock_store::bugs::Bugs;
use lock_store::registry_files;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
#[command(about = "lock.v1 arbiter: etcd grant transactions, sessions, epoch seal")]
struct Args {
    /// Address to serve on. Any address with mutual TLS: only peers whose certificate's
    /// single URI SAN is an --edge-id get a connection.
    #[arg(long, default_value = "127.0.0.1:7400", env = "ARBITER_LISTEN")]
    listen: SocketAddr,
    /// The arbiter's own X.509-SVID (PEM chain), re-read when it changes.
    #[arg(
        long,
        env = "ARBITER_TLS_CERT",
        required_unless_present = "insecure_plaintext"
    )]
    tls_cert: Option<PathBuf>,
    /// Its private key (PEM).
    #[arg(
        long,
        env = "ARBITER_TLS_KEY",
        required_unless_present = "insecure_plaintext"
    )]
    tls_key: Option<PathBuf>,
    /// The trust bundle peers' certificates must chain to (PEM).
    #[arg(
        long,
        env = "ARBITER_TLS_BUNDLE",
        required_unless_present = "insecure_plaintext"
    )]
    tls_bundle: Option<PathBuf>,
    /// SPIFFE ID of an edge (Envoy) allowed to connect; repeat or comma-separate.
    #[arg(
        long = "edge-id",
        env = "ARBITER_EDGE_IDS",
        value_delimiter = ',',
        required_unless_present = "insecure_plaintext"
    )]
    edge_ids: Vec<String>,
    /// UNSAFE: plaintext HTTP/2, on loopback only. Any local process can then claim any
    /// identity in x-lock-identity. For debugging only; never in production.
    #[arg(long, conflicts_with_all = ["tls_cert", "tls_key", "tls_bundle", "edge_ids"])]
    insecure_plaintext: bool,
    /// etcd client URLs, comma-separated.
    #[arg(
        long,
        default_value = "http://127.0.0.1:2379",
        env = "ARBITER_ETCD",
        value_delimiter = ','
    )]
    etcd: Vec<String>,
    /// Tiers and shards (ADR-07, 09): `--etcd` is the coord cluster (coord-tier classes,
    /// the epoch allocator, the shard map); entity-tier keys go to the entity shards the
    /// map on it names, reached with the same credential. Off: everything on `--etcd`.
    #[arg(long, env = "ARBITER_SHARDS")]
    shards: bool,
    /// The arbiter's etcd credential (its user `arbiter`: may read /sys/, write /l/ /s/ /q/ /x/ /r/ /d/ /p/).
    #[command(flatten)]
    etcd_tls: lock_store::etcd_tls::EtcdTlsFiles,
    /// Registry directory (*.yaml): classes decide TTLs. Polled for changes: a valid new
    /// version applies to new requests; an invalid one is refused and reported.
    #[arg(long, env = "ARBITER_REGISTRY")]
    registry: PathBuf,
    /// How often the registry directory is checked for a new version.
    #[arg(long, default_value_t = 2000, env = "ARBITER_REGISTRY_POLL_MS")]
    registry_poll_ms: u64,
    /// Name reported in x-lock-arbiter.
    #[arg(long, default_value = "arbiter", env = "ARBITER_ID")]
    id: String,
    /// The admin listener (`GET /metrics`); plaintext, so loopback or a pod address only.
    #[arg(long, default_value = "127.0.0.1:0", env = "ARBITER_ADMIN_LISTEN")]
    admin_listen: SocketAddr,
    /// After SIGTERM: how long new requests are refused DRAINING (health NOT_SERVING) before
    /// the listener closes, so Envoy's health checks move the ring first.
    #[arg(long, default_value_t = 1000, env = "ARBITER_DRAIN_GRACE_MS")]
    drain_grace_ms: u64,
    /// After SIGTERM: the bound on the whole drain; past it the process exits anyway.
    #[arg(long, default_value_t = 10_000, env = "ARBITER_DRAIN_TIMEOUT_MS")]
    drain_timeout_ms: u64,
    /// How often the health answer reads the epoch record (one linearizable read).
    #[arg(long, default_value_t = 500, env = "ARBITER_HEALTH_EVERY_MS")]
    health_every_ms: u64,
    /// Observe streams served at once (each holds an etcd watch stream); past it an Observe
    /// is refused STREAM_FULL.
    #[arg(long, default_value_t = lock_arbiter::observers::DEFAULT_MAX_OBSERVERS, env = "ARBITER_MAX_OBSERVERS")]
    max_observers: usize,
    /// Bound on every etcd call; past it a request fails NO_QUORUM.
    #[arg(long, default_value_t = 2000, env = "ARBITER_STORE_TIMEOUT_MS")]
    store_timeout_ms: u64,
    /// Write the request and etcd spans (OpenTelemetry, JSON lines) to this file; the W3C
    /// `traceparent` the edge forwards is continued. No token, key or identity is in them.
    #[arg(long, env = "ARBITER_TRACE_FILE")]
    trace_file: Option<PathBuf>,
    /// Debug builds only: inject a deliberate bug (repeatable) so the release gate can
    /// show it catches it. Never in a release build.
    #[cfg(debug_assertions)]
    #[arg(long = "inject-bug", hide = true)]
    inject_bug: Vec<lock_store::bugs::Bug>,
}

#[cfg(feature = "dhat-heap")]
#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// mimalloc: a fifth of the arbiter's CPU was glibc's malloc and free (its profile, `make
/// profile`), for the many small short-lived allocations of h2, tonic and prost per request.
#[cfg(not(feature = "dhat-heap"))]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Written when the profiler drops: at the stop signal, before connections drain, so the
    // profile's peak is the load's and a hung drain cannot lose it.
    #[cfg(feature = "dhat-heap")]
    let profiler = dhat::Profiler::builder()
        .file_name(std::env::var_os("LOCK_DHAT_FILE").unwrap_or_else(|| "dhat-heap.json".into()))
        .build();
    let args = Args::parse();
    // Kept to the end of main: dropping it flushes the last spans.
    let _traces = lock_arbiter::logging::init_with_traces(args.trace_file.as_deref())
        .context("opening the trace file")?;
    let transport = transport(&args)?;
    let (registry, registry_version) = registry_files::load_versioned(&args.registry)
        .with_context(|| format!("loading registry {}", args.registry.display()))?;
    lock_arbiter::metrics::METRICS
        .registry_version
        .set(i64::try_from(registry_version).unwrap_or(0));
    let etcd_tls =
        lock_store::etcd_tls::load(&args.etcd, &args.etcd_tls).context("etcd transport")?;
    let etcd = lock_arbiter::connect_etcd(
        &args.etcd,
        Duration::from_millis(args.store_timeout_ms),
        etcd_tls.as_ref(),
    )
    .await
    .context("connecting to etcd")?;
    #[cfg(debug_assertions)]
    let bugs = Bugs::new(args.inject_bug.clone());
    #[cfg(not(debug_assertions))]
    let bugs = Bugs::default();
    if !bugs.is_empty() {
        tracing::warn!(
            ?bugs,
            "DELIBERATE BUGS INJECTED: this arbiter is unsafe, for the release gate only"
        );
    }
    let clusters = if args.shards {
        Clusters::sharded(
            etcd,
            bugs.clone(),
            Duration::from_millis(args.store_timeout_ms),
            args.etcd_tls.clone(),
        )
        .await
        .context("the shard map")?
    } else {
        Clusters::single(etcd, bugs.clone())
    };
    let engine = Arc::new(
        Engine::with_clusters(clusters, Arc::new(registry), bugs)
            .with_max_observers(args.max_observers),
    );
    // Classes change without a restart (`registry_reload.rs`).
    tokio::spawn(lock_arbiter::registry_reload::run(
        engine.clone(),
        args.registry.clone(),
        registry_version,
        Duration::from_millis(args.registry_poll_ms),
    ));
    if let Err(e) = engine.check_epoch().await {
        // Not fatal: the arbiter serves refusals (SEALED) until the epoch exists.
        tracing::warn!(error = %e, "epoch not usable yet");
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr()?;
    let admin = tokio::net::TcpListener::bind(args.admin_listen)
        .await
        .with_context(|| format!("binding the admin listener {}", args.admin_listen))?;
    let admin_addr = admin.local_addr()?;
    tokio::spawn(lock_arbiter::admin::serve(admin));
    // The harness waits for these lines (port 0 picks a free port).
    println!("arbiter {} admin on {admin_addr}", args.id);
    println!("arbiter {} listening on {addr}", args.id);
    tracing::info!(id = args.id, %addr, "serving lock.v1");
    let drain = engine.drain().clone();
    let grace = Duration::from_millis(args.drain_grace_ms);
    let stop = {
        let drain = drain.clone();
        async move {
            shutdown().await;
            // Health turns NOT_SERVING, waiters and new requests are answered DRAINING.
            tracing::info!("draining: SIGTERM or SIGINT");
            drain.start();
            #[cfg(feature = "dhat-heap")]
            drop(profiler);
            tokio::time::sleep(grace).await;
        }
    };
    let bound = Duration::from_millis(args.drain_timeout_ms);
    let health_every = Duration::from_millis(args.health_every_ms.max(1));
    let served = server::serve(listener, engine, &args.id, transport, health_every, stop);
    tokio::select! {
        r = served => r?,
        () = async { drain.started().await; tokio::time::sleep(bound).await } => {
            tracing::warn!(?bound, "drain did not finish within its bound: exiting");
        }
    }
    tracing::info!("drained");
    Ok(())
}

fn transport(args: &Args) -> anyhow::Result<Transport> {
    if args.insecure_plaintext {
        if !args.listen.ip().is_loopback() {
            bail!(
                "refusing --insecure-plaintext on {}: without TLS anyone who can connect can claim any identity; loopback only",
                args.listen
            );
        }
        tracing::warn!(
            "INSECURE: plaintext listener, no peer check: any local process can act as any identity"
        );
        return Ok(Transport::InsecurePlaintext);
    }
    let (Some(cert), Some(key), Some(bundle)) = (&args.tls_cert, &args.tls_key, &args.tls_bundle)
    else {
        bail!("--tls-cert, --tls-key and --tls-bundle are required (or --insecure-plaintext)");
    };
    #[cfg(debug_assertions)]
    let admit_any = args
        .inject_bug
        .contains(&lock_store::bugs::Bug::AdmitAnyPeer);
    #[cfg(not(debug_assertions))]
    let admit_any = false;
    let tls = PeerTls::load(
        TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            bundle: bundle.clone(),
        },
        PeerPolicy {
            edge_ids: args.edge_ids.clone(),
            admit_any,
        },
    )
    .context("loading the listener's TLS files")?;
    Ok(Transport::MutualTls(Arc::new(tls)))
}

async fn shutdown() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}
