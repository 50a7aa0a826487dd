//! The arbiter's listener: mutual TLS that admits only the edge.
//!
//! The arbiter acts on `x-lock-identity`, so whoever can open a connection to it and set
//! that header can act as anyone. Loopback alone does not stop a local process (issue 13
//! took a lock on a key no identity is granted that way). So the listener requires a client
//! certificate chained to the trust bundle whose *single* URI SAN is on the allow-list of
//! edge identities (Envoy's SPIFFE IDs); anything else fails the TLS handshake, before a
//! byte of HTTP/2 is read. An X.509-SVID has exactly one URI SAN; a certificate with two is
//! refused rather than judged by either.
//!
//! The certificate, key and bundle are files (written by the SPIRE agent's helper, or by the
//! dev CA by rename). Each new connection checks whether any of them changed and rebuilds
//! the TLS configuration if so, so a rotated SVID or bundle is served without a restart; a
//! half-written or invalid set is logged and the previous configuration kept.

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use tokio_rustls::TlsAcceptor;

#[derive(Debug, thiserror::Error)]
pub enum PeerTlsError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: no usable {what} in the file")]
    Pem { path: String, what: &'static str },
    #[error("TLS configuration: {0}")]
    Tls(String),
    #[error("no edge identity allowed: give at least one --edge-id")]
    EmptyAllowList,
}

/// Where the arbiter's own SVID and the trust bundle live.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub bundle: PathBuf,
}

/// Who may connect, and whether that check is deliberately off (debug-only bug).
#[derive(Debug, Clone)]
pub struct PeerPolicy {
    /// SPIFFE IDs of the edge (exact match).
    pub edge_ids: Vec<String>,
    /// `admit-any-peer`: no client certificate required, no allow-list.
    pub admit_any: bool,
}

/// The single URI SAN of a DER certificate, or why there is not exactly one.
pub fn single_uri_san(der: &[u8]) -> Result<String, String> {
    let (_, cert) =
        x509_parser::parse_x509_certificate(der).map_err(|_| "unparsable certificate")?;
    let san = cert
        .subject_alternative_name()
        .map_err(|_| "malformed subject alternative name")?
        .ok_or("no subject alternative name")?;
    let mut uris = san.value.general_names.iter().filter_map(|n| match n {
        x509_parser::extensions::GeneralName::URI(u) => Some(*u),
        _ => None,
    });
    match (uris.next(), uris.next()) {
        (Some(u), None) => Ok(u.to_owned()),
        (None, _) => Err("no URI SAN".into()),
        (Some(_), Some(_)) => Err("more than one URI SAN".into()),
    }
}

/// The web-PKI chain check (bundle, validity, client-auth usage) plus the edge allow-list.
#[derive(Debug)]
struct EdgeOnly {
    inner: Arc<dyn ClientCertVerifier>,
    policy: PeerPolicy,
}

impl ClientCertVerifier for EdgeOnly {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        if self.policy.admit_any {
            return Ok(verified);
        }
        let refuse = |why: String| {
            tracing::warn!(why, "refused a peer that is not an allowed edge identity");
            rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            )
        };
        let id = single_uri_san(end_entity).map_err(refuse)?;
        if !self.policy.edge_ids.contains(&id) {
            return Err(refuse(format!("{id} is not on the edge allow-list")));
        }
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, PeerTlsError> {
    std::fs::read(path).map_err(|source| PeerTlsError::Read {
        path: path.display().to_string(),
        source,
    })
}

fn pem_error(path: &Path, what: &'static str) -> PeerTlsError {
    PeerTlsError::Pem {
        path: path.display().to_string(),
        what,
    }
}

/// Builds the server configuration from the files as they are now.
fn build(files: &TlsFiles, policy: &PeerPolicy) -> Result<Arc<rustls::ServerConfig>, PeerTlsError> {
    if policy.edge_ids.is_empty() && !policy.admit_any {
        return Err(PeerTlsError::EmptyAllowList);
    }
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&read(&files.cert)?)
        .collect::<Result<_, _>>()
        .map_err(|_| pem_error(&files.cert, "certificate"))?;
    if chain.is_empty() {
        return Err(pem_error(&files.cert, "certificate"));
    }
    let key = PrivateKeyDer::from_pem_slice(&read(&files.key)?)
        .map_err(|_| pem_error(&files.key, "private key"))?;
    let mut roots = RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(&read(&files.bundle)?) {
        let ca = ca.map_err(|_| pem_error(&files.bundle, "CA certificate"))?;
        roots
            .add(ca)
            .map_err(|e| PeerTlsError::Tls(format!("bundle: {e}")))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut chain_check =
        WebPkiClientVerifier::builder_with_provider(roots.into(), provider.clone());
    if policy.admit_any {
        chain_check = chain_check.allow_unauthenticated();
    }
    let inner = chain_check
        .build()
        .map_err(|e| PeerTlsError::Tls(e.to_string()))?;
    let verifier = Arc::new(EdgeOnly {
        inner,
        policy: policy.clone(),
    });
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| PeerTlsError::Tls(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| PeerTlsError::Tls(e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// What identifies one version of the three files (modified time and length each).
type Stamp = Vec<Option<(SystemTime, u64)>>;

fn stamp(files: &TlsFiles) -> Stamp {
    [&files.cert, &files.key, &files.bundle]
        .iter()
        .map(|p| {
            let m = std::fs::metadata(p).ok()?;
            Some((m.modified().ok()?, m.len()))
        })
        .collect()
}

/// The listener's TLS: the current configuration, rebuilt when the files change.
pub struct PeerTls {
    files: TlsFiles,
    policy: PeerPolicy,
    current: Mutex<(Stamp, Arc<rustls::ServerConfig>)>,
}

impl PeerTls {
    /// Loads the files now; an error here stops the arbiter from starting.
    pub fn load(files: TlsFiles, policy: PeerPolicy) -> Result<Self, PeerTlsError> {
        let s = stamp(&files);
        let config = build(&files, &policy)?;
        Ok(Self {
            files,
            policy,
            current: Mutex::new((s, config)),
        })
    }

    /// The acceptor for a new connection, with the files' current contents.
    pub fn acceptor(&self) -> TlsAcceptor {
        let now = stamp(&self.files);
        let mut current = match self.current.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if current.0 != now {
            match build(&self.files, &self.policy) {
                Ok(config) => {
                    tracing::info!("TLS files changed: serving the new certificate and bundle");
                    *current = (now, config);
                }
                // Mid-rotation (key written, certificate not yet) or broken: keep serving
                // the previous pair, try again on the next connection.
                Err(e) => tracing::warn!(error = %e, "TLS files changed but are not usable yet"),
            }
        }
        TlsAcceptor::from(current.1.clone())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use lock_devca::{DevCa, Leaf};

    fn der(ca: &DevCa, uris: &[&str]) -> Vec<u8> {
        let leaf = Leaf {
            uris: uris.iter().map(|s| (*s).to_owned()).collect(),
            dns_names: vec!["localhost".into()],
            valid_for: time::Duration::hours(1),
            ..Leaf::plain()
        };
        CertificateDer::from_pem_slice(ca.issue(&leaf).unwrap().cert_pem.as_bytes())
            .unwrap()
            .to_vec()
    }

    #[test]
    fn exactly_one_uri_san() {
        let ca = DevCa::create("td").unwrap();
        assert_eq!(
            single_uri_san(&der(&ca, &["spiffe://td/e"])).unwrap(),
            "spiffe://td/e"
        );
        assert!(single_uri_san(&der(&ca, &[])).is_err());
        assert!(single_uri_san(&der(&ca, &["spiffe://td/e", "spiffe://td/x"])).is_err());
        assert!(single_uri_san(b"not a certificate").is_err());
    }

    #[test]
    fn loads_and_reloads_when_files_change() {
        let dir = tempfile::tempdir().unwrap();
        let ca = DevCa::create("td").unwrap();
        ca.save(dir.path()).unwrap();
        let svid = |n: &str| {
            ca.issue(&Leaf::svid(&format!("spiffe://td/{n}")).with_dns("localhost"))
                .unwrap()
                .save(dir.path(), "arbiter")
                .unwrap()
        };
        svid("a");
        let files = TlsFiles {
            cert: dir.path().join("arbiter.pem"),
            key: dir.path().join("arbiter.key"),
            bundle: dir.path().join(lock_devca::CA_CERT_FILE),
        };
        let policy = PeerPolicy {
            edge_ids: vec!["spiffe://td/envoy".into()],
            admit_any: false,
        };
        let tls = PeerTls::load(files.clone(), policy.clone()).unwrap();
        let before = tls.current.lock().unwrap().1.clone();
        let _ = tls.acceptor();
        assert!(
            Arc::ptr_eq(&before, &tls.current.lock().unwrap().1),
            "unchanged files"
        );
        // A garbage certificate is not taken; the previous configuration keeps serving.
        std::fs::write(&files.cert, "garbage").unwrap();
        let _ = tls.acceptor();
        assert!(Arc::ptr_eq(&before, &tls.current.lock().unwrap().1));
        svid("b");
        let _ = tls.acceptor();
        assert!(
            !Arc::ptr_eq(&before, &tls.current.lock().unwrap().1),
            "rotated"
        );
        let empty = PeerPolicy {
            edge_ids: vec![],
            admit_any: false,
        };
        assert!(matches!(
            PeerTls::load(files, empty),
            Err(PeerTlsError::EmptyAllowList)
        ));
    }
}
