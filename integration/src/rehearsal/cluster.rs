//! The pods together: one network namespace each on one bridge, init containers first,
//! probes checked against the running pods, Jobs run to their exit code, a pod killed as
//! a lost node would lose it. Every wait is bounded; everything is torn down on drop.

use super::objects::{ContainerPlan, Objects, PodPlan, Probe};
use super::runc::{Container, ImageStore, Place, write_bundle, write_volumes};
use crate::images::Built;
use crate::netlab::NetLab;
use anyhow::{Context as _, bail};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub struct RunningPod {
    pub plan: PodPlan,
    pub ip: Ipv4Addr,
    pub containers: Vec<ContainerPlan>,
    running: Vec<Container>,
}

impl RunningPod {
    /// Every container's log, headed by its name.
    pub fn logs(&self) -> String {
        self.running
            .iter()
            .map(|c| format!("--- {} / {}\n{}", self.plan.name, c.name, c.log_text()))
            .collect()
    }
}

/// Numbers the clusters of one test process: container ids must differ between two
/// rehearsals running side by side.
static NEXT_CLUSTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

pub struct Cluster {
    pub objects: Objects,
    /// `rh<pid>x<n>`: the prefix of every container id of this cluster.
    tag: String,
    /// The cluster DNS (dnsmasq over the cluster's names, in a namespace of its own):
    /// a Service's name answers every pod it selects, as kube-dns does.
    dns: std::process::Child,
    resolv_conf: PathBuf,
    plans: Vec<(PodPlan, Ipv4Addr, String)>,
    pods: Vec<RunningPod>,
    store: ImageStore,
    hosts_file: PathBuf,
    dir: PathBuf,
    // Dropped after the pods (fields drop in order): the namespaces outlive the containers.
    _lab: NetLab,
    _tmp: tempfile::TempDir,
}

impl Cluster {
    /// Plans every pod of `objects` (and one run of each CronJob in `cron_jobs`), gives
    /// each a network namespace, and checks every Service reaches a container port.
    /// Nothing runs yet.
    pub fn new(
        objects: Objects,
        built: Built,
        namespace: &str,
        cron_jobs: &[&str],
    ) -> anyhow::Result<Self> {
        let mut plans = objects.pods(namespace)?;
        for name in cron_jobs {
            plans.push(objects.cron_job(name, namespace)?);
        }
        objects.check_services(&plans)?;
        let tmp = tempfile::Builder::new().prefix("rehearsal").tempdir()?;
        let dir = tmp.path().to_path_buf();
        // One namespace per pod, and the last for the DNS server.
        let lab = NetLab::create(plans.len() + 1)?;
        let placed: Vec<(PodPlan, Ipv4Addr, String)> = plans
            .into_iter()
            .enumerate()
            .map(|(i, p)| (p, lab.host(i), lab.namespace(i)))
            .collect();
        let pairs: Vec<(PodPlan, Ipv4Addr)> =
            placed.iter().map(|(p, ip, _)| (p.clone(), *ip)).collect();
        let hosts_file = dir.join("hosts");
        std::fs::write(&hosts_file, objects.hosts(&pairs))?;
        let dns_ip = lab.host(placed.len());
        let dns = std::process::Command::new("ip")
            .args(["netns", "exec", &lab.namespace(placed.len()), "dnsmasq"])
            // Every name is local: an unknown one is NXDOMAIN (as kube-dns answers), so a
            // resolver walking its search domains goes on to the next; REFUSED would stop it.
            .args([
                "--keep-in-foreground",
                "--no-resolv",
                "--no-hosts",
                "--bind-interfaces",
                "--local=/#/",
            ])
            .arg(format!("--addn-hosts={}", hosts_file.display()))
            .arg(format!("--listen-address={dns_ip}"))
            .arg(format!("--pid-file={}", dir.join("dnsmasq.pid").display()))
            .arg("--log-facility=-")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.join("dnsmasq.log"))?)
            .spawn()
            .context("dnsmasq (install-deps.sh installs dnsmasq-base)")?;
        let resolv_conf = dir.join("resolv.conf");
        std::fs::write(
            &resolv_conf,
            format!(
                "nameserver {dns_ip}\nsearch {namespace}.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"
            ),
        )?;
        std::fs::create_dir_all(dir.join("images"))?;
        let n = NEXT_CLUSTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Self {
            tag: format!("rh{}x{n}", std::process::id()),
            dns,
            resolv_conf,
            store: ImageStore::new(built, &dir.join("images")),
            objects,
            plans: placed,
            pods: Vec::new(),
            hosts_file,
            dir,
            _lab: lab,
            _tmp: tmp,
        })
    }

    /// The /etc/hosts every pod sees: a command run with it bind-mounted over the host's
    /// (`unshare --mount`) reaches pods and Services by name, as a pod would.
    pub fn hosts_file(&self) -> &std::path::Path {
        &self.hosts_file
    }

    /// The planned pods' names, in order.
    pub fn planned(&self) -> Vec<&PodPlan> {
        self.plans.iter().map(|(p, _, _)| p).collect()
    }

    pub fn ip(&self, pod: &str) -> Option<Ipv4Addr> {
        self.plans
            .iter()
            .find(|(p, _, _)| p.name == pod)
            .map(|(_, ip, _)| *ip)
    }

    pub fn pod(&self, name: &str) -> Option<&RunningPod> {
        self.pods.iter().find(|p| p.plan.name == name)
    }

    /// Starts the pod `name`: its init containers one by one, each to a zero exit within
    /// `patience`, then its containers. A Job's pod is also run to its end (see
    /// [`Self::wait_done`]).
    pub fn start(&mut self, name: &str, patience: Duration) -> anyhow::Result<()> {
        let (plan, ip, netns) = self
            .plans
            .iter()
            .find(|(p, _, _)| p.name == name)
            .cloned()
            .with_context(|| format!("no pod {name} is planned"))?;
        let (init, main) = self.objects.containers(&plan, ip)?;
        let volumes = self.objects.volumes(&plan)?;
        let pod_dir = self.dir.join("pods").join(&plan.name);
        std::fs::create_dir_all(&pod_dir)?;
        let hosts = pod_dir.join("hosts");
        std::fs::write(&hosts, Objects::pod_hosts(&plan, ip))?;
        let fs_group = plan.spec["securityContext"]["fsGroup"]
            .as_u64()
            .map(|g| g as u32);
        let volume_dirs = write_volumes(
            &pod_dir.join("volumes"),
            &volumes,
            fs_group,
            &mut self.store,
        )?;
        let mut running = Vec::new();
        for (phase, list) in [("init", &init), ("main", &main)] {
            for c in list {
                let image_bundle = self
                    .store
                    .bundle(&c.image)
                    .with_context(|| format!("pod {name} container {}", c.name))?;
                let id = format!("{}-{}-{}", self.tag, plan.name, c.name);
                let bundle = pod_dir.join("bundles").join(&c.name);
                write_bundle(
                    c,
                    &Place {
                        id: &id,
                        hostname: &plan.name,
                        netns: &netns,
                        hosts_file: &hosts,
                        resolv_conf: &self.resolv_conf,
                        volumes: &volume_dirs,
                        image_bundle: &image_bundle,
                        bundle: &bundle,
                    },
                )?;
                let log = pod_dir.join(format!("{}.log", c.name));
                let mut container = Container::start(&id, &c.name, &bundle, &log)?;
                if phase == "init" {
                    let deadline = Instant::now() + patience;
                    let status = loop {
                        if let Some(s) = container.exited() {
                            break s;
                        }
                        if Instant::now() > deadline {
                            container.kill();
                            bail!(
                                "pod {name}: init container {} did not end in {patience:?}:\n{}",
                                c.name,
                                container.log_text()
                            );
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    };
                    if !status.success() {
                        bail!(
                            "pod {name}: init container {} failed ({status}):\n{}",
                            c.name,
                            container.log_text()
                        );
                    }
                }
                running.push(container);
            }
        }
        self.pods.retain(|p| p.plan.name != name);
        self.pods.push(RunningPod {
            plan,
            ip,
            containers: main,
            running,
        });
        Ok(())
    }

    /// Waits until every probe of pod `name` answers (httpGet 2xx, tcpSocket accepts), or
    /// fails naming the probe, with the pod's logs.
    pub fn wait_ready(&mut self, name: &str, patience: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + patience;
        let pod = self
            .pods
            .iter_mut()
            .find(|p| p.plan.name == name)
            .with_context(|| format!("pod {name} was not started"))?;
        let probes: Vec<(String, String, Probe)> = pod
            .containers
            .iter()
            .flat_map(|c| {
                c.probes
                    .iter()
                    .map(move |(k, p)| (c.name.clone(), k.clone(), p.clone()))
            })
            .collect();
        for (container, kind, probe) in probes {
            loop {
                if let Some(c) = pod.running.iter_mut().find(|c| c.name == container)
                    && let Some(status) = c.exited()
                {
                    bail!(
                        "pod {name}: {container} exited ({status}) before its {kind} passed:\n{}",
                        pod.logs()
                    );
                }
                match check(pod.ip, &probe) {
                    Ok(()) => break,
                    Err(e) if Instant::now() > deadline => {
                        bail!(
                            "pod {name}: {container}'s {kind} {probe:?} did not pass in {patience:?}: {e:#}\n{}",
                            pod.logs()
                        )
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(200)),
                }
            }
        }
        Ok(())
    }

    /// Waits for every container of pod `name` (a Job's) to end: Ok(true) when all exited 0.
    pub fn wait_done(&mut self, name: &str, patience: Duration) -> anyhow::Result<bool> {
        let deadline = Instant::now() + patience;
        let pod = self
            .pods
            .iter_mut()
            .find(|p| p.plan.name == name)
            .with_context(|| format!("pod {name} was not started"))?;
        let mut all_ok = true;
        for c in &mut pod.running {
            loop {
                if let Some(s) = c.exited() {
                    all_ok &= s.success();
                    break;
                }
                if Instant::now() > deadline {
                    bail!("pod {name}: {} still running after {patience:?}", c.name);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(all_ok)
    }

    /// Kills every container of pod `name` at once (SIGKILL): a node lost.
    pub fn kill(&mut self, name: &str) -> anyhow::Result<()> {
        let pod = self
            .pods
            .iter_mut()
            .find(|p| p.plan.name == name)
            .with_context(|| format!("pod {name} was not started"))?;
        for c in &mut pod.running {
            c.kill();
        }
        Ok(())
    }

    pub fn logs(&self) -> String {
        self.pods.iter().map(RunningPod::logs).collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Containers first (each kills and deletes itself), then the namespaces.
        self.pods.clear();
        let _ = self.dns.kill();
        let _ = self.dns.wait();
    }
}

/// One probe against a pod's address.
pub fn check(ip: Ipv4Addr, probe: &Probe) -> anyhow::Result<()> {
    match probe {
        Probe::Tcp { port } => {
            TcpStream::connect_timeout(&SocketAddr::from((ip, *port)), Duration::from_secs(1))?;
            Ok(())
        }
        Probe::Http { port, path, https } => {
            let url = format!(
                "{}://{ip}:{port}{path}",
                if *https { "https" } else { "http" }
            );
            // The kubelet does not verify a probe's certificate; neither does this.
            let out = std::process::Command::new("curl")
                .args([
                    "-s",
                    "-k",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    "--max-time",
                    "2",
                ])
                .arg(&url)
                .output()?;
            let code = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            if code.starts_with('2') || code.starts_with('3') {
                Ok(())
            } else {
                bail!("{url} answered {code:?}")
            }
        }
    }
}
