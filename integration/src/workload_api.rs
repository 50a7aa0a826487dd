//! The dev CA's SPIFFE Workload API (`devca workload-api`) as a real process on a unix
//! socket in the stack's folder: what a SPIRE agent serves a workload.

use crate::paths::workspace_bin;
use crate::pki::Pki;
use crate::process::{Proc, patience};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub struct WorkloadApi {
    pub proc: Proc,
    pub socket: PathBuf,
}

impl WorkloadApi {
    /// Serves `spiffe_id` from the stack's CA, SVIDs valid for `ttl`, rotated at half.
    pub fn start(pki: &Pki, dir: &Path, spiffe_id: &str, ttl: Duration) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let socket = dir.join("agent.sock");
        let mut cmd = Command::new(workspace_bin("devca")?);
        cmd.args(["workload-api", "--dir"])
            .arg(&pki.dir)
            .arg("--socket")
            .arg(&socket)
            .args([
                "--spiffe-id",
                spiffe_id,
                "--ttl-seconds",
                &ttl.as_secs().to_string(),
            ]);
        let mut proc = Proc::spawn("workload-api", cmd, dir)?;
        proc.wait_for_line("workload api: serving", patience())?;
        Ok(Self { proc, socket })
    }

    /// The address clients are given (`SPIFFE_ENDPOINT_SOCKET`).
    pub fn endpoint(&self) -> String {
        format!("unix:{}", self.socket.display())
    }
}
