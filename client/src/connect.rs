//! The TLS channel to Envoy with the workload's X.509-SVID, read from files.

use crate::error::LockError;
use std::path::PathBuf;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

/// How often the client PINGs the edge, and how long it waits for the answer.
const KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(20);
const KEEPALIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Where the workload's SVID lives and where the service is.
#[derive(Debug, Clone)]
pub struct Config {
    /// Envoy's lock.v1 endpoint, e.g. `https://127.0.0.1:8443`.
    pub endpoint: String,
    pub svid_cert: PathBuf,
    pub svid_key: PathBuf,
    /// Trust bundle that signed Envoy's certificate.
    pub bundle: PathBuf,
    /// Name verified in Envoy's certificate.
    pub server_name: String,
}

impl Config {
    /// The files' modification times: a change means a rotated SVID.
    pub(crate) fn stamp(&self) -> Vec<Option<std::time::SystemTime>> {
        [&self.svid_cert, &self.svid_key, &self.bundle]
            .iter()
            .map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
            .collect()
    }

    /// A channel presenting the SVID as it is on disk now. tonic connects lazily and
    /// reconnects on failure.
    pub(crate) fn channel(&self) -> Result<Channel, LockError> {
        let read = |p: &PathBuf| {
            std::fs::read(p)
                .map_err(|e| LockError::Unauthenticated(format!("{}: {e}", p.display())))
        };
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(read(&self.bundle)?))
            .identity(Identity::from_pem(
                read(&self.svid_cert)?,
                read(&self.svid_key)?,
            ))
            .domain_name(self.server_name.clone());
        Ok(Channel::from_shared(self.endpoint.clone())
            .map_err(|e| LockError::InvalidRequest(format!("endpoint: {e}")))?
            .tls_config(tls)
            .map_err(|e| LockError::InvalidRequest(format!("TLS: {e}")))?
            // HTTP/2 PINGs on the one connection, idle or not: a path that silently drops
            // packets (a dead edge node, a NAT that forgot the flow) shows as a broken
            // connection within seconds, and tonic reconnects, instead of each call
            // waiting for TCP's own timeout.
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true)
            .connect_lazy())
    }
}
