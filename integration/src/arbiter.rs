//! A real `arbiter` process on a free loopback port.

use crate::paths::workspace_bin;
use crate::process::{Proc, patience};
use anyhow::Context as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

pub struct Arbiter {
    pub proc: Proc,
    pub id: String,
    pub addr: SocketAddr,
}

impl Arbiter {
    pub fn start(dir: &Path, id: &str, etcd_url: &str, registry: &Path) -> anyhow::Result<Self> {
        Self::start_on(dir, id, etcd_url, registry, 0)
    }

    pub fn start_on(
        dir: &Path,
        id: &str,
        etcd_url: &str,
        registry: &Path,
        port: u16,
    ) -> anyhow::Result<Self> {
        let mut cmd = Command::new(workspace_bin("arbiter")?);
        cmd.args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--etcd", etcd_url])
            .arg("--registry")
            .arg(registry)
            .args(["--id", id])
            .env("RUST_LOG", "warn,lock_arbiter=info");
        let mut proc = Proc::spawn(id, cmd, dir)?;
        let line = proc.wait_for_line(" listening on ", patience())?;
        let addr = line
            .rsplit(' ')
            .next()
            .context("no address in the listening line")?
            .parse()?;
        Ok(Self {
            proc,
            id: id.to_owned(),
            addr,
        })
    }
}
