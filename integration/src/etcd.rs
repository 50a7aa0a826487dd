//! A real etcd member (single-member cluster) on loopback in a temp data dir.

use crate::paths::dep;
use crate::process::{Proc, free_port, patience};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Etcd {
    pub proc: Proc,
    pub name: String,
    pub client_url: String,
    pub client_addr: SocketAddr,
    pub peer_url: String,
    pub cluster_token: String,
    pub data_dir: PathBuf,
    /// Prometheus endpoint: etcd's own count of the RPCs it served.
    pub metrics_addr: SocketAddr,
    log_dir: PathBuf,
}

impl Etcd {
    /// Starts a single-member cluster; waits until it accepts connections.
    pub fn start(dir: &Path, name: &str) -> anyhow::Result<Self> {
        let client_port = free_port()?;
        let peer_port = free_port()?;
        let client_url = format!("http://127.0.0.1:{client_port}");
        let mut etcd = Self {
            proc: Proc::placeholder(name, dir),
            name: name.to_owned(),
            client_addr: format!("127.0.0.1:{client_port}").parse()?,
            client_url,
            peer_url: format!("http://127.0.0.1:{peer_port}"),
            cluster_token: format!("lock-{name}-{client_port}"),
            data_dir: dir.join(format!("{name}.etcd")),
            metrics_addr: format!("127.0.0.1:{}", free_port()?).parse()?,
            log_dir: dir.to_path_buf(),
        };
        let data_dir = etcd.data_dir.clone();
        etcd.run_on(&data_dir)?;
        Ok(etcd)
    }

    /// `name=peer_url`, the single-member --initial-cluster.
    pub fn initial_cluster(&self) -> String {
        format!("{}={}", self.name, self.peer_url)
    }

    /// SIGKILL the member (the data dir stays).
    pub fn kill(&mut self) {
        self.proc.kill();
    }

    /// (Re)starts the member on the same ports with `data_dir`; an existing data dir keeps
    /// its cluster and ignores the --initial-* flags, as etcd does.
    pub fn run_on(&mut self, data_dir: &Path) -> anyhow::Result<()> {
        self.proc.kill();
        let mut cmd = Command::new(dep("etcd")?);
        cmd.args(["--name", &self.name])
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--listen-client-urls", &self.client_url])
            .args(["--advertise-client-urls", &self.client_url])
            .args(["--listen-peer-urls", &self.peer_url])
            .args(["--initial-advertise-peer-urls", &self.peer_url])
            .args(["--initial-cluster", &self.initial_cluster()])
            .args(["--initial-cluster-token", &self.cluster_token])
            .args(["--initial-cluster-state", "new"])
            .args([
                "--listen-metrics-urls",
                &format!("http://{}", self.metrics_addr),
            ])
            .args(["--log-level", "warn"]);
        self.proc = Proc::spawn(&self.name, cmd, &self.log_dir)?;
        self.data_dir = data_dir.to_path_buf();
        self.proc.wait_for_port(self.client_addr, patience())
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

    /// The cluster ID this member reports, as etcdctl prints it (hex).
    pub async fn cluster_id(&self) -> anyhow::Result<String> {
        let mut c = self.client().await?;
        let r = c.get("/health-probe", None).await?;
        Ok(format!("{:x}", r.header().map_or(0, |h| h.cluster_id())))
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
}
