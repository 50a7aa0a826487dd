//! A real child process for tests: output to a log file in its own folder, readiness waits
//! bounded in time, SIGKILL and reap on drop so nothing outlives a test.

use anyhow::{Context as _, bail};
use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Proc {
    name: String,
    child: Option<Child>,
    pub log: PathBuf,
}

impl Proc {
    /// Starts `cmd` with stdout and stderr appended to `<log_dir>/<name>.log`.
    pub fn spawn(name: &str, mut cmd: Command, log_dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(log_dir)?;
        let log = log_dir.join(format!("{name}.log"));
        let out = File::options().create(true).append(true).open(&log)?;
        let err = out.try_clone()?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {name}: {cmd:?}"))?;
        Ok(Self {
            name: name.to_owned(),
            child: Some(child),
            log,
        })
    }

    /// A handle with no process yet (started later by its owner).
    pub fn placeholder(name: &str, log_dir: &Path) -> Self {
        Self {
            name: name.to_owned(),
            child: None,
            log: log_dir.join(format!("{name}.log")),
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The log so far (for readiness lines and failure reports).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Fails if the process has exited, with the tail of its log.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        let exited = match self.child.as_mut() {
            Some(child) => child.try_wait()?,
            None => None,
        };
        if let Some(status) = exited {
            let log = self.log_text();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(30)..].join("\n");
            bail!("{} exited ({status}); log tail:\n{tail}", self.name);
        }
        Ok(())
    }

    /// Waits until `line` appears in the log; returns the first matching line.
    pub fn wait_for_line(&mut self, needle: &str, patience: Duration) -> anyhow::Result<String> {
        let deadline = Instant::now() + patience;
        loop {
            if let Some(l) = self.log_text().lines().find(|l| l.contains(needle)) {
                return Ok(l.to_owned());
            }
            self.check_running()?;
            if Instant::now() > deadline {
                bail!(
                    "{}: no {needle:?} in its log within {patience:?}",
                    self.name
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until `addr` accepts TCP connections.
    pub fn wait_for_port(&mut self, addr: SocketAddr, patience: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + patience;
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            self.check_running()?;
            if Instant::now() > deadline {
                bail!("{}: {addr} not accepting within {patience:?}", self.name);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends `sig` (e.g. "STOP", "CONT") with kill(1); no-op without a process.
    pub fn signal(&self, sig: &str) -> anyhow::Result<()> {
        if let Some(pid) = self.pid() {
            let ok = Command::new("kill")
                .arg(format!("-{sig}"))
                .arg(pid.to_string())
                .status()?
                .success();
            if !ok {
                bail!("kill -{sig} {pid} failed ({})", self.name);
            }
        }
        Ok(())
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then SIGKILL if it has not exited within `grace`.
    pub fn terminate(&mut self, grace: Duration) {
        if let Some(child) = self.child.as_mut() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline {
                if matches!(child.try_wait(), Ok(Some(_))) {
                    self.child = None;
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        self.kill();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A free loopback port. The port is released before use, so a rare collision is
/// possible; the harness's readiness checks then fail loudly rather than hang.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// `n` distinct free loopback ports: each is held until all are chosen, so the kernel
/// cannot hand one out twice (a 3-member etcd took 9 ports one by one, and two of them
/// could coincide: one member then failed to bind and the cluster never formed).
pub fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let held: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()?;
    held.iter().map(|l| Ok(l.local_addr()?.port())).collect()
}

/// Polls `check` until it returns Ok or `patience` passes (the harness's
/// `assert_eventually`); the last error is reported.
pub async fn eventually<T, F, Fut>(patience: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let deadline = Instant::now() + patience;
    loop {
        match check().await {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() > deadline => {
                return Err(e.context(format!("not within {patience:?}")));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Test patience, tunable for slow machines: `LOCK_TEST_PATIENCE_SECS` (default 30).
pub fn patience() -> Duration {
    let secs = std::env::var("LOCK_TEST_PATIENCE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    Duration::from_secs(secs)
}

/// Runs `cmd` to completion: whether it succeeded, and its stdout then stderr as text
/// (for assertions that show a tool's own words).
pub fn run_text(cmd: &mut std::process::Command) -> anyhow::Result<(bool, String)> {
    let out = cmd.output()?;
    Ok((
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    ))
}

/// A test's working folder: `keep` (created if missing, left in place), or a new temp
/// folder named `prefix...`, removed when the returned handle drops.
pub fn work_dir(
    keep: Option<&Path>,
    prefix: &str,
) -> std::io::Result<(Option<tempfile::TempDir>, PathBuf)> {
    match keep {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            Ok((None, d.to_path_buf()))
        }
        None => {
            let t = tempfile::Builder::new().prefix(prefix).tempdir()?;
            let p = t.path().to_path_buf();
            Ok((Some(t), p))
        }
    }
}

/// A process's resident set (VmRSS), in bytes.
pub fn rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
