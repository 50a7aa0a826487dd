//! How the arbiter (and lockctl's store commands) reach etcd: TLS with a client
//! certificate, whose common name is the etcd user its role belongs to (`etcd_roles.rs`).
//!
//! What each side trusts: etcd trusts the CA in its `--trusted-ca-file` to name users (the
//! certificate's CN, with `--client-cert-auth` and auth enabled); that CA is etcd's own,
//! never the SPIFFE trust domain's, or every workload SVID would be an etcd client. The
//! arbiter trusts the same CA for etcd's server certificate. Plaintext is accepted only
//! to a loopback address (a member on the same host, as in a single-box trial), so a
//! production flag set cannot silently send the lock keys unencrypted over a network.

pub use crate::error::TransportRefused;
use crate::error::{ConnectError, StoreError};
use etcd_client::{Certificate, Identity, TlsOptions};
use std::path::{Path, PathBuf};

/// The three files of an etcd client credential: one set of flags (and `LOCK_ETCD_*`
/// variables) for every command that reaches etcd (arbiter, lockctl, lock-audit). The
/// certificate's common name is the etcd user (`arbiter`, `operator`, `auditor`, `root`).
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct EtcdTlsFiles {
    /// etcd's CA certificate (PEM), which signed etcd's server certificate. With
    /// --etcd-cert and --etcd-key, TLS to https:// endpoints; without them only plaintext
    /// to loopback is accepted.
    #[arg(long = "etcd-ca", env = "LOCK_ETCD_CA")]
    pub ca: Option<PathBuf>,
    /// The client certificate (PEM); its common name is the etcd user.
    #[arg(long = "etcd-cert", env = "LOCK_ETCD_CERT")]
    pub cert: Option<PathBuf>,
    #[arg(long = "etcd-key", env = "LOCK_ETCD_KEY")]
    pub key: Option<PathBuf>,
}

/// A loaded etcd client credential.
#[derive(Clone)]
pub struct EtcdTls {
    ca: Certificate,
    identity: Identity,
}

impl EtcdTls {
    pub fn options(&self) -> TlsOptions {
        TlsOptions::new()
            .ca_certificate(self.ca.clone())
            .identity(self.identity.clone())
    }
}

/// Decides the transport for `endpoints` (URLs; a bare `host:port` is plaintext) given
/// which credential files are present. Pure; the table test below lists the cases.
pub fn transport_verdict(
    endpoints: &[String],
    files: &EtcdTlsFiles,
) -> Result<bool, TransportRefused> {
    let given = [
        files.ca.is_some(),
        files.cert.is_some(),
        files.key.is_some(),
    ];
    let tls = match given {
        [true, true, true] => true,
        [false, false, false] => false,
        _ => return Err(TransportRefused::PartialCredential),
    };
    if endpoints.is_empty() {
        return Err(TransportRefused::NoEndpoints);
    }
    for e in endpoints {
        let (scheme, rest) = e.split_once("://").unwrap_or(("http", e.as_str()));
        match (scheme, tls) {
            ("https", true) => {}
            ("https", false) => return Err(TransportRefused::HttpsWithoutCredential(e.clone())),
            ("http", true) => return Err(TransportRefused::PlaintextWithCredential(e.clone())),
            ("http", false) if on_loopback(rest) => {}
            ("http", false) => return Err(TransportRefused::PlaintextOffLoopback(e.clone())),
            _ => return Err(TransportRefused::UnknownScheme(e.clone())),
        }
    }
    Ok(tls)
}

/// Whether `host:port[/...]` names a loopback address (`localhost`, 127.0.0.0/8, ::1).
pub fn on_loopback(authority: &str) -> bool {
    let authority = authority.split('/').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Checks the transport and loads the credential it needs (None: plaintext to loopback).
pub fn load(endpoints: &[String], files: &EtcdTlsFiles) -> Result<Option<EtcdTls>, StoreError> {
    let tls = transport_verdict(endpoints, files).map_err(ConnectError::Refused)?;
    let (Some(ca), Some(cert), Some(key), true) = (&files.ca, &files.cert, &files.key, tls) else {
        return Ok(None);
    };
    Ok(Some(EtcdTls {
        ca: Certificate::from_pem(read(ca)?),
        identity: Identity::from_pem(read(cert)?, read(key)?),
    }))
}

fn read(path: &Path) -> Result<Vec<u8>, ConnectError> {
    std::fs::read(path).map_err(|source| ConnectError::File {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(ca: bool, cert: bool, key: bool) -> EtcdTlsFiles {
        let p = |on: bool, name: &str| on.then(|| PathBuf::from(name));
        EtcdTlsFiles {
            ca: p(ca, "ca.pem"),
            cert: p(cert, "arbiter.pem"),
            key: p(key, "arbiter.key"),
        }
    }

    #[test]
    fn transport_table() {
        use TransportRefused::*;
        let all = files(true, true, true);
        let none = files(false, false, false);
        let e = |s: &str| s.to_owned();
        let cases: Vec<(Vec<&str>, EtcdTlsFiles, Result<bool, TransportRefused>)> = vec![
            (
                vec!["https://10.0.0.1:2379", "https://etcd-1:2379"],
                all.clone(),
                Ok(true),
            ),
            (vec!["http://127.0.0.1:2379"], none.clone(), Ok(false)),
            (vec!["127.0.0.1:2379"], none.clone(), Ok(false)),
            (vec!["http://localhost:2379"], none.clone(), Ok(false)),
            (vec!["http://[::1]:2379"], none.clone(), Ok(false)),
            (vec!["http://127.9.9.9:2379/"], none.clone(), Ok(false)),
            (
                vec!["http://10.0.0.1:2379"],
                none.clone(),
                Err(PlaintextOffLoopback(e("http://10.0.0.1:2379"))),
            ),
            (
                vec!["etcd-0:2379"],
                none.clone(),
                Err(PlaintextOffLoopback(e("etcd-0:2379"))),
            ),
            (
                vec!["http://localhost.evil.example:2379"],
                none.clone(),
                Err(PlaintextOffLoopback(e(
                    "http://localhost.evil.example:2379",
                ))),
            ),
            // One plaintext member among TLS ones is refused, not half-used.
            (
                vec!["https://10.0.0.1:2379", "http://10.0.0.2:2379"],
                all.clone(),
                Err(PlaintextWithCredential(e("http://10.0.0.2:2379"))),
            ),
            (
                vec!["http://127.0.0.1:2379"],
                all.clone(),
                Err(PlaintextWithCredential(e("http://127.0.0.1:2379"))),
            ),
            (
                vec!["https://10.0.0.1:2379"],
                none.clone(),
                Err(HttpsWithoutCredential(e("https://10.0.0.1:2379"))),
            ),
            (
                vec!["https://10.0.0.1:2379"],
                files(true, true, false),
                Err(PartialCredential),
            ),
            (
                vec!["https://10.0.0.1:2379"],
                files(false, true, true),
                Err(PartialCredential),
            ),
            (
                vec!["unix:///run/etcd.sock"],
                none.clone(),
                Err(UnknownScheme(e("unix:///run/etcd.sock"))),
            ),
            (vec![], all, Err(NoEndpoints)),
        ];
        for (endpoints, f, want) in cases {
            let endpoints: Vec<String> = endpoints.into_iter().map(str::to_owned).collect();
            assert_eq!(
                transport_verdict(&endpoints, &f),
                want,
                "{endpoints:?} {f:?}"
            );
        }
    }
}
