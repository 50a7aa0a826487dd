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
    /// Starts an arbiter on a free port; `etcd_urls` is comma-separated.
    pub fn start(dir: &Path, id: &str, etcd_urls: &str, registry: &Path) -> anyhow::Result<Self> {
        Self::start_with(dir, id, etcd_urls, registry, &[])
    }

    /// As [`Arbiter::start`], with extra flags (e.g. `--store-timeout-ms`).
    pub fn start_with(
        dir: &Path,
        id: &str,
        etcd_urls: &str,
        registry: &Path,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        let mut cmd = Command::new(workspace_bin("arbiter")?);
        cmd.args(["--listen", "127.0.0.1:0"])
            .args(["--etcd", etcd_urls])
            .args(extra)
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
