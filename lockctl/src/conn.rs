//! Where a workload's lockctl connects and as whom: Envoy's endpoint and the SVID (files,
//! the SPIFFE Workload API, or a mesh sidecar that presents it).

use crate::Failure;
use std::path::PathBuf;

#[derive(clap::Args, Clone)]
pub struct Conn {
    /// Envoy's lock.v1 endpoint; `http://127.0.0.1:PORT` is the workload's mesh sidecar,
    /// which presents the workload's SVID to the edge (plaintext goes to loopback only).
    #[arg(long, env = "LOCK_ENDPOINT", default_value = "https://127.0.0.1:8443")]
    pub endpoint: String,
    /// The SPIFFE Workload API (e.g. `unix:///run/spire/agent.sock`): the SVID and bundle
    /// come from it instead of files.
    #[arg(long, env = "SPIFFE_ENDPOINT_SOCKET")]
    pub spiffe_socket: Option<String>,
    /// This workload's X.509-SVID (PEM).
    #[arg(long, env = "LOCK_SVID")]
    pub svid: Option<PathBuf>,
    /// The SVID's private key (PEM).
    #[arg(long, env = "LOCK_SVID_KEY")]
    pub svid_key: Option<PathBuf>,
    /// Trust bundle (PEM) that signs Envoy's certificate.
    #[arg(long, env = "LOCK_CA")]
    pub ca: Option<PathBuf>,
    /// Name to verify in Envoy's certificate.
    #[arg(long, env = "LOCK_SERVER_NAME", default_value = "localhost")]
    pub server_name: String,
}

impl Conn {
    /// The client configuration: the mesh sidecar for an `http://` endpoint; else SVID
    /// files when all three are given; else the Workload API when its socket is (the
    /// variable SPIRE sets in a workload's environment).
    pub async fn config(&self) -> Result<lock_client::Config, Failure> {
        use lock_client::{Config, Credentials};
        if self.endpoint.starts_with("http://") {
            return Ok(Config::mesh_sidecar(self.endpoint.clone()));
        }
        if let (Some(cert), Some(key), Some(ca)) = (&self.svid, &self.svid_key, &self.ca) {
            return Ok(Config::files(
                self.endpoint.clone(),
                cert,
                key,
                ca,
                self.server_name.clone(),
            ));
        }
        match &self.spiffe_socket {
            Some(socket) => {
                let source = lock_client::workload_api_source(socket)
                    .await
                    .map_err(|e| Failure::unreachable(e.to_string()))?;
                Ok(Config {
                    endpoint: self.endpoint.clone(),
                    credentials: Credentials::WorkloadApi {
                        source,
                        server_name: self.server_name.clone(),
                    },
                    instance: None,
                })
            }
            _ => Err(Failure::input(
                "no identity: give --svid, --svid-key and --ca (LOCK_SVID, LOCK_SVID_KEY, \
                 LOCK_CA), or --spiffe-socket (SPIFFE_ENDPOINT_SOCKET) for the Workload API, or an http:// \
                 endpoint for the mesh sidecar",
            )),
        }
    }
}
