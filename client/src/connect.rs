//! The TLS channel to Envoy with the workload's X.509-SVID, read from files.

use crate::error::LockError;
use std::path::PathBuf;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

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
            .connect_lazy())
    }
}
