//! Process harness for end-to-end tests and `make run`: real etcd, real arbiters, real
//! Envoy with the built filter, dev SVIDs. Random loopback ports, temp folders, readiness
//! waits bounded in time, cleanup on drop.
//!
//! The tools built on it live beside it, each its own crate: the release gate
//! (`integration/gate`), the benchmarks (`integration/bench`) and the pause-test kit
//! (`integration/pause-test`).

pub mod admin;
pub mod arbiter;
pub mod audit;
pub mod docs;
pub mod docs_drift;
pub mod envoy;
pub mod etcd;
pub mod h2raw;
pub mod images;
pub mod kube_apiserver;
pub mod link;
pub mod manifests;
pub mod netlab;
pub mod oidc;
pub mod paths;
pub mod pki;
pub mod postgres;
pub mod process;
pub mod prometheus;
pub mod raw;
pub mod registry;
pub mod rehearsal;
pub mod s3;
pub mod sidecar;
pub mod stack;
pub mod tmux;
pub mod workload_api;

pub use stack::{Stack, StackOptions};

/// The raw lock.v1 stub over a channel, as the tests and tools drive it call by call.
pub type Client = lock_client::proto::lock_client::LockClient<tonic::transport::Channel>;

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// GET over plain HTTP/1.1 (Envoy's admin endpoint, etcd's metrics); `Connection: close`
/// ends the body, chunked bodies are decoded.
pub fn admin_get(admin: SocketAddr, path: &str) -> anyhow::Result<String> {
    let mut s = TcpStream::connect_timeout(&admin, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or(("", text.as_str()));
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Ok(body.to_owned());
    }
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16)?;
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    Ok(out)
}

/// A fence callback for tests whose holds are never meant to be fenced.
pub fn no_fence() -> impl Fn() + Send + Sync + 'static {
    || {}
}

/// A stack of `arbiters` on the test registry with the debug-only arbiter bugs `bugs`
/// switched on (none: the stack as shipped).
pub async fn stack_with_bugs(arbiters: usize, bugs: &[&str]) -> (Stack, tempfile::TempDir) {
    Stack::with_test_registry_options(StackOptions {
        arbiters,
        arbiter_args: inject_bugs(bugs),
        ..StackOptions::default()
    })
    .await
    .unwrap_or_else(|e| panic!("starting the stack: {e:#}"))
}

/// Arbiter flags switching on the debug-only bugs `bugs` (`--inject-bug` each).
pub fn inject_bugs(bugs: &[&str]) -> Vec<String> {
    bugs.iter()
        .flat_map(|b| ["--inject-bug".to_owned(), (*b).to_owned()])
        .collect()
}

/// A request as the edge forwards it to an arbiter: `x-lock-key` (percent-encoded, as the
/// filter writes it) and `x-lock-identity` set (either may be left out to show what the
/// arbiter does without it).
pub fn as_from_edge<T>(msg: T, key: Option<&str>, identity: Option<&str>) -> tonic::Request<T> {
    use lock_config::edge_headers::{IDENTITY_HEADER, KEY_HEADER, encode_key};
    let mut r = tonic::Request::new(msg);
    let key = key.map(encode_key);
    for (name, value) in [(KEY_HEADER, key.as_deref()), (IDENTITY_HEADER, identity)] {
        if let Some(v) = value.and_then(|v| v.parse().ok()) {
            r.metadata_mut().insert(name, v);
        }
    }
    r
}

/// A request for either route: through Envoy (`direct_as` None: the key as `lock-key`
/// metadata, as lock-client sends it, and the filter sets the edge's headers) or straight
/// to an arbiter as `direct_as` (the caller sets them, as the filter would). The gate and
/// the benches drive both routes with one code path.
pub fn routed<T>(msg: T, key: &str, direct_as: Option<&str>) -> tonic::Request<T> {
    match direct_as {
        Some(identity) => as_from_edge(msg, Some(key), Some(identity)),
        None => lock_client::stub::keyed(msg, key),
    }
}

/// A lazy mutual-TLS channel straight to the arbiter at `addr`, verifying its SVID (DNS
/// SAN `localhost`) against `bundle` and presenting `svid`: Envoy's passes the arbiter's
/// edge allow-list; a workload's, or none, shows the refusal.
pub fn arbiter_channel(
    addr: std::net::SocketAddr,
    svid: Option<&pki::SvidFiles>,
    bundle: &std::path::Path,
) -> anyhow::Result<tonic::transport::Channel> {
    use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(std::fs::read(bundle)?))
        .domain_name("localhost");
    if let Some(s) = svid {
        tls = tls.identity(Identity::from_pem(
            std::fs::read(&s.cert)?,
            std::fs::read(&s.key)?,
        ));
    }
    Ok(Channel::from_shared(format!("https://{addr}"))?
        .tls_config(tls)?
        .connect_lazy())
}

/// The arbiter that answered (its `x-lock-arbiter` reply header).
pub fn answered_by<T>(resp: &tonic::Response<T>) -> Option<String> {
    resp.metadata()
        .get(lock_config::edge_headers::ARBITER_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Opens a session for `key`'s class through `client`.
pub async fn open_session(
    client: &mut lock_client::proto::lock_client::LockClient<tonic::transport::Channel>,
    key: &str,
) -> anyhow::Result<i64> {
    let req = lock_config::proto::v1::OpenSessionRequest { key: key.into() };
    Ok(client.open_session(req).await?.into_inner().session_id)
}

/// A KeepAlive stream: the sender for renewals and the stream of replies.
pub type Renewals = (
    tokio::sync::mpsc::Sender<lock_config::proto::v1::KeepAliveRequest>,
    tonic::Streaming<lock_config::proto::v1::KeepAliveResponse>,
);

/// Opens a KeepAlive stream through `client`.
pub async fn renewals(
    client: &mut lock_client::proto::lock_client::LockClient<tonic::transport::Channel>,
) -> anyhow::Result<Renewals> {
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    let replies = client
        .keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await?
        .into_inner();
    Ok((tx, replies))
}

/// The contract reason and metadata of a refusal (via the client library's one decoder).
pub fn reason_of(
    status: &tonic::Status,
) -> Option<(
    lock_config::Reason,
    std::collections::HashMap<String, String>,
)> {
    lock_client::refusal(status).map(|r| (r.reason, r.metadata))
}

/// Acquire `key` on session `session_id`, waiting up to `wait_millis`.
pub async fn acquire(
    c: &mut Client,
    key: &str,
    session_id: i64,
    wait_millis: u64,
) -> Result<lock_config::proto::v1::AcquireResponse, tonic::Status> {
    let req = lock_config::proto::v1::AcquireRequest {
        key: key.into(),
        session_id,
        wait_millis,
        ..Default::default()
    };
    c.acquire(req).await.map(tonic::Response::into_inner)
}

/// Inspect `key`: its holder and the waiters queued at its arbiter.
pub async fn inspect(
    c: &mut Client,
    key: &str,
) -> Result<lock_config::proto::v1::InspectResponse, tonic::Status> {
    let req = lock_config::proto::v1::InspectRequest { key: key.into() };
    c.inspect(req).await.map(tonic::Response::into_inner)
}

/// Waits (at most 20 s) until Inspect counts exactly `n` waiters for `key`.
pub async fn until_waiters(c: &Client, key: &str, n: u32) -> anyhow::Result<()> {
    process::eventually(std::time::Duration::from_secs(20), || {
        let mut c = c.clone();
        async move {
            let w = inspect(&mut c, key).await?.waiters;
            anyhow::ensure!(w == n, "{w} waiters for {key}, want {n}");
            Ok(())
        }
    })
    .await
}

/// Keeps `session_id` alive in the background: one KeepAlive every `every` on a stream,
/// reopened if the arbiter it reached goes away; bounded at 600 streams. Abort the handle
/// to stop (a dropped handle keeps renewing until the test's runtime ends).
pub fn keep_alive(
    c: Client,
    session_id: i64,
    every: std::time::Duration,
) -> tokio::task::JoinHandle<()> {
    use lock_config::proto::v1::KeepAliveRequest;
    tokio::spawn(async move {
        for _ in 0..600 {
            let (tx, rx) = tokio::sync::mpsc::channel(1);
            let mut c = c.clone();
            if let Ok(resp) = c
                .keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx))
                .await
            {
                let mut replies = resp.into_inner();
                while tx.send(KeepAliveRequest { session_id }).await.is_ok()
                    && matches!(replies.message().await, Ok(Some(_)))
                {
                    tokio::time::sleep(every).await;
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    })
}
