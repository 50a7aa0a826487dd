//! A real etcd member (single-member cluster) on loopback in a temp data dir, secured as
//! in production: clients and peers over TLS with certificates from etcd's own CA, client
//! certificates required, auth enabled with the service's users and roles
//! (`lock_store::etcd_roles`, applied as `lockctl roles apply` does). Tests reach it as
//! `root` through [`Etcd::client`]; arbiters and lockctl get their own users' certificates.

use crate::netlab::NetLab;
use crate::paths::{EtcdLine, etcd_tool};
use crate::process::{Proc, free_port, patience};
use lock_devca::{DevCa, Leaf};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

/// The etcd users there are certificates for (CN = user); `stranger` is no etcd user.
pub const USERS: [&str; 6] = [
    "root", "arbiter", "operator", "auditor", "force", "stranger",
];

/// etcd's own PKI for one cluster: a CA (not the SPIFFE trust domain's), one member
/// certificate for serving clients and peers (IP SANs of every member, no CN, so the JSON
/// gateway, which dials etcd with it, is no user), and a client certificate per user.
pub struct EtcdPki {
    pub dir: PathBuf,
}

impl EtcdPki {
    pub fn create(dir: &Path, ips: &[IpAddr]) -> anyhow::Result<Self> {
        let ca = DevCa::create_plain("lock dev etcd CA")?;
        ca.save(dir)?;
        let mut member = Leaf::plain().with_dns("localhost");
        for ip in ips {
            member = member.with_ip(*ip);
        }
        ca.issue(&member)?.save(dir, "member")?;
        for user in USERS {
            ca.issue(&Leaf::plain().with_common_name(user))?
                .save(dir, user)?;
        }
        // A client certificate with a CN etcd knows, signed by another CA.
        DevCa::create_plain("not etcd's CA")?
            .issue(&Leaf::plain().with_common_name("root"))?
            .save(dir, "foreign-root")?;
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    pub fn ca(&self) -> PathBuf {
        self.dir.join(lock_devca::CA_CERT_FILE)
    }

    pub fn cert(&self, user: &str) -> PathBuf {
        self.dir.join(format!("{user}.pem"))
    }

    pub fn key(&self, user: &str) -> PathBuf {
        self.dir.join(format!("{user}.key"))
    }

    /// The credential files for `user`, as the arbiter and lockctl take them.
    pub fn files(&self, user: &str) -> lock_store::etcd_tls::EtcdTlsFiles {
        lock_store::etcd_tls::EtcdTlsFiles {
            ca: Some(self.ca()),
            cert: Some(self.cert(user)),
            key: Some(self.key(user)),
        }
    }

    /// etcd-client TLS options for `user`.
    pub fn tls(&self, user: &str) -> anyhow::Result<etcd_client::TlsOptions> {
        Ok(etcd_client::TlsOptions::new()
            .ca_certificate(etcd_client::Certificate::from_pem(std::fs::read(
                self.ca(),
            )?))
            .identity(etcd_client::Identity::from_pem(
                std::fs::read(self.cert(user))?,
                std::fs::read(self.key(user))?,
            )))
    }

    /// lockctl's environment for `user` (`LOCK_ETCD_CA`, `LOCK_ETCD_CERT`, `LOCK_ETCD_KEY`).
    pub fn lockctl_env(&self, user: &str) -> Vec<(String, String)> {
        vec![
            ("LOCK_ETCD_CA".into(), self.ca().display().to_string()),
            (
                "LOCK_ETCD_CERT".into(),
                self.cert(user).display().to_string(),
            ),
            ("LOCK_ETCD_KEY".into(), self.key(user).display().to_string()),
        ]
    }

    /// The arbiter's flags for its own etcd user.
    pub fn arbiter_args(&self) -> Vec<String> {
        vec![
            "--etcd-ca".into(),
            self.ca().display().to_string(),
            "--etcd-cert".into(),
            self.cert("arbiter").display().to_string(),
            "--etcd-key".into(),
            self.key("arbiter").display().to_string(),
        ]
    }

    /// etcdctl's flags for `user`.
    pub fn etcdctl_args(&self, user: &str) -> Vec<String> {
        vec![
            format!("--cacert={}", self.ca().display()),
            format!("--cert={}", self.cert(user).display()),
            format!("--key={}", self.key(user).display()),
        ]
    }
}

/// How a cluster is secured: always TLS with client certificates; `Roles` also enables
/// auth with the service's users and roles (production), `TlsOnly` leaves auth off (the
/// layer switched off, for the test that shows the roles are what refuses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Security {
    #[default]
    Roles,
    TlsOnly,
}

/// Where clients reach a cluster: its client URLs and PKI.
#[derive(Clone)]
pub struct Access {
    pub urls: String,
    pub pki: Arc<EtcdPki>,
}

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
    /// The cluster's certificates (shared by its members).
    pub pki: Arc<EtcdPki>,
    log_dir: PathBuf,
    extra: Vec<String>,
    /// The network namespace the member runs in (None: the test's own, on loopback).
    netns: Option<String>,
    /// The etcd release line the member runs (`LOCK_ETCD_LINE`, or a test's own choice).
    pub line: EtcdLine,
}

/// Where a member listens.
struct Placement {
    ip: std::net::IpAddr,
    netns: Option<String>,
    ports: [u16; 3],
}

/// Member `i` of an `n`-member cluster named `prefix`: the prefix itself when alone.
fn member_name(prefix: &str, n: usize, i: usize) -> String {
    if n == 1 {
        prefix.to_owned()
    } else {
        format!("{prefix}{i}")
    }
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
        Self::start_secured(dir, prefix, n, extra, Security::Roles)
    }

    /// As [`Etcd::start_cluster_with`], secured as `security` says.
    pub fn start_secured(
        dir: &Path,
        prefix: &str,
        n: usize,
        extra: &[String],
        security: Security,
    ) -> anyhow::Result<Vec<Self>> {
        Self::on_free_ports(dir, prefix, n, extra, security, None, EtcdLine::current())
    }

    /// An `n`-member cluster on loopback running etcd `line`, whatever `LOCK_ETCD_LINE` says
    /// (a test that compares the lines).
    pub fn start_cluster_on(
        dir: &Path,
        prefix: &str,
        n: usize,
        line: EtcdLine,
    ) -> anyhow::Result<Vec<Self>> {
        Self::on_free_ports(dir, prefix, n, &[], Security::Roles, None, line)
    }

    /// `n` members on loopback ports picked free. A port picked free can be taken by
    /// another process before etcd binds it (seen in `make test`: "bind: address already
    /// in use"): then the cluster starts again on fresh ports, at most three times.
    fn on_free_ports(
        dir: &Path,
        prefix: &str,
        n: usize,
        extra: &[String],
        security: Security,
        shared: Option<Arc<EtcdPki>>,
        line: EtcdLine,
    ) -> anyhow::Result<Vec<Self>> {
        let mut tries = 0;
        loop {
            let ports = crate::process::free_ports(3 * n)?;
            let places = ports
                .chunks(3)
                .map(|p| Placement {
                    ip: std::net::Ipv4Addr::LOCALHOST.into(),
                    netns: None,
                    ports: [p[0], p[1], p[2]],
                })
                .collect();
            match Self::start_placed_with(
                dir,
                prefix,
                places,
                extra,
                security,
                shared.clone(),
                line,
            ) {
                Err(e) if tries < 3 && format!("{e:#}").contains("address already in use") => {
                    tries += 1;
                    // The members that started were stopped with the error; a data
                    // directory bootstrapped for the old ports would refuse the new ones.
                    for i in 0..n {
                        let name = member_name(prefix, n, i);
                        let _ = std::fs::remove_dir_all(dir.join(format!("{name}.etcd")));
                    }
                }
                started => return started,
            }
        }
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
        Self::start_placed(dir, prefix, places, extra, Security::Roles)
    }

    /// A single-member cluster on loopback with another cluster's certificates (`pki`),
    /// so one etcd credential reaches both: the coord cluster and its entity shards.
    pub fn start_sharing(dir: &Path, name: &str, pki: Arc<EtcdPki>) -> anyhow::Result<Self> {
        Ok(Self::on_free_ports(
            dir,
            name,
            1,
            &[],
            Security::Roles,
            Some(pki),
            EtcdLine::current(),
        )?
        .remove(0))
    }

    fn start_placed(
        dir: &Path,
        prefix: &str,
        places: Vec<Placement>,
        extra: &[String],
        security: Security,
    ) -> anyhow::Result<Vec<Self>> {
        Self::start_placed_with(
            dir,
            prefix,
            places,
            extra,
            security,
            None,
            EtcdLine::current(),
        )
    }

    fn start_placed_with(
        dir: &Path,
        prefix: &str,
        places: Vec<Placement>,
        extra: &[String],
        security: Security,
        shared: Option<Arc<EtcdPki>>,
        line: EtcdLine,
    ) -> anyhow::Result<Vec<Self>> {
        let n = places.len();
        let token = format!("lock-{prefix}-{}", free_port()?);
        let mut ips: Vec<IpAddr> = places.iter().map(|p| p.ip).collect();
        ips.push(std::net::Ipv4Addr::LOCALHOST.into());
        let pki = match shared {
            Some(pki) => pki,
            None => Arc::new(EtcdPki::create(&dir.join(format!("{prefix}-pki")), &ips)?),
        };
        let mut members = Vec::with_capacity(n);
        for (i, place) in places.into_iter().enumerate() {
            let name = member_name(prefix, n, i);
            let at = |port: u16| SocketAddr::new(place.ip, port);
            let [client, peer, metrics] = place.ports;
            members.push(Self {
                proc: Proc::placeholder(&name, dir),
                client_addr: at(client),
                client_url: format!("https://{}", at(client)),
                peer_url: format!("https://{}", at(peer)),
                pki: pki.clone(),
                cluster_token: token.clone(),
                initial_cluster: String::new(),
                data_dir: dir.join(format!("{name}.etcd")),
                metrics_addr: at(metrics),
                log_dir: dir.to_path_buf(),
                extra: extra.to_vec(),
                netns: place.netns,
                line,
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
        if security == Security::Roles {
            let urls: Vec<String> = members.iter().map(|m| m.client_url.clone()).collect();
            if let Err(e) = enable_roles(&urls, &pki) {
                // Say which member is down and why (its log), not only the last refusal.
                let states: Vec<String> = members
                    .iter_mut()
                    .map(|m| match m.proc.check_running() {
                        Ok(()) => format!("{} running", m.name),
                        Err(down) => down.to_string(),
                    })
                    .collect();
                anyhow::bail!("enabling etcd roles: {e:#}\n{}", states.join("\n"));
            }
        }
        Ok(members)
    }

    /// Where clients reach this member's cluster.
    pub fn access(&self, urls: &str) -> Access {
        Access {
            urls: urls.to_owned(),
            pki: self.pki.clone(),
        }
    }

    /// A client of this member as `user` (no retries: a refusal is the answer).
    pub async fn client_as(&self, user: &str) -> anyhow::Result<etcd_client::Client> {
        Ok(etcd_client::Client::connect(
            [self.client_url.clone()],
            Some(
                etcd_client::ConnectOptions::new()
                    .with_connect_timeout(std::time::Duration::from_secs(2))
                    .with_timeout(std::time::Duration::from_secs(5))
                    .with_tls(self.pki.tls(user)?),
            ),
        )
        .await?)
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
                    .with_timeout(std::time::Duration::from_secs(2))
                    .with_tls(self.pki.tls("root")?),
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
                c.args(["netns", "exec", ns])
                    .arg(etcd_tool(self.line, "etcd")?);
                c
            }
            None => Command::new(etcd_tool(self.line, "etcd")?),
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
            .arg("--client-cert-auth")
            .arg("--trusted-ca-file")
            .arg(self.pki.ca())
            .arg("--cert-file")
            .arg(self.pki.cert("member"))
            .arg("--key-file")
            .arg(self.pki.key("member"))
            .arg("--peer-client-cert-auth")
            .arg("--peer-trusted-ca-file")
            .arg(self.pki.ca())
            .arg("--peer-cert-file")
            .arg(self.pki.cert("member"))
            .arg("--peer-key-file")
            .arg(self.pki.key("member"))
            .args(["--log-level", "warn"])
            // As the chart runs it: lease checkpoints on, by the flags of the line that runs.
            .args(self.line.checkpoint_flags())
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

    /// A client as `root` (tests see and do everything), once the member answers.
    pub async fn client(&self) -> anyhow::Result<etcd_client::Client> {
        let url = self.client_url.clone();
        let tls = self.pki.tls("root")?;
        crate::process::eventually(patience(), || {
            let url = url.clone();
            let tls = tls.clone();
            async move {
                let opts = etcd_client::ConnectOptions::new().with_tls(tls);
                let mut c = etcd_client::Client::connect([url], Some(opts)).await?;
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

    /// This member's whole Prometheus exposition (`/metrics`).
    pub fn metrics_text(&self) -> anyhow::Result<String> {
        crate::admin_get(self.metrics_addr, "/metrics")
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

/// Creates the service's users and roles and enables auth, as `lockctl roles apply` does
/// (the same plan), with the root user's certificate. Retried until the cluster answers
/// (a new cluster may still be electing its leader). On its own thread and runtime: the
/// members are started from synchronous code.
fn enable_roles(urls: &[String], pki: &EtcdPki) -> anyhow::Result<()> {
    use lock_store::etcd_roles;
    let urls = urls.to_vec();
    let tls = pki.tls("root")?;
    let apply = move || -> anyhow::Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let attempt = std::sync::atomic::AtomicUsize::new(0);
        rt.block_on(crate::process::eventually(patience(), || {
            // One member per attempt, in turn: a member still starting cannot hold up the
            // others (etcd forwards the writes to the leader).
            let i = attempt.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let url = urls[i % urls.len()].clone();
            let tls = tls.clone();
            async move {
                let opts = etcd_client::ConnectOptions::new()
                    .with_connect_timeout(std::time::Duration::from_secs(2))
                    .with_timeout(std::time::Duration::from_secs(5))
                    .with_tls(tls);
                let client = etcd_client::Client::connect([url], Some(opts)).await?;
                let mut auth = client.auth_client();
                let current = etcd_roles::read(&mut auth).await?;
                let changes = etcd_roles::plan(&current, etcd_roles::ROLES, etcd_roles::USERS);
                etcd_roles::apply(&mut auth, &changes).await?;
                Ok(())
            }
        }))
    };
    std::thread::spawn(apply)
        .join()
        .map_err(|_| anyhow::anyhow!("enabling etcd roles panicked"))?
}
