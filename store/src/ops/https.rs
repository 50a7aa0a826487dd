//! Server TLS for the HTTPS listeners beside the lock path (lock-admin's approval page and
//! API, lock-webhook's admission endpoint): a certificate chain and key from PEM files,
//! rustls with ring as everywhere else. Read once at start (both restart to rotate).

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;

#[derive(Debug, thiserror::Error)]
#[error("TLS certificate or key: {0}")]
pub struct HttpsError(String);

/// The acceptor for `cert` (PEM chain, leaf first) and `key` (PEM, PKCS#8 or SEC1).
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, HttpsError> {
    let err =
        |what: &Path, e: &dyn std::fmt::Display| HttpsError(format!("{}: {e}", what.display()));
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(|e| err(cert, &e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(cert, &e))?;
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| err(key, &e))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| HttpsError(e.to_string()))?
    .with_no_client_auth()
    .with_single_cert(chain, key_der)
    .map_err(|e| HttpsError(e.to_string()))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}
