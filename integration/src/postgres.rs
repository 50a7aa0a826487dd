//! A real PostgreSQL server (Debian's) on loopback in a temp data dir. PostgreSQL refuses
//! to run as root, so as root the harness runs it as the `postgres` user.

use crate::process::{Proc, free_port, patience};
use anyhow::{Context as _, bail};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Postgres {
    pub proc: Proc,
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
}

fn bin_dir() -> anyhow::Result<PathBuf> {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .context("no /usr/lib/postgresql: run integration/scripts/install-deps.sh")?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("postgres").exists())
        .collect();
    versions.sort();
    versions.pop().context("no PostgreSQL server binaries")
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// `program` as the postgres user when we are root. setpriv execs in place (no child
/// process in between), so killing the handle kills the server.
fn as_postgres(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=postgres",
            "--regid=postgres",
            "--clear-groups",
            "--",
        ])
        .arg(program);
        c
    } else {
        Command::new(program)
    }
}

impl Postgres {
    /// initdb (trust auth for the `lock` superuser, loopback only) and start.
    pub fn start(dir: &Path) -> anyhow::Result<Self> {
        let bin = bin_dir()?;
        let data_dir = dir.join("pg");
        std::fs::create_dir_all(&data_dir)?;
        if is_root() {
            // The server runs as postgres: it must reach and own its folder.
            let mut p = dir.to_path_buf();
            while p.parent().is_some() && p != Path::new("/tmp") && p != Path::new("/") {
                let _ = Command::new("chmod").arg("o+x").arg(&p).status();
                p.pop();
            }
            let ok = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&data_dir)
                .status()?;
            if !ok.success() {
                bail!("chown {} failed", data_dir.display());
            }
        }
        let out = as_postgres(&bin.join("initdb"))
            .arg("-D")
            .arg(&data_dir)
            .args(["-U", "lock", "--auth=trust", "--no-sync", "-E", "UTF8"])
            .output()?;
        if !out.status.success() {
            bail!("initdb failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let port = free_port()?;
        let mut cmd = as_postgres(&bin.join("postgres"));
        cmd.arg("-D")
            .arg(&data_dir)
            .args(["-p", &port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .arg("-k")
            .arg(&data_dir);
        let mut proc = Proc::spawn("postgres", cmd, dir)?;
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
        proc.wait_for_port(addr, patience())?;
        // The port opens before recovery ends ("the database system is starting up").
        proc.wait_for_line("ready to accept connections", patience())?;
        Ok(Self {
            proc,
            addr,
            data_dir,
        })
    }

    pub fn url(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=lock dbname=postgres",
            self.addr.port()
        )
    }
}
