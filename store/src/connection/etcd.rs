//! The raw etcd connection, with a bound on every call: a store that does not answer within
//! the timeout is NO_QUORUM (closed posture, ADR-04), never a hang.
//!
//! Nothing here checks the seal. The arbiter's request paths never use [`Etcd`] directly:
//! they go through its `Store`, whose every response has passed it. Direct users are the
//! epoch module (it reads the record the seal is made of) and operator commands that must
//! work on a sealed store (`lockctl epoch advance`, `lockctl stats`).
//!
//! What each call took is told to the connection's [`CallObserver`] (the arbiter's spans and
//! metrics): this crate keeps no metrics of its own.

use crate::connection::etcd_tls::EtcdTls;
use crate::connection::renewals::Renewals;
use crate::error::StoreError;
use etcd_client::{
    Client, ConnectOptions, GetOptions, GetResponse, KvClient, LeaseClient, LeaseGrantOptions,
    LeaseGrantResponse, LeaseRevokeResponse, Txn, TxnResponse, WatchClient,
};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tonic::Code;

/// Cheap to clone (one `Arc`): every store view and request holds one, and etcd-client's
/// `Client` is a dozen gRPC clients whose clones each take a channel sender and a URI
/// (the arbiter's profile had them among its top costs, issue 33).
#[derive(Clone)]
pub struct Etcd {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    /// The KV client every call clones (one sender), not the whole `Client`.
    kv: KvClient,
    timeout: Duration,
    /// The one LeaseKeepAlive stream every session is renewed on.
    renewals: Renewals,
    calls: &'static dyn CallObserver,
}

/// Hears every call a connection makes: the arbiter's spans and its
/// `lock_arbiter_etcd_request_seconds`.
pub trait CallObserver: Send + Sync {
    /// The span the call runs in.
    fn span(&self, operation: &'static str) -> tracing::Span;
    /// The call's outcome and how long it took.
    fn finished(&self, operation: &'static str, ok: bool, took: Duration);
}

/// The tools' connections: no span, nothing counted.
struct Unobserved;

impl CallObserver for Unobserved {
    fn span(&self, _: &'static str) -> tracing::Span {
        tracing::Span::none()
    }

    fn finished(&self, _: &'static str, _: bool, _: Duration) {}
}

/// What a request for one particular lease id got.
pub enum LeaseGrant {
    Granted(LeaseGrantResponse),
    /// etcd's `ErrGRPCLeaseExist` (FAILED_PRECONDITION): that id is taken.
    IdTaken,
}

impl Etcd {
    /// Connects to `endpoints`, over TLS with the client certificate in `tls` (its CN is the
    /// etcd user, `etcd_tls.rs`), or plaintext (loopback only, checked by `etcd_tls::load`).
    pub async fn connect(
        endpoints: &[String],
        timeout: Duration,
        tls: Option<&EtcdTls>,
    ) -> Result<Self, StoreError> {
        Self::connect_observed(endpoints, timeout, tls, &Unobserved).await
    }

    /// [`Etcd::connect`], with every call told to `calls`.
    pub async fn connect_observed(
        endpoints: &[String],
        timeout: Duration,
        tls: Option<&EtcdTls>,
        calls: &'static dyn CallObserver,
    ) -> Result<Self, StoreError> {
        let mut opts = ConnectOptions::new()
            .with_connect_timeout(timeout)
            .with_timeout(timeout)
            .with_keep_alive(Duration::from_secs(5), timeout);
        if let Some(tls) = tls {
            opts = opts.with_tls(tls.options());
        }
        let client = bounded(timeout, Client::connect(endpoints, Some(opts))).await?;
        let renewals = Renewals::start(endpoints, timeout, tls)?;
        Ok(Self {
            inner: Arc::new(Inner {
                kv: client.kv_client(),
                client,
                timeout,
                renewals,
                calls,
            }),
        })
    }

    pub fn kv(&self) -> KvClient {
        self.inner.kv.clone()
    }

    /// Users and roles (`lockctl roles`, `etcd_roles.rs`).
    pub fn auth_client(&self) -> etcd_client::AuthClient {
        self.inner.client.auth_client()
    }

    pub fn lease(&self) -> LeaseClient {
        self.inner.client.lease_client()
    }

    /// The shared renewal stream (`renewals.rs`).
    pub fn renewals(&self) -> &Renewals {
        &self.inner.renewals
    }

    pub fn watch_client(&self) -> WatchClient {
        self.inner.client.watch_client()
    }

    pub async fn txn(&self, txn: Txn) -> Result<TxnResponse, StoreError> {
        let mut kv = self.kv();
        self.timed("txn", self.bounded(kv.txn(txn))).await
    }

    /// A linearizable read of one key.
    pub async fn get(&self, key: &str) -> Result<GetResponse, StoreError> {
        self.range(key, None).await
    }

    /// A linearizable read with options (a prefix, a count, a sort).
    pub async fn range(
        &self,
        key: &str,
        options: Option<GetOptions>,
    ) -> Result<GetResponse, StoreError> {
        let mut kv = self.kv();
        self.timed("range", self.bounded(kv.get(key, options)))
            .await
    }

    /// Asks for a lease with exactly `id`; a taken id is told apart by its status code.
    pub async fn grant_lease(&self, ttl_seconds: u32, id: i64) -> Result<LeaseGrant, StoreError> {
        let mut leases = self.lease();
        let options = LeaseGrantOptions::new().with_id(id);
        let call = async {
            match tokio::time::timeout(
                self.inner.timeout,
                leases.grant(i64::from(ttl_seconds), Some(options)),
            )
            .await
            {
                Err(_) => Err(StoreError::NoQuorum),
                Ok(Ok(r)) => Ok(LeaseGrant::Granted(r)),
                Ok(Err(etcd_client::Error::GRpcStatus(s)))
                    if s.code() == Code::FailedPrecondition =>
                {
                    Ok(LeaseGrant::IdTaken)
                }
                Ok(Err(e)) => Err(e.into()),
            }
        };
        self.timed("lease_grant", call).await
    }

    /// Revokes a lease (etcd deletes every key on it in one committed entry). Ok(None):
    /// no such lease (etcd's `ErrGRPCLeaseNotFound`, NOT_FOUND), told apart by its code.
    pub async fn revoke(&self, lease: i64) -> Result<Option<LeaseRevokeResponse>, StoreError> {
        let mut leases = self.lease();
        let call = async {
            match tokio::time::timeout(self.inner.timeout, leases.revoke(lease)).await {
                Err(_) => Err(StoreError::NoQuorum),
                Ok(Ok(r)) => Ok(Some(r)),
                Ok(Err(etcd_client::Error::GRpcStatus(s))) if s.code() == Code::NotFound => {
                    Ok(None)
                }
                Ok(Err(e)) => Err(e.into()),
            }
        };
        self.timed("lease_revoke", call).await
    }

    pub async fn bounded<T>(
        &self,
        fut: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, StoreError> {
        bounded(self.inner.timeout, fut).await
    }

    /// `fut` in its span, its latency and outcome told to the connection's [`CallObserver`].
    async fn timed<T>(
        &self,
        operation: &'static str,
        fut: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let calls = self.inner.calls;
        let start = std::time::Instant::now();
        let r = tracing::Instrument::instrument(fut, calls.span(operation)).await;
        calls.finished(operation, r.is_ok(), start.elapsed());
        r
    }
}

async fn bounded<T>(
    timeout: Duration,
    fut: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(r) => r.map_err(StoreError::from),
        Err(_) => Err(StoreError::NoQuorum),
    }
}
