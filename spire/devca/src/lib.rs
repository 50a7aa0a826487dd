//! A development certificate authority that issues real X.509-SVIDs: leaf certificates with
//! exactly one `spiffe://` URI SAN, signed by a local CA whose certificate is the trust
//! bundle. Used by `make run` and the tests where SPIRE is not running; production uses the
//! SPIRE configs beside this crate.
//!
//! ```
//! let dir = tempfile::tempdir().unwrap();
//! let ca = lock_devca::DevCa::create("dev.lock.local").unwrap();
//! ca.save(dir.path()).unwrap();
//! let svid = ca.issue(&lock_devca::Leaf::svid("spiffe://dev.lock.local/ns/pay/sa/ledger")).unwrap();
//! assert!(svid.cert_pem.contains("BEGIN CERTIFICATE"));
//! ```

pub mod workload_api;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use std::fs;
use std::path::Path;
use time::{Duration, OffsetDateTime};

#[derive(Debug, thiserror::Error)]
pub enum DevCaError {
    #[error("certificate generation failed: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("not a SPIFFE ID: {0:?}")]
    NotSpiffeId(String),
    #[error("the CA certificate is not PEM: {0}")]
    Pem(#[from] pem::PemError),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DevCaError + '_ {
    move |source| DevCaError::Io {
        path: path.display().to_string(),
        source,
    }
}

pub const CA_CERT_FILE: &str = "ca.pem";
pub const CA_KEY_FILE: &str = "ca.key";

/// What to put in a leaf certificate.
#[derive(Debug, Clone)]
pub struct Leaf {
    /// URI SANs; an X.509-SVID has exactly one, a `spiffe://` ID.
    pub uris: Vec<String>,
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<std::net::IpAddr>,
    /// The subject's common name. SVIDs have none; etcd takes a client certificate's CN
    /// as its user name (`--client-cert-auth` with auth enabled).
    pub common_name: Option<String>,
    pub valid_for: Duration,
}

impl Leaf {
    /// A workload or Envoy SVID valid for one hour (SPIRE's default X.509-SVID TTL).
    pub fn svid(spiffe_id: &str) -> Self {
        Self {
            uris: vec![spiffe_id.to_owned()],
            dns_names: Vec::new(),
            ip_addresses: Vec::new(),
            common_name: None,
            valid_for: Duration::hours(1),
        }
    }

    /// A certificate that is not an SVID (no URI SAN), e.g. etcd's server and client
    /// certificates, valid for a year.
    pub fn plain() -> Self {
        Self {
            uris: Vec::new(),
            dns_names: Vec::new(),
            ip_addresses: Vec::new(),
            common_name: None,
            valid_for: Duration::days(365),
        }
    }

    pub fn with_ip(mut self, ip: std::net::IpAddr) -> Self {
        self.ip_addresses.push(ip);
        self
    }

    pub fn with_common_name(mut self, name: &str) -> Self {
        self.common_name = Some(name.to_owned());
        self
    }

    pub fn with_dns(mut self, name: &str) -> Self {
        self.dns_names.push(name.to_owned());
        self
    }

    pub fn valid_for(mut self, d: Duration) -> Self {
        self.valid_for = d;
        self
    }
}

/// A certificate and its private key, PEM-encoded and DER (PKCS#8 for the key).
#[derive(Debug, Clone)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    pub cert_der: Vec<u8>,
    pub key_der: Vec<u8>,
}

impl Issued {
    /// Writes `<name>.pem` and `<name>.key` atomically (temp file + rename), so a reader
    /// such as Envoy's file-based SDS never sees half a certificate.
    pub fn save(&self, dir: &Path, name: &str) -> Result<(), DevCaError> {
        fs::create_dir_all(dir).map_err(io(dir))?;
        write_atomic(&dir.join(format!("{name}.key")), &self.key_pem)?;
        write_atomic(&dir.join(format!("{name}.pem")), &self.cert_pem)
    }
}

pub struct DevCa {
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl DevCa {
    /// A new self-signed CA for `trust_domain`, valid for 10 years.
    pub fn create(trust_domain: &str) -> Result<Self, DevCaError> {
        // SPIFFE: the CA certificate of a trust domain carries the trust domain's URI SAN.
        Self::self_signed(
            &format!("{trust_domain} dev CA"),
            Some(format!("spiffe://{trust_domain}")),
        )
    }

    /// A new self-signed CA outside SPIFFE (e.g. etcd's own CA: a client certificate it
    /// signed is an etcd user, so it must not be the workloads' trust domain).
    pub fn create_plain(common_name: &str) -> Result<Self, DevCaError> {
        Self::self_signed(common_name, None)
    }

    fn self_signed(common_name: &str, uri: Option<String>) -> Result<Self, DevCaError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "lock dev CA");
        dn.push(DnType::CommonName, common_name);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        if let Some(uri) = uri {
            params.subject_alt_names.push(SanType::URI(uri.try_into()?));
        }
        let now = OffsetDateTime::now_utc();
        params.not_before = now - Duration::minutes(5);
        params.not_after = now + Duration::days(3650);
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok(Self {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// Loads a CA written by [`DevCa::save`].
    pub fn load(dir: &Path) -> Result<Self, DevCaError> {
        let cert_path = dir.join(CA_CERT_FILE);
        let key_path = dir.join(CA_KEY_FILE);
        let cert_pem = fs::read_to_string(&cert_path).map_err(io(&cert_path))?;
        let key = KeyPair::from_pem(&fs::read_to_string(&key_path).map_err(io(&key_path))?)?;
        let issuer = Issuer::from_ca_cert_pem(&cert_pem, key)?;
        Ok(Self { cert_pem, issuer })
    }

    /// Loads the CA in `dir`, or creates and saves one.
    pub fn load_or_create(dir: &Path, trust_domain: &str) -> Result<Self, DevCaError> {
        if dir.join(CA_CERT_FILE).exists() {
            return Self::load(dir);
        }
        let ca = Self::create(trust_domain)?;
        ca.save(dir)?;
        Ok(ca)
    }

    pub fn save(&self, dir: &Path) -> Result<(), DevCaError> {
        fs::create_dir_all(dir).map_err(io(dir))?;
        write_atomic(&dir.join(CA_KEY_FILE), &self.issuer.key().serialize_pem())?;
        write_atomic(&dir.join(CA_CERT_FILE), &self.cert_pem)
    }

    /// The trust bundle: the CA certificate.
    pub fn bundle_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The trust bundle as DER (the Workload API's encoding).
    pub fn bundle_der(&self) -> Result<Vec<u8>, DevCaError> {
        Ok(pem::parse(&self.cert_pem)?.into_contents())
    }

    /// Issues a leaf certificate for client and server use.
    pub fn issue(&self, leaf: &Leaf) -> Result<Issued, DevCaError> {
        let mut params = CertificateParams::new(leaf.dns_names.clone())?;
        for uri in &leaf.uris {
            params
                .subject_alt_names
                .push(SanType::URI(uri.clone().try_into()?));
        }
        for ip in &leaf.ip_addresses {
            params.subject_alt_names.push(SanType::IpAddress(*ip));
        }
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "lock dev workload");
        if let Some(cn) = &leaf.common_name {
            dn.push(DnType::CommonName, cn.as_str());
        }
        params.distinguished_name = dn;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
            KeyUsagePurpose::KeyAgreement,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.use_authority_key_identifier_extension = true;
        let now = OffsetDateTime::now_utc();
        params.not_before = now - Duration::minutes(5);
        params.not_after = now + leaf.valid_for;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().to_vec(),
            key_der: key.serialize_der(),
        })
    }
}

fn write_atomic(path: &Path, contents: &str) -> Result<(), DevCaError> {
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, contents).map_err(io(&tmp))?;
    fs::rename(&tmp, path).map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_ca_reloads_and_issues() {
        let dir = tempfile::tempdir().unwrap();
        let ca = DevCa::load_or_create(dir.path(), "dev.lock.local").unwrap();
        let again = DevCa::load_or_create(dir.path(), "dev.lock.local").unwrap();
        assert_eq!(ca.bundle_pem(), again.bundle_pem());
        let svid = again
            .issue(&Leaf::svid("spiffe://dev.lock.local/w").with_dns("localhost"))
            .unwrap();
        svid.save(dir.path(), "w").unwrap();
        assert!(dir.path().join("w.pem").exists() && dir.path().join("w.key").exists());
    }
}
