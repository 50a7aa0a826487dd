//! A real S3-compatible server on loopback: moto's server mode (PyPI `moto[server]`, in the
//! project venv), which implements conditional PUTs (`If-Match`, `If-None-Match: *`),
//! object metadata and SigV4-signed requests. MinIO, the store the records name, is not
//! installable here; moto answers the same S3 API calls the fence makes.
//!
//! moto keeps everything in memory: a fresh server per test.

use crate::paths::workspace_root;
use crate::process::{Proc, free_port, patience};
use anyhow::Context as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

pub struct S3Server {
    pub proc: Proc,
    pub addr: SocketAddr,
}

/// The credentials a test signs with (moto accepts any; a real store would check them).
pub const ACCESS_KEY: &str = "pause-test";
pub const SECRET_KEY: &str = "pause-test-secret";

impl S3Server {
    pub fn start(dir: &Path) -> anyhow::Result<Self> {
        let exe = workspace_root().join(".deps/python-venv/bin/moto_server");
        anyhow::ensure!(
            exe.exists(),
            "no {}: run integration/scripts/install-deps.sh",
            exe.display()
        );
        let port = free_port()?;
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
        let mut cmd = Command::new(exe);
        cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()]);
        let mut proc = Proc::spawn("moto-s3", cmd, &dir.join("s3"))?;
        proc.wait_for_port(addr, patience())
            .context("moto's S3 server did not listen")?;
        Ok(Self { proc, addr })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The environment a client of this server signs with.
    pub fn env(&self) -> [(&'static str, &'static str); 3] {
        [
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
            ("AWS_REGION", "us-east-1"),
        ]
    }
}
