//! A real audit tailer (`lock-audit tail`) against a stack's etcd, as etcd's `auditor`
//! user, writing to a real PostgreSQL.

use crate::etcd::Access;
use crate::paths::workspace_bin;
use crate::process::{Proc, patience};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

pub struct Tailer {
    pub proc: Proc,
    pub id: String,
    /// Its admin listener (`/metrics`).
    pub admin: SocketAddr,
}

impl Tailer {
    /// Starts `lock-audit tail` named `id` (its election value); `extra` flags appended.
    pub fn start(
        dir: &Path,
        etcd: &Access,
        db: &str,
        id: &str,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        let mut cmd = Command::new(workspace_bin("lock-audit")?);
        cmd.args(["tail", "--etcd", &etcd.urls, "--db", db, "--id", id])
            .args(["--lease-ttl", "2", "--checkpoint-every-ms", "500"])
            .args(extra)
            .envs(etcd.pki.lockctl_env("auditor"));
        let mut proc = Proc::spawn(id, cmd, dir)?;
        let line = proc.wait_for_line("admin listening on ", patience())?;
        let admin = line.rsplit(' ').next().unwrap_or_default().trim().parse()?;
        Ok(Self {
            proc,
            id: id.to_owned(),
            admin,
        })
    }

    /// A metric's value from its `/metrics` (0 when absent; a gauge's fraction dropped).
    pub fn metric(&self, name: &str) -> anyhow::Result<i64> {
        Ok(self.metric_value(name)?.map_or(0, |v| v as i64))
    }

    /// A metric's value, None when the series is absent.
    pub fn metric_value(&self, name: &str) -> anyhow::Result<Option<f64>> {
        let body = crate::admin_get(self.admin, "/metrics")?;
        Ok(body
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok()))
    }
}
