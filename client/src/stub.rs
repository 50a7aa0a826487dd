//! The raw lock.v1 stubs over a TLS channel presenting the workload's X.509-SVID: for
//! `lockctl`, the test harness and the benches, which speak the protocol call by call.
//! Applications use [`crate::LockClient`] (sessions, keepalives, fencing) instead.

use crate::proto::lock_client::LockClient;
use std::path::Path;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("bad endpoint or TLS configuration: {0}")]
    Config(String),
    #[error("cannot connect to {endpoint}: {source}")]
    Connect {
        endpoint: String,
        source: tonic::transport::Error,
    },
}

/// Where the SVID lives. `cert`/`key` None means connect without a client certificate
/// (only useful to show that Envoy refuses it).
pub struct Svid<'a> {
    pub cert: Option<&'a Path>,
    pub key: Option<&'a Path>,
    pub ca: &'a Path,
}

fn read(p: &Path) -> Result<Vec<u8>, ConnectError> {
    std::fs::read(p).map_err(|source| ConnectError::Read {
        path: p.display().to_string(),
        source,
    })
}

/// A TLS channel to `endpoint` (`https://host:port`) verifying `server_name`.
pub async fn connect(
    endpoint: &str,
    svid: &Svid<'_>,
    server_name: &str,
) -> Result<LockClient<Channel>, ConnectError> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read(svid.ca)?))
        .domain_name(server_name.to_owned());
    if let (Some(cert), Some(key)) = (svid.cert, svid.key) {
        tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
    }
    let channel = Channel::from_shared(endpoint.to_owned())
        .map_err(|e| ConnectError::Config(e.to_string()))?
        .tls_config(tls)
        .map_err(|e| ConnectError::Config(e.to_string()))?
        .connect()
        .await
        .map_err(|source| ConnectError::Connect {
            endpoint: endpoint.to_owned(),
            source,
        })?;
    Ok(LockClient::new(channel))
}

/// `msg` for a keyed call, with its key as `lock-key` metadata (issue 19): the edge then
/// decides on the request's headers instead of pausing for its body. Every valid key has
/// an ASCII encoding (`encode_key`), so the value always parses; the arbiter refuses a
/// body key other than the one the edge admitted from it.
pub fn keyed<T>(msg: T, key: &str) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    if let Ok(v) = lock_config::edge_headers::encode_key(key).parse() {
        req.metadata_mut()
            .insert(lock_config::edge_headers::METADATA_KEY_HEADER, v);
    }
    req
}

/// `req` carrying an instance as `lock-instance` (send it with OpenSession: the session is
/// bound to it). A program's own instance comes from [`crate::process_instance`], once per
/// client object (`<LOCK_INSTANCE>:<pid>:<n>`). A value that is not valid metadata is left
/// out, and the service then applies the identity-only leak rule.
pub fn with_instance<T>(mut req: tonic::Request<T>, instance: &str) -> tonic::Request<T> {
    if let Ok(v) = instance.parse() {
        req.metadata_mut()
            .insert(lock_config::instance::INSTANCE_HEADER, v);
    }
    req
}
