//! Dev SVIDs for the stack: the CA (trust bundle), Envoy's server SVID and workload SVIDs.

use lock_devca::{DevCa, Leaf};
use std::path::{Path, PathBuf};

pub const TRUST_DOMAIN: &str = "dev.lock.local";
pub const ENVOY_ID: &str = "spiffe://dev.lock.local/ns/edge/sa/envoy";
/// The arbiters' SVID (Envoy's upstream TLS accepts only this URI SAN).
pub const ARBITER_ID: &str = "spiffe://dev.lock.local/ns/lock/sa/arbiter";
/// Workload identities of the dev registry (config/registry/dev/grants.yaml).
pub const LEDGER: &str = "spiffe://dev.lock.local/ns/pay/sa/ledger";
pub const ORDERS: &str = "spiffe://dev.lock.local/ns/orders/sa/worker";
pub const OPERATOR: &str = "spiffe://dev.lock.local/ns/ops/sa/lockctl";

/// File paths of one workload's SVID.
#[derive(Debug, Clone)]
pub struct SvidFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

pub struct Pki {
    pub dir: PathBuf,
    pub ca: DevCa,
}

impl Pki {
    /// Creates (or reuses) the CA in `dir` and issues Envoy's server SVID (DNS SAN
    /// `localhost`, which clients verify).
    pub fn create(dir: &Path) -> anyhow::Result<Self> {
        let ca = DevCa::load_or_create(dir, TRUST_DOMAIN)?;
        let pki = Self {
            dir: dir.to_path_buf(),
            ca,
        };
        pki.rotate_envoy_svid()?;
        pki.rotate_arbiter_svid()?;
        pki.write_sds(
            "sds-trust-bundle.yaml",
            serde_json::json!({
                "name": "trust_bundle",
                "validation_context": {"trusted_ca": {"inline_string": pki.ca.bundle_pem()}},
            }),
        )?;
        Ok(pki)
    }

    /// Issues a new Envoy server SVID (DNS SAN `localhost`, which clients verify) and
    /// replaces its SDS resource atomically; Envoy serves it on new connections.
    /// Returns the new certificate (PEM).
    pub fn rotate_envoy_svid(&self) -> anyhow::Result<String> {
        let svid = self.ca.issue(
            &Leaf::svid(ENVOY_ID)
                .with_dns("localhost")
                .valid_for(time::Duration::days(1)),
        )?;
        svid.save(&self.dir, "envoy")?;
        self.write_sds(
            "sds-envoy-svid.yaml",
            serde_json::json!({
                "name": "envoy_svid",
                "tls_certificate": {
                    "certificate_chain": {"inline_string": svid.cert_pem},
                    "private_key": {"inline_string": svid.key_pem},
                },
            }),
        )?;
        Ok(svid.cert_pem)
    }

    /// Issues a new arbiter SVID (`arbiter.pem`/`.key`, DNS SAN `localhost` for the test
    /// clients that dial an arbiter directly); arbiters serve it on new connections.
    pub fn rotate_arbiter_svid(&self) -> anyhow::Result<String> {
        let svid = self.ca.issue(
            &Leaf::svid(ARBITER_ID)
                .with_dns("localhost")
                .valid_for(time::Duration::days(1)),
        )?;
        svid.save(&self.dir, "arbiter")?;
        Ok(svid.cert_pem)
    }

    /// The flags that make an arbiter serve mutual TLS with its SVID from this PKI and
    /// admit only Envoy's identity.
    pub fn arbiter_tls_args(&self) -> Vec<String> {
        let f = self.files("arbiter");
        vec![
            "--tls-cert".into(),
            f.cert.display().to_string(),
            "--tls-key".into(),
            f.key.display().to_string(),
            "--tls-bundle".into(),
            f.ca.display().to_string(),
            "--edge-id".into(),
            ENVOY_ID.into(),
        ]
    }

    /// An SDS `DiscoveryResponse` holding one Secret, written by temp file + rename.
    fn write_sds(&self, file: &str, mut secret: serde_json::Value) -> anyhow::Result<()> {
        secret["@type"] =
            "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret".into();
        let doc = serde_json::json!({"resources": [secret]});
        crate::paths::write_atomic(&self.dir.join(file), &serde_json::to_string_pretty(&doc)?)
    }

    /// Issues a leaf with the given URI SANs (zero, one, or a foreign one) as `name`.
    pub fn issue(&self, name: &str, uris: &[&str]) -> anyhow::Result<SvidFiles> {
        let leaf = Leaf {
            uris: uris.iter().map(|s| (*s).to_owned()).collect(),
            valid_for: time::Duration::days(1),
            ..Leaf::plain()
        };
        self.ca.issue(&leaf)?.save(&self.dir, name)?;
        Ok(self.files(name))
    }

    /// An SVID for `spiffe_id`.
    pub fn svid(&self, name: &str, spiffe_id: &str) -> anyhow::Result<SvidFiles> {
        self.issue(name, &[spiffe_id])
    }

    /// Envoy's SVID files: the identity the arbiters admit (tests that play the edge).
    pub fn edge_svid(&self) -> SvidFiles {
        self.files("envoy")
    }

    /// The trust bundle (the dev CA's certificate).
    pub fn bundle(&self) -> PathBuf {
        self.dir.join(lock_devca::CA_CERT_FILE)
    }

    pub fn files(&self, name: &str) -> SvidFiles {
        SvidFiles {
            cert: self.dir.join(format!("{name}.pem")),
            key: self.dir.join(format!("{name}.key")),
            ca: self.dir.join(lock_devca::CA_CERT_FILE),
        }
    }
}
