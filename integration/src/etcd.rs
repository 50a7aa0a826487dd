//! A real etcd member (single-member cluster) on loopback in a temp data dir.

use crate::paths::dep;
use crate::process::{Proc, free_port, patience};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Etcd {
    pub proc: Proc,
    pub client_url: String,
    pub client_addr: SocketAddr,
    pub data_dir: PathBuf,
    /// Prometheus endpoint: etcd's own count of the RPCs it served.
    pub metrics_addr: SocketAddr,
}

impl Etcd {
    /// Starts a single-member cluster; waits until it answers.
    pub fn start(dir: &Path, name: &str) -> anyhow::Result<Self> {
        Self::start_on(dir, name, free_port()?, free_port()?)
    }

    pub fn start_on(
        dir: &Path,
        name: &str,
        client_port: u16,
        peer_port: u16,
    ) -> anyhow::Result<Self> {
        let client_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let data_dir = dir.join(format!("{name}.etcd"));
        let metrics_addr: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        let mut cmd = Command::new(dep("etcd")?);
        cmd.args(["--name", name])
            .arg("--data-dir")
            .arg(&data_dir)
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("{name}={peer_url}")])
            .args([
                "--initial-cluster-token",
                &format!("lock-{name}-{client_port}"),
            ])
            .args(["--initial-cluster-state", "new"])
            .args(["--listen-metrics-urls", &format!("http://{metrics_addr}")])
            .args(["--log-level", "warn"]);
        let mut proc = Proc::spawn(name, cmd, dir)?;
        let client_addr: SocketAddr = format!("127.0.0.1:{client_port}").parse()?;
        proc.wait_for_port(client_addr, patience())?;
        Ok(Self {
            proc,
            client_url,
            client_addr,
            data_dir,
            metrics_addr,
        })
    }

    /// How many KV RPCs of `method` (e.g. "Txn", "Range") this member has handled, from
    /// etcd's own gRPC metrics: an independent count of what the arbiters sent.
    pub fn rpc_count(&self, method: &str) -> anyhow::Result<u64> {
        let body = crate::admin_get(self.metrics_addr, "/metrics")?;
        let needle = format!("grpc_method=\"{method}\"");
        Ok(body
            .lines()
            .filter(|l| l.starts_with("grpc_server_handled_total{") && l.contains(&needle))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64)
    }

    pub async fn client(&self) -> anyhow::Result<etcd_client::Client> {
        let url = self.client_url.clone();
        crate::process::eventually(patience(), || {
            let url = url.clone();
            async move {
                let mut c = etcd_client::Client::connect([url], None).await?;
                c.get("/health-probe", None).await?;
                Ok(c)
            }
        })
        .await
    }
}
