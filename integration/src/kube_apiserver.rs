//! A real kube-apiserver on loopback, for the tests of what runs against Kubernetes (the
//! CRDs, the admission webhook, lock-registry-sync): its own etcd ([`Etcd::start`], TLS,
//! reached as etcd's `root`), a random port, a temp cert dir (the API server self-signs its
//! serving certificate there), a service-account signing key made with openssl, a static
//! admin token (group `system:masters`) and `--endpoint-reconciler-type=none` (with a
//! loopback advertise address the default reconciler exits at start). Waits for `/readyz`
//! (bounded), writes a kubeconfig that trusts the self-signed certificate, and stops both
//! processes on drop.
//!
//! The binary: `LOCK_KUBE_APISERVER`, else `.deps/bin/kube-apiserver` (the install script
//! builds it from the Go module proxy into the tool cache and links it there).

use crate::etcd::Etcd;
use crate::paths::dep;
use crate::process::{Proc, free_port, patience};
use anyhow::{Context as _, bail};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// kubectl: `LOCK_KUBECTL`, else the one on the PATH.
pub fn kubectl_binary() -> PathBuf {
    std::env::var_os("LOCK_KUBECTL")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("kubectl"))
}

/// The kube-apiserver binary.
pub fn binary() -> anyhow::Result<PathBuf> {
    match std::env::var_os("LOCK_KUBE_APISERVER") {
        Some(p) => Ok(PathBuf::from(p)),
        None => dep("kube-apiserver"),
    }
}

pub struct KubeApiserver {
    /// Declared first: stopped before its etcd.
    pub proc: Proc,
    pub etcd: Etcd,
    pub addr: SocketAddr,
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// The static admin token (in `system:masters`).
    pub token: String,
    /// A kubeconfig for the admin, trusting the API server's self-signed certificate.
    pub kubeconfig: PathBuf,
    pub dir: PathBuf,
}

impl KubeApiserver {
    /// Starts etcd and kube-apiserver under `dir`; returns once `/readyz` says ok.
    pub fn start(dir: &Path) -> anyhow::Result<Self> {
        let dir = dir.join("kube-apiserver");
        std::fs::create_dir_all(&dir)?;
        let etcd = Etcd::start(&dir, "kube-etcd").context("etcd for kube-apiserver")?;
        let key = dir.join("sa.key");
        let public = dir.join("sa.pub");
        let openssl = |args: &[&str], out: &Path| -> anyhow::Result<()> {
            let (ok, text) = crate::process::run_text(Command::new("openssl").args(args).arg(out))
                .context("openssl (the service-account signing key)")?;
            if !ok {
                bail!("openssl {}: {text}", args[0]);
            }
            Ok(())
        };
        let ec = ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"];
        openssl(&[&["genpkey"][..], &ec, &["-out"]].concat(), &key)?;
        openssl(
            &["pkey", "-pubout", "-in", &key.display().to_string(), "-out"],
            &public,
        )?;
        let token = format!("{:032x}", rand::random::<u128>());
        std::fs::write(
            dir.join("tokens.csv"),
            format!("{token},admin,admin,system:masters\n"),
        )?;
        // A port picked free can be taken before the API server binds it: start again on
        // another, at most three times.
        let mut etcd = etcd;
        let mut tries = 0;
        loop {
            let port = free_port()?;
            let proc = Self::spawn(&dir, &etcd, &key, port)?;
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let mut s = Self {
                proc,
                etcd,
                addr,
                url: format!("https://{addr}"),
                token: token.clone(),
                kubeconfig: dir.join("kubeconfig"),
                dir: dir.clone(),
            };
            match s.until_ready(patience().max(Duration::from_secs(60))) {
                Ok(()) => return Ok(s),
                Err(e) if tries < 3 && s.proc.log_text().contains("address already in use") => {
                    tries += 1;
                    eprintln!("kube-apiserver: port {port} taken, starting on another ({e:#})");
                    let Self {
                        mut proc,
                        etcd: back,
                        ..
                    } = s;
                    proc.kill();
                    etcd = back;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn spawn(dir: &Path, etcd: &Etcd, key: &Path, port: u16) -> anyhow::Result<Proc> {
        let pki = &etcd.pki;
        let mut cmd = Command::new(binary()?);
        cmd.args(["--etcd-servers", &etcd.client_url])
            .arg("--etcd-cafile")
            .arg(pki.ca())
            .arg("--etcd-certfile")
            .arg(pki.cert("root"))
            .arg("--etcd-keyfile")
            .arg(pki.key("root"))
            .args(["--bind-address", "127.0.0.1"])
            .args(["--advertise-address", "127.0.0.1"])
            .args(["--secure-port", &port.to_string()])
            .arg("--cert-dir")
            .arg(dir.join("certs"))
            .arg("--token-auth-file")
            .arg(dir.join("tokens.csv"))
            .args(["--authorization-mode", "RBAC"])
            .args(["--service-account-issuer", "https://kubernetes.default.svc"])
            .arg("--service-account-key-file")
            .arg(key.with_extension("pub"))
            .arg("--service-account-signing-key-file")
            .arg(key)
            .args(["--service-cluster-ip-range", "10.0.0.0/24"])
            .arg("--enable-priority-and-fairness=false")
            .arg("--endpoint-reconciler-type=none");
        Proc::spawn("kube-apiserver", cmd, dir)
    }

    /// The API server's self-signed serving certificate (and its CA), as `--cert-dir` holds it.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("certs/apiserver.crt")
    }

    fn write_kubeconfig(&self) -> anyhow::Result<()> {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: admin\n  user:\n    token: {}\ncontexts:\n- name: local\n  context: {{cluster: local, user: admin, namespace: default}}\ncurrent-context: local\n",
            self.url,
            self.ca_file().display(),
            self.token
        );
        crate::paths::write_atomic(&self.kubeconfig, &text)
    }

    /// Waits for the serving certificate, writes the kubeconfig, then waits for `/readyz`.
    fn until_ready(&mut self, patience: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + patience;
        let mut last = String::new();
        loop {
            self.proc.check_running()?;
            if self.ca_file().exists() {
                self.write_kubeconfig()?;
                let (ok, out) = crate::process::run_text(self.kubectl().args([
                    "get",
                    "--raw",
                    "/readyz",
                    "--request-timeout=2s",
                ]))?;
                if ok && out.trim() == "ok" {
                    return Ok(());
                }
                last = out;
            }
            if Instant::now() > deadline {
                bail!(
                    "kube-apiserver not ready within {patience:?}: {last}\nlog: {}",
                    self.proc.log.display()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// kubectl for this API server (the admin kubeconfig).
    pub fn kubectl(&self) -> Command {
        let mut c = Command::new(kubectl_binary());
        c.arg("--kubeconfig").arg(&self.kubeconfig);
        c
    }

    /// kubectl `args`: Ok(output) if it succeeded, Err(output) if not.
    pub fn kubectl_run(&self, args: &[&str]) -> Result<String, String> {
        match crate::process::run_text(self.kubectl().args(args)) {
            Ok((true, out)) => Ok(out),
            Ok((false, out)) => Err(out),
            Err(e) => Err(format!("kubectl: {e}")),
        }
    }

    /// `kubectl apply -f -` of `yaml`: Ok(output) if it succeeded, Err(output) if not.
    pub fn apply(&self, yaml: &str) -> Result<String, String> {
        self.stdin(&["apply", "-f", "-"], yaml)
    }

    /// kubectl `args` with `input` on stdin.
    pub fn stdin(&self, args: &[&str], input: &str) -> Result<String, String> {
        use std::io::Write as _;
        use std::process::Stdio;
        let child = self
            .kubectl()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) => return Err(format!("kubectl: {e}")),
        };
        if let Some(mut i) = child.stdin.take() {
            let _ = i.write_all(input.as_bytes());
        }
        match child.wait_with_output() {
            Ok(o) => {
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
                if o.status.success() {
                    Ok(text)
                } else {
                    Err(text)
                }
            }
            Err(e) => Err(format!("kubectl: {e}")),
        }
    }
}
