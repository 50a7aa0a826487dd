//! The channel to the lock edge, in one of three ways a workload holds its identity:
//! X.509-SVID files, the SPIFFE Workload API, or its mesh sidecar (which presents the SVID
//! for it). Whatever the way, Envoy sees the workload's SPIFFE ID on the TLS connection it
//! terminates; nothing the client sends in a header is believed (ARCHITECTURE, trust
//! boundaries).

use crate::error::LockError;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::SystemTime;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// How often the client PINGs the edge, and how long it waits for the answer.
const KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(20);
const KEEPALIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Where the service is and how this workload proves who it is.
#[derive(Debug, Clone)]
pub struct Config {
    /// Envoy's lock.v1 endpoint, e.g. `https://lock-edge.lock.svc:8443`; with
    /// [`Credentials::MeshSidecar`], the sidecar's plaintext listener on loopback, e.g.
    /// `http://127.0.0.1:15001`.
    pub endpoint: String,
    pub credentials: Credentials,
    /// This client's instance (`lock-instance`, issues 32 and 50): replicas of one identity
    /// are told apart by it, so a sibling's hold is waited for and only this client's own
    /// earlier session's hold is a leak. Some: sent as it is. None: [`process_instance`]
    /// draws one when the client is built (`<LOCK_INSTANCE>:<pid>:<n>`; set
    /// `LOCK_INSTANCE` to the pod UID from the downward API).
    pub instance: Option<String>,
}

/// The instance of the next client object of this process (issue 50):
/// `<prefix>:<pid>:<n>`, see [`instance_for`]. The prefix is `LOCK_INSTANCE` (read once per
/// process) or a random `p-<16 hex>` chosen once per process; `n` counts the calls, from 1
/// (each [`LockClient`](crate::LockClient) built without an explicit instance takes one).
///
/// A restarted container process is often pid 1 again and builds its first client again,
/// so it gets its previous life's instance and is told LEAKED_HOLD when it meets its own old
/// hold; sibling worker processes of the pod (other pids) and two clients of one process
/// (other `n`) queue for each other instead.
pub fn process_instance() -> String {
    static PREFIX: std::sync::OnceLock<(Option<String>, String)> = std::sync::OnceLock::new();
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let (env, random) = PREFIX.get_or_init(|| {
        (
            std::env::var(lock_config::instance::INSTANCE_ENV).ok(),
            format!("p-{:016x}", rand::random::<u64>()),
        )
    });
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    instance_for(env.as_deref(), std::process::id(), n, random)
}

/// The instance rule, pure: `<prefix>:<pid>:<n>`, where the prefix is `prefix_env` (the
/// value of `LOCK_INSTANCE`) when it is set and valid and the whole instance stays a valid
/// `lock-instance` (at most 253 characters), else `random_prefix`.
pub fn instance_for(prefix_env: Option<&str>, pid: u32, n: u64, random_prefix: &str) -> String {
    let valid = |v: &str| lock_config::instance::parse_instance(v.as_bytes()).is_ok();
    prefix_env
        .filter(|p| valid(p))
        .map(|p| format!("{p}:{pid}:{n}"))
        .filter(|i| valid(i))
        .unwrap_or_else(|| format!("{random_prefix}:{pid}:{n}"))
}

/// The three ways a workload holds its X.509-SVID.
#[derive(Debug, Clone)]
pub enum Credentials {
    /// PEM files written by the SPIRE agent or spiffe-helper; a rewrite (rotation) is
    /// picked up by the next call.
    Files(SvidFiles),
    /// The SPIFFE Workload API: the SVID and bundle come from the agent's stream and a
    /// rotation it pushes is picked up by the next call. Build the source with
    /// [`workload_api_source`] (or share one the service already has).
    WorkloadApi {
        source: spiffe::X509Source,
        /// Name verified in Envoy's certificate.
        server_name: String,
    },
    /// The workload's mesh sidecar originates mutual TLS with the workload's SVID; the
    /// client speaks plaintext HTTP/2 to it, which is allowed only to a loopback address
    /// (anything farther would carry the calls, and the tokens in them, in the clear).
    MeshSidecar,
}

/// An SVID as files on disk.
#[derive(Debug, Clone)]
pub struct SvidFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Trust bundle that signed Envoy's certificate.
    pub bundle: PathBuf,
    /// Name verified in Envoy's certificate.
    pub server_name: String,
}

/// What the credentials looked like when the channel was built: a change means a rotated
/// SVID, and the next call builds a new channel with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stamp {
    Files(Vec<Option<SystemTime>>),
    WorkloadApi(u64),
    Fixed,
}

/// Connects to the SPIFFE Workload API at `socket` (`unix:///run/spire/agent.sock`, or the
/// value of `SPIFFE_ENDPOINT_SOCKET`) and waits for the first SVID and bundle.
pub async fn workload_api_source(socket: &str) -> Result<spiffe::X509Source, LockError> {
    spiffe::X509Source::builder()
        .endpoint(socket)
        .build()
        .await
        .map_err(|e| LockError::Unauthenticated(format!("SPIFFE Workload API at {socket}: {e}")))
}

impl Config {
    /// A config reading the SVID from files.
    pub fn files(
        endpoint: impl Into<String>,
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
        bundle: impl Into<PathBuf>,
        server_name: impl Into<String>,
    ) -> Self {
        Self {
            endpoint: endpoint.into(),
            credentials: Credentials::Files(SvidFiles {
                cert: cert.into(),
                key: key.into(),
                bundle: bundle.into(),
                server_name: server_name.into(),
            }),
            instance: None,
        }
    }

    /// A config for the workload's mesh sidecar at `endpoint` (`http://127.0.0.1:PORT`).
    pub fn mesh_sidecar(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            credentials: Credentials::MeshSidecar,
            instance: None,
        }
    }

    /// The same config speaking for another instance (a test's second replica, or a
    /// workload that names its instance itself): sent as it is, with no pid or counter
    /// added. An invalid value is refused by the service at OpenSession
    /// (MALFORMED_REQUEST).
    pub fn with_instance(mut self, instance: impl Into<String>) -> Self {
        self.instance = Some(instance.into());
        self
    }

    pub(crate) fn stamp(&self) -> Stamp {
        match &self.credentials {
            Credentials::Files(f) => Stamp::Files(
                [&f.cert, &f.key, &f.bundle]
                    .iter()
                    .map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
                    .collect(),
            ),
            Credentials::WorkloadApi { source, .. } => Stamp::WorkloadApi(source.updated().last()),
            Credentials::MeshSidecar => Stamp::Fixed,
        }
    }

    /// A channel presenting the credentials as they are now. tonic connects lazily and
    /// reconnects on failure.
    pub(crate) fn channel(&self) -> Result<Channel, LockError> {
        Ok(self.endpoint()?.connect_lazy())
    }

    /// A channel connected now: a command-line call reports an unreachable edge as such.
    pub async fn connect(&self) -> Result<Channel, LockError> {
        self.endpoint()?.connect().await.map_err(|e| {
            LockError::Unavailable(format!("cannot connect to {}: {e}", self.endpoint))
        })
    }

    fn endpoint(&self) -> Result<Endpoint, LockError> {
        let plaintext = matches!(self.credentials, Credentials::MeshSidecar);
        check_endpoint(&self.endpoint, plaintext).map_err(LockError::InvalidRequest)?;
        let endpoint = Channel::from_shared(self.endpoint.clone())
            .map_err(|e| LockError::InvalidRequest(format!("endpoint: {e}")))?;
        let endpoint = match self.tls()? {
            Some(tls) => endpoint
                .tls_config(tls)
                .map_err(|e| LockError::InvalidRequest(format!("TLS: {e}")))?,
            None => endpoint,
        };
        // HTTP/2 PINGs on the one connection, idle or not: a path that silently drops
        // packets (a dead edge node, a NAT that forgot the flow) shows as a broken
        // connection within seconds, and tonic reconnects, instead of each call waiting
        // for TCP's own timeout.
        Ok(endpoint
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true))
    }

    /// The client TLS configuration, or None for the sidecar's plaintext.
    fn tls(&self) -> Result<Option<ClientTlsConfig>, LockError> {
        match &self.credentials {
            Credentials::Files(f) => {
                let read = |p: &PathBuf| {
                    std::fs::read(p)
                        .map_err(|e| LockError::Unauthenticated(format!("{}: {e}", p.display())))
                };
                Ok(Some(
                    ClientTlsConfig::new()
                        .ca_certificate(Certificate::from_pem(read(&f.bundle)?))
                        .identity(Identity::from_pem(read(&f.cert)?, read(&f.key)?))
                        .domain_name(f.server_name.clone()),
                ))
            }
            Credentials::WorkloadApi {
                source,
                server_name,
            } => {
                let unusable =
                    |e: spiffe::X509SourceError| LockError::Unauthenticated(format!("SVID: {e}"));
                let svid = source.svid().map_err(unusable)?;
                let bundles = source.bundle_set().map_err(unusable)?;
                let pem = |tag: &str, der: &[u8]| pem::encode(&pem::Pem::new(tag, der.to_vec()));
                let chain: String = svid
                    .cert_chain()
                    .iter()
                    .map(|c| pem("CERTIFICATE", c.as_bytes()))
                    .collect();
                // Every trust domain's authorities: a federated edge verifies too.
                let roots: String = bundles
                    .iter()
                    .flat_map(|(_, b)| b.authorities().iter())
                    .map(|c| pem("CERTIFICATE", c.as_bytes()))
                    .collect();
                let key = pem("PRIVATE KEY", svid.private_key().as_bytes());
                Ok(Some(
                    ClientTlsConfig::new()
                        .ca_certificate(Certificate::from_pem(roots))
                        .identity(Identity::from_pem(chain, key))
                        .domain_name(server_name.clone()),
                ))
            }
            Credentials::MeshSidecar => Ok(None),
        }
    }
}

/// `https://` for the client's own TLS; `http://` only to a loopback host, the sidecar
/// next to the workload.
fn check_endpoint(endpoint: &str, plaintext: bool) -> Result<(), String> {
    let (scheme, rest) = endpoint
        .split_once("://")
        .ok_or_else(|| format!("endpoint {endpoint:?}: expected https://host:port"))?;
    match (scheme, plaintext) {
        ("https", false) => Ok(()),
        ("http", true) if is_loopback_authority(rest) => Ok(()),
        ("http", true) => Err(format!(
            "endpoint {endpoint:?}: plaintext goes only to the workload's sidecar on loopback \
             (127.0.0.0/8, ::1, localhost)"
        )),
        ("http", false) => Err(format!(
            "endpoint {endpoint:?} is plaintext: use https:// with SVID files or the Workload \
             API, or the mesh-sidecar mode for a local sidecar"
        )),
        (_, true) => Err(format!(
            "endpoint {endpoint:?}: the mesh sidecar is reached over http://127.0.0.1:PORT"
        )),
        (_, false) => Err(format!("endpoint {endpoint:?}: expected https://host:port")),
    }
}

/// Whether `host[:port][/path]` names this machine.
fn is_loopback_authority(rest: &str) -> bool {
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::check_endpoint;

    #[test]
    fn endpoints_by_mode() {
        let cases: &[(&str, bool, bool)] = &[
            // endpoint, plaintext (sidecar mode), accepted
            ("https://lock-edge:8443", false, true),
            ("https://127.0.0.1:8443", false, true),
            ("http://127.0.0.1:15001", true, true),
            ("http://127.9.9.9:15001", true, true),
            ("http://localhost:15001", true, true),
            ("http://LOCALHOST:15001/", true, true),
            ("http://[::1]:15001", true, true),
            // plaintext off the machine: the calls and tokens would cross the network clear
            ("http://10.0.0.5:15001", true, false),
            ("http://lock-edge:8443", true, false),
            ("http://127.0.0.1.evil.example:80", true, false),
            ("http://[::2]:15001", true, false),
            // a mode and a scheme that disagree
            ("http://127.0.0.1:8443", false, false),
            ("https://127.0.0.1:15001", true, false),
            ("127.0.0.1:8443", false, false),
            ("unix:///run/sidecar.sock", true, false),
        ];
        for (endpoint, plaintext, ok) in cases {
            assert_eq!(
                check_endpoint(endpoint, *plaintext).is_ok(),
                *ok,
                "{endpoint} plaintext={plaintext}"
            );
        }
    }
}

#[cfg(test)]
mod instance_tests {
    use super::instance_for;
    use lock_config::instance::{MAX_INSTANCE_LEN, parse_instance};

    #[test]
    fn instance_rule_table() {
        const RANDOM: &str = "p-0123456789abcdef";
        // The longest LOCK_INSTANCE that still fits with ":4242:1" (7 characters).
        let fits = "u".repeat(MAX_INSTANCE_LEN - 7);
        let too_long = "u".repeat(MAX_INSTANCE_LEN - 6);
        let at_limit = "u".repeat(MAX_INSTANCE_LEN);
        for (env, pid, n, want) in [
            // Valid env: the pod's prefix, then pid and counter.
            (
                Some("3f2a9c1e-8b7d-4c11-9a0e-5d6f7a8b9c0d"),
                1,
                1,
                "3f2a9c1e-8b7d-4c11-9a0e-5d6f7a8b9c0d:1:1".to_owned(),
            ),
            (Some("pod-a"), 4242, 2, "pod-a:4242:2".to_owned()),
            (
                Some("node-1.pod:pay_ledger"),
                7,
                3,
                "node-1.pod:pay_ledger:7:3".to_owned(),
            ),
            (Some(&fits), 4242, 1, format!("{fits}:4242:1")),
            // Invalid env: the random prefix, as when unset.
            (Some(""), 4242, 1, format!("{RANDOM}:4242:1")),
            (Some("with space"), 4242, 1, format!("{RANDOM}:4242:1")),
            (Some("slash/y"), 4242, 1, format!("{RANDOM}:4242:1")),
            (Some("caf\u{e9}"), 4242, 1, format!("{RANDOM}:4242:1")),
            // Too long, by itself or once the suffix is added.
            (Some(&too_long), 4242, 1, format!("{RANDOM}:4242:1")),
            (Some(&at_limit), 1, 1, format!("{RANDOM}:1:1")),
            // No env.
            (None, 1, 1, format!("{RANDOM}:1:1")),
            (
                None,
                u32::MAX,
                u64::MAX,
                format!("{RANDOM}:{}:{}", u32::MAX, u64::MAX),
            ),
        ] {
            let got = instance_for(env, pid, n, RANDOM);
            assert_eq!(got, want, "{env:?} {pid} {n}");
            assert!(parse_instance(got.as_bytes()).is_ok(), "{got}");
        }
    }

    #[test]
    fn each_client_object_takes_the_next_number() {
        let (a, b) = (super::process_instance(), super::process_instance());
        let (pa, na) = a.rsplit_once(':').unwrap();
        let (pb, nb) = b.rsplit_once(':').unwrap();
        assert_eq!(pa, pb, "one prefix and pid per process");
        assert!(pa.ends_with(&format!(":{}", std::process::id())), "{a}");
        assert!(nb.parse::<u64>().unwrap() > na.parse::<u64>().unwrap());
        assert!(parse_instance(a.as_bytes()).is_ok(), "{a}");
    }
}
