//! A workload's mesh sidecar: a second Envoy rendered from `envoy/sidecar.yaml.tmpl`,
//! plaintext HTTP/2 in on loopback, mutual TLS out to the lock edge with the workload's
//! SVID. What a mesh gives a workload, for the mesh-mode tests (issue 20).

use crate::paths::{dep, workspace_root};
use crate::pki::{ENVOY_ID, SvidFiles};
use crate::process::{Proc, free_port, patience};
use anyhow::bail;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

pub struct Sidecar {
    pub proc: Proc,
    pub listen: SocketAddr,
    pub admin: SocketAddr,
}

impl Sidecar {
    /// Starts the sidecar of the workload holding `svid`, egressing to the edge at `edge`.
    pub fn start(dir: &Path, edge: SocketAddr, svid: &SvidFiles) -> anyhow::Result<Self> {
        let listen: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        let admin: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        let config = render(listen, admin, edge, svid)?;
        std::fs::create_dir_all(dir)?;
        let config_path = dir.join("sidecar.yaml");
        std::fs::write(&config_path, config)?;
        let mut cmd = Command::new(dep("envoy")?);
        cmd.arg("-c").arg(&config_path).args([
            "--disable-hot-restart",
            "--concurrency",
            "1",
            "--log-level",
            "warn",
        ]);
        let mut proc = Proc::spawn("sidecar", cmd, dir)?;
        proc.wait_for_port(admin, patience())?;
        proc.wait_for_port(listen, patience())?;
        Ok(Self {
            proc,
            listen,
            admin,
        })
    }

    /// The endpoint a workload in mesh mode is given.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.listen)
    }
}

/// The bootstrap YAML: the template with every `${NAME}` replaced.
pub fn render(
    listen: SocketAddr,
    admin: SocketAddr,
    edge: SocketAddr,
    svid: &SvidFiles,
) -> anyhow::Result<String> {
    let template = std::fs::read_to_string(workspace_root().join("envoy/sidecar.yaml.tmpl"))?;
    let out = template
        .replace("${LISTEN_PORT}", &listen.port().to_string())
        .replace("${ADMIN_PORT}", &admin.port().to_string())
        .replace("${EDGE_PORT}", &edge.port().to_string())
        .replace("${EDGE_SPIFFE_ID}", ENVOY_ID)
        .replace("${SVID_CERT}", &svid.cert.display().to_string())
        .replace("${SVID_KEY}", &svid.key.display().to_string())
        .replace("${BUNDLE}", &svid.ca.display().to_string());
    if let Some(i) = out.find("${") {
        bail!(
            "unrendered placeholder near: {}",
            &out[i..(i + 40).min(out.len())]
        );
    }
    Ok(out)
}
