//! A real `arbiter` process on a loopback port, serving mutual TLS with the stack's arbiter
//! SVID and admitting only Envoy's identity (as in production).

use crate::paths::workspace_bin;
use crate::pki::Pki;
use crate::process::{Proc, patience};
use anyhow::Context as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Arbiter {
    pub proc: Proc,
    pub id: String,
    pub addr: SocketAddr,
    /// The admin listener (`GET /metrics`).
    pub admin: SocketAddr,
    args: Vec<String>,
    /// Extra environment (e.g. libfaketime's, for the clock tests); kept for restarts.
    env: Vec<(String, String)>,
    log_dir: PathBuf,
}

impl Arbiter {
    /// Starts an arbiter on a free port, reaching etcd as its own etcd user (`arbiter`).
    pub fn start(
        dir: &Path,
        id: &str,
        etcd: &crate::etcd::Access,
        registry: &Path,
        pki: &Pki,
    ) -> anyhow::Result<Self> {
        Self::start_with(dir, id, etcd, registry, pki, &[])
    }

    /// As [`Arbiter::start`], with extra flags (e.g. `--store-timeout-ms`).
    pub fn start_with(
        dir: &Path,
        id: &str,
        etcd: &crate::etcd::Access,
        registry: &Path,
        pki: &Pki,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        Self::start_with_env(dir, id, etcd, registry, pki, extra, &[])
    }

    /// As [`Arbiter::start_with`], the process given `env` as well.
    pub fn start_with_env(
        dir: &Path,
        id: &str,
        etcd: &crate::etcd::Access,
        registry: &Path,
        pki: &Pki,
        extra: &[&str],
        env: &[(String, String)],
    ) -> anyhow::Result<Self> {
        // `--insecure-plaintext` (the bench's TLS baseline) replaces the TLS flags.
        let mut args: Vec<String> = if extra.contains(&"--insecure-plaintext") {
            Vec::new()
        } else {
            pki.arbiter_tls_args()
        };
        args.extend(etcd.pki.arbiter_args());
        args.extend([
            "--etcd".into(),
            etcd.urls.clone(),
            "--registry".into(),
            registry.display().to_string(),
            "--id".into(),
            id.into(),
        ]);
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let (proc, addr, admin) = Self::spawn(dir, id, &args, env, "127.0.0.1:0", "127.0.0.1:0")?;
        Ok(Self {
            proc,
            id: id.to_owned(),
            addr,
            admin,
            args,
            env: env.to_vec(),
            log_dir: dir.to_path_buf(),
        })
    }

    fn spawn(
        dir: &Path,
        id: &str,
        args: &[String],
        env: &[(String, String)],
        listen: &str,
        admin: &str,
    ) -> anyhow::Result<(Proc, SocketAddr, SocketAddr)> {
        let mut cmd = Command::new(workspace_bin("arbiter")?);
        cmd.args(["--listen", listen, "--admin-listen", admin])
            .args(args)
            // The arbiter's info lines, and those of the store code it runs (`lock_store`).
            .env("RUST_LOG", "warn,lock_arbiter=info,lock_store=info")
            .envs(env.iter().map(|(k, v)| (k, v)));
        let mut proc = Proc::spawn(id, cmd, dir)?;
        let line = proc.wait_for_line(&format!("arbiter {id} listening on "), patience())?;
        let addr = last_word(&line)?;
        let line = proc.wait_for_line(&format!("arbiter {id} admin on "), patience())?;
        let admin = last_word(&line)?;
        Ok((proc, addr, admin))
    }

    /// `GET /metrics` from the admin listener.
    pub fn metrics(&self) -> anyhow::Result<String> {
        crate::admin_get(self.admin, "/metrics")
    }

    /// SIGTERM (a rolling update's stop): the arbiter drains and exits by itself within
    /// `patience`; then it starts again on the same addresses. Returns how long the drain
    /// took.
    pub fn drain_and_restart(&mut self) -> anyhow::Result<std::time::Duration> {
        let started = std::time::Instant::now();
        self.proc.terminate(patience());
        let drained = started.elapsed();
        self.respawn()?;
        Ok(drained)
    }

    /// Starts the process again on the same addresses (Envoy's cluster names them). The
    /// old log is kept beside the new one (`<log>.<n>`), so readiness is read from the new
    /// process's own lines and the old one's stay for a failure's diagnosis.
    fn respawn(&mut self) -> anyhow::Result<()> {
        let kept = (1..)
            .map(|n| self.proc.log.with_extension(format!("log.{n}")))
            .find(|p| !p.exists());
        if let Some(kept) = kept {
            let _ = std::fs::rename(&self.proc.log, kept);
        }
        let (proc, _, _) = Self::spawn(
            &self.log_dir,
            &self.id,
            &self.args,
            &self.env,
            &self.addr.to_string(),
            &self.admin.to_string(),
        )?;
        self.proc = proc;
        Ok(())
    }

    /// SIGKILL, then start again on the same address (Envoy's cluster names it). Its
    /// in-memory queues are gone; durable queues are in etcd.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.proc.kill();
        self.respawn()
    }
}

fn last_word(line: &str) -> anyhow::Result<SocketAddr> {
    Ok(line
        .rsplit(' ')
        .next()
        .context("no address at the end of the line")?
        .trim()
        .parse()?)
}
