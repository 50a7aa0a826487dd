//! Every etcd call of the arbiter's connections, told by `lock_store`'s connection: its span
//! (`traces.rs`) and its latency and outcome in `lock_arbiter_etcd_request_seconds`. The
//! tools' connections tell nobody.

use crate::ops::metrics::METRICS;
use lock_store::StoreError;
use lock_store::etcd::{CallObserver, Etcd};
use lock_store::etcd_tls::EtcdTls;
use std::time::Duration;

struct Counted;

impl CallObserver for Counted {
    fn span(&self, operation: &'static str) -> tracing::Span {
        crate::ops::traces::etcd(operation)
    }

    fn finished(&self, operation: &'static str, ok: bool, took: Duration) {
        METRICS.etcd(operation, ok, took);
    }
}

/// A connection of the arbiter's: `Etcd::connect`, every call traced and counted.
pub async fn connect_etcd(
    endpoints: &[String],
    timeout: Duration,
    tls: Option<&EtcdTls>,
) -> Result<Etcd, StoreError> {
    Etcd::connect_observed(endpoints, timeout, tls, &Counted).await
}
