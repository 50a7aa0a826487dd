//! A real Redis (Debian's redis-server) on loopback, for benchmarks. Default durability:
//! no fsync (how Redis locks are usually run); etcd keeps its fsync on.

use lock_integration::process::{Proc, free_port, patience};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

pub struct Redis {
    /// The server (it stops with the bench when this is dropped).
    pub proc: Proc,
    pub addr: SocketAddr,
}

impl Redis {
    pub fn start(dir: &Path) -> anyhow::Result<Self> {
        let port = free_port()?;
        let data = dir.join("redis");
        std::fs::create_dir_all(&data)?;
        let mut cmd = Command::new("redis-server");
        cmd.args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .args(["--appendonly", "no", "--daemonize", "no"])
        .arg("--dir")
        .arg(&data);
        let mut proc = Proc::spawn("redis", cmd, dir)?;
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
        proc.wait_for_port(addr, patience())?;
        Ok(Self { proc, addr })
    }

    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }
}
