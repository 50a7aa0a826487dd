//! etcd access with a bound on every call: a store that does not answer within
//! `timeout` is NO_QUORUM (closed posture, ADR-04), never a hang.

use crate::error::ArbiterError;
use etcd_client::{
    Client, ConnectOptions, GetResponse, KvClient, LeaseClient, Txn, TxnResponse, WatchClient,
};
use std::future::Future;
use std::time::Duration;

#[derive(Clone)]
pub struct Store {
    client: Client,
    timeout: Duration,
}

impl Store {
    pub async fn connect(endpoints: &[String], timeout: Duration) -> Result<Self, ArbiterError> {
        let opts = ConnectOptions::new()
            .with_connect_timeout(timeout)
            .with_timeout(timeout)
            .with_keep_alive(Duration::from_secs(5), timeout);
        let client = bounded(timeout, Client::connect(endpoints, Some(opts))).await?;
        Ok(Self { client, timeout })
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub fn kv(&self) -> KvClient {
        self.client.kv_client()
    }

    pub fn lease(&self) -> LeaseClient {
        self.client.lease_client()
    }

    pub fn watch_client(&self) -> WatchClient {
        self.client.watch_client()
    }

    pub async fn txn(&self, txn: Txn) -> Result<TxnResponse, ArbiterError> {
        let mut kv = self.kv();
        self.bounded(kv.txn(txn)).await
    }

    /// A linearizable read of one key.
    pub async fn get(&self, key: &str) -> Result<GetResponse, ArbiterError> {
        let mut kv = self.kv();
        self.bounded(kv.get(key, None)).await
    }

    pub async fn bounded<T>(
        &self,
        fut: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, ArbiterError> {
        bounded(self.timeout, fut).await
    }

    /// As [`Store::bounded`], keeping etcd's own error for a caller that must tell one
    /// refusal from another by its code; only the timeout is mapped.
    pub async fn raw_bounded<T>(
        &self,
        fut: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<Result<T, etcd_client::Error>, ArbiterError> {
        tokio::time::timeout(self.timeout, fut)
            .await
            .map_err(|_| ArbiterError::NoQuorum)
    }
}

async fn bounded<T>(
    timeout: Duration,
    fut: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, ArbiterError> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(r) => r.map_err(ArbiterError::from),
        Err(_) => Err(ArbiterError::NoQuorum),
    }
}
