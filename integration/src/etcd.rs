//! A real etcd member (single-member cluster) on loopback in a temp data dir.

use crate::netlab::NetLab;
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
    /// `--initial-cluster`: every member's `name=peer_url`.
    pub initial_cluster: String,
    pub data_dir: PathBuf,
    /// Prometheus endpoint: etcd's own count of the RPCs it served.
    pub metrics_addr: SocketAddr,
    log_dir: PathBuf,
    extra: Vec<String>,
    /// The network namespace the member runs in (None: the test's own, on loopback).
    netns: Option<String>,
}

/// Where a member listens.
struct Placement {
    ip: std::net::IpAddr,
    netns: Option<String>,
    ports: [u16; 3],
}

impl Etcd {
    /// Starts a single-member cluster; waits until it accepts connections.
    pub fn start(dir: &Path, name: &str) -> anyhow::Result<Self> {
        Ok(Self::start_cluster(dir, name, 1)?.remove(0))
    }

    /// Starts an `n`-member cluster on loopback (members `<prefix>0..n`).
    pub fn start_cluster(dir: &Path, prefix: &str, n: usize) -> anyhow::Result<Vec<Self>> {
        Self::start_cluster_with(dir, prefix, n, &[])
    }

    /// As [`Etcd::start_cluster`], with extra flags for every member.
    pub fn start_cluster_with(
        dir: &Path,
        prefix: &str,
        n: usize,
        extra: &[String],
    ) -> anyhow::Result<Vec<Self>> {
        let mut places = Vec::with_capacity(n);
        for _ in 0..n {
            places.push(Placement {
                ip: std::net::Ipv4Addr::LOCALHOST.into(),
                netns: None,
                ports: [free_port()?, free_port()?, free_port()?],
            });
        }
        Self::start_placed(dir, prefix, places, extra)
    }

    /// An `n`-member cluster with member `i` alone in `lab`'s namespace `i`, so links
    /// between members can be cut ([`NetLab::isolate`]).
    pub fn start_cluster_in(
        dir: &Path,
        prefix: &str,
        lab: &NetLab,
        n: usize,
        extra: &[String],
    ) -> anyhow::Result<Vec<Self>> {
        let places = (0..n)
            .map(|i| Placement {
                ip: lab.host(i).into(),
                netns: Some(lab.namespace(i)),
                ports: [2379, 2380, 2381],
            })
            .collect();
        Self::start_placed(dir, prefix, places, extra)
    }

    fn start_placed(
        dir: &Path,
        prefix: &str,
        places: Vec<Placement>,
        extra: &[String],
    ) -> anyhow::Result<Vec<Self>> {
        let n = places.len();
        let token = format!("lock-{prefix}-{}", free_port()?);
        let mut members = Vec::with_capacity(n);
        for (i, place) in places.into_iter().enumerate() {
            let name = if n == 1 {
                prefix.to_owned()
            } else {
                format!("{prefix}{i}")
            };
            let at = |port: u16| SocketAddr::new(place.ip, port);
            let [client, peer, metrics] = place.ports;
            members.push(Self {
                proc: Proc::placeholder(&name, dir),
                client_addr: at(client),
                client_url: format!("http://{}", at(client)),
                peer_url: format!("http://{}", at(peer)),
                cluster_token: token.clone(),
                initial_cluster: String::new(),
                data_dir: dir.join(format!("{name}.etcd")),
                metrics_addr: at(metrics),
                log_dir: dir.to_path_buf(),
                extra: extra.to_vec(),
                netns: place.netns,
                name,
            });
        }
        let cluster: Vec<String> = members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url))
            .collect();
        for m in &mut members {
            m.initial_cluster = cluster.join(",");
            let data_dir = m.data_dir.clone();
            m.spawn_on(&data_dir)?;
        }
        for m in &mut members {
            m.proc.wait_for_port(m.client_addr, patience())?;
        }
        Ok(members)
    }

    /// The --initial-cluster this member was started with.
    pub fn initial_cluster(&self) -> String {
        self.initial_cluster.clone()
    }

    /// SIGKILL the member (the data dir stays).
    pub fn kill(&mut self) {
        self.proc.kill();
    }

    /// This member's raft ID and the leader it currently follows (0: none), from its
    /// own status endpoint.
    pub async fn status(&self) -> anyhow::Result<(u64, u64)> {
        let mut c = etcd_client::Client::connect(
            [self.client_url.clone()],
            Some(
                etcd_client::ConnectOptions::new()
                    .with_connect_timeout(std::time::Duration::from_secs(1))
                    .with_timeout(std::time::Duration::from_secs(2)),
            ),
        )
        .await?;
        let s = c.status().await?;
        Ok((s.header().map_or(0, |h| h.member_id()), s.leader()))
    }

    /// (Re)starts the member on the same ports with `data_dir`; an existing data dir keeps
    /// its cluster and ignores the --initial-* flags, as etcd does.
    pub fn run_on(&mut self, data_dir: &Path) -> anyhow::Result<()> {
        self.spawn_on(data_dir)?;
        self.proc.wait_for_port(self.client_addr, patience())
    }

    fn spawn_on(&mut self, data_dir: &Path) -> anyhow::Result<()> {
        self.proc.kill();
        // `ip netns exec` execs etcd in place: the pid signalled is etcd's.
        let mut cmd = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(dep("etcd")?);
                c
            }
            None => Command::new(dep("etcd")?),
        };
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
            .args(["--log-level", "warn"])
            .args(&self.extra);
        self.proc = Proc::spawn(&self.name, cmd, &self.log_dir)?;
        self.data_dir = data_dir.to_path_buf();
        Ok(())
    }

    /// Restarts a killed member on its own data dir.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        let data_dir = self.data_dir.clone();
        self.run_on(&data_dir)
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
        self.metric_sum("grpc_server_handled_total", method)
    }

    /// Stream messages received for `method` (e.g. "LeaseKeepAlive": one per renewal).
    pub fn stream_messages(&self, method: &str) -> anyhow::Result<u64> {
        self.metric_sum("grpc_server_msg_received_total", method)
    }

    /// Streams started for `method` (e.g. "LeaseKeepAlive": one per etcd keepalive stream).
    pub fn streams_started(&self, method: &str) -> anyhow::Result<u64> {
        self.metric_sum("grpc_server_started_total", method)
    }

    /// A metric without labels (or the sum over its labels), e.g.
    /// `etcd_server_proposals_committed_total`.
    pub fn metric(&self, metric: &str) -> anyhow::Result<u64> {
        let body = crate::admin_get(self.metrics_addr, "/metrics")?;
        Ok(body
            .lines()
            .filter(|l| {
                l.starts_with(&format!("{metric} ")) || l.starts_with(&format!("{metric}{{"))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64)
    }

    fn metric_sum(&self, metric: &str, method: &str) -> anyhow::Result<u64> {
        let body = crate::admin_get(self.metrics_addr, "/metrics")?;
        let needle = format!("grpc_method=\"{method}\"");
        Ok(body
            .lines()
            .filter(|l| l.starts_with(&format!("{metric}{{")) && l.contains(&needle))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64)
    }
}
