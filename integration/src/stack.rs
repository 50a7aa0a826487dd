//! The whole local stack: dev PKI, single-member etcd with its epoch, N arbiters, Envoy
//! with the filter. Everything on loopback, in one temp folder, torn down on drop.

use crate::arbiter::Arbiter;
use crate::envoy::{Envoy, EnvoyConfig};
use crate::etcd::Etcd;
use crate::link::Link;
use crate::netlab::NetLab;
use crate::paths::{dev_registry, workspace_bin};
use crate::pki::{Pki, SvidFiles, TRUST_DOMAIN};
use anyhow::{Context as _, bail};
use lock_client::proto::lock_client::LockClient;
use lock_client::stub::{self as remote, Svid};
use lock_config::FilterConfig;
use lock_store::layout::EpochRecord;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use tonic::transport::Channel;

pub struct StackOptions {
    pub arbiters: usize,
    /// Run `lockctl epoch init` before serving (false shows the unsealed-store refusal).
    pub init_epoch: bool,
    pub registry: PathBuf,
    pub region: String,
    /// Keep the folder (and logs) instead of deleting it on drop.
    pub keep_dir: Option<PathBuf>,
    /// Envoy's listener and admin ports (None: free ports).
    pub envoy_ports: Option<(u16, u16)>,
    /// etcd members (1, or 3 for quorum tests).
    pub etcd_members: usize,
    /// Extra arbiter flags, e.g. `--store-timeout-ms 1000`.
    pub arbiter_args: Vec<String>,
    /// Extra arbiter environment (the clock tests run them under libfaketime).
    pub arbiter_env: Vec<(String, String)>,
    /// Extra etcd flags, e.g. `--quota-backend-bytes=...`.
    pub etcd_args: Vec<String>,
    /// Each etcd member in a network namespace of its own, so links can be cut.
    pub isolatable_etcd: bool,
    /// Edge checks to switch off (`unsafeTestSwitches`, e.g. `ignore-trailers`); non-empty
    /// loads the filter's debug build, the only one that honours them.
    pub filter_switches: Vec<String>,
    /// Another Envoy release than the default 1.40 (e.g. "1.36.4": `.deps/bin/envoy-1.36.4`,
    /// installed by install-deps.sh for the compatibility tests).
    pub envoy_version: Option<String>,
    /// Entity shards (ADR-07, 09): 0 runs everything on one cluster; N starts N more
    /// single-member clusters `e1..eN` (sharing the coord cluster's certificates), runs
    /// `lockctl shards init` and the arbiters with `--shards`.
    pub entity_shards: usize,
    /// The shard map's home depth (`lockctl shards init --depth`).
    pub shard_depth: u8,
    /// Envoy's worker threads (None: the harness's two, which tests of state shared across
    /// workers need; the bench runs the shipped edge's one).
    pub envoy_workers: Option<usize>,
    /// Every arbiter's link to each etcd member, and Envoy's link to each arbiter, through
    /// a relay (`link.rs`) that a test can slow, make lossy or cut, one way or both.
    pub relayed_links: bool,
}

impl Default for StackOptions {
    fn default() -> Self {
        Self {
            arbiters: 2,
            init_epoch: true,
            registry: dev_registry(),
            region: "local".into(),
            keep_dir: None,
            envoy_ports: None,
            etcd_members: 1,
            arbiter_args: Vec::new(),
            arbiter_env: Vec::new(),
            etcd_args: Vec::new(),
            isolatable_etcd: false,
            filter_switches: Vec::new(),
            envoy_version: None,
            entity_shards: 0,
            shard_depth: 1,
            envoy_workers: None,
            relayed_links: false,
        }
    }
}

pub struct Stack {
    // Drop order: Envoy, arbiters, etcd, then the folder.
    pub envoy: Envoy,
    pub arbiters: Vec<Arbiter>,
    /// Member 0 (the only one, unless `etcd_members` > 1).
    pub etcd: Etcd,
    /// Members 1.. of a multi-member cluster.
    pub etcd_peers: Vec<Etcd>,
    /// Entity shards `e1..` (with `entity_shards`; `etcd` is then the coord cluster).
    pub shards: Vec<Etcd>,
    pub pki: Pki,
    /// The members' network namespaces (with `isolatable_etcd`).
    pub lab: Option<NetLab>,
    /// With `relayed_links`: arbiter `i`'s link to member `j` is `etcd_links[i][j]`.
    pub etcd_links: Vec<Vec<Link>>,
    /// With `relayed_links`: Envoy's link to arbiter `i`.
    pub edge_links: Vec<Link>,
    pub dir: PathBuf,
    /// Envoy's rendered config, kept for restarts.
    pub envoy_config: EnvoyConfig,
    _tmp: Option<tempfile::TempDir>,
}

impl Stack {
    /// A stack on the test registry (`registry.rs`), written to a temp folder kept with it.
    pub async fn with_test_registry() -> anyhow::Result<(Self, tempfile::TempDir)> {
        Self::with_test_registry_and(StackOptions::default().arbiters).await
    }

    /// As [`Stack::with_test_registry`], with `arbiters` arbiters.
    pub async fn with_test_registry_and(
        arbiters: usize,
    ) -> anyhow::Result<(Self, tempfile::TempDir)> {
        Self::with_test_registry_options(StackOptions {
            arbiters,
            ..Default::default()
        })
        .await
    }

    /// A stack of `opts` on the test registry (its `registry` is replaced).
    pub async fn with_test_registry_options(
        opts: StackOptions,
    ) -> anyhow::Result<(Self, tempfile::TempDir)> {
        let reg = tempfile::tempdir()?;
        let registry = crate::registry::write_test_registry(reg.path())?;
        let stack = Self::start(StackOptions { registry, ..opts }).await?;
        Ok((stack, reg))
    }

    /// A stack on the test registry with two entity shards whose homes are whole keys
    /// (tiers and shards), and under `prefix` one key the map puts on each, `[e1, e2]`.
    pub async fn with_two_shards(
        prefix: &str,
    ) -> anyhow::Result<(Self, tempfile::TempDir, [String; 2])> {
        let reg = tempfile::tempdir()?;
        let registry = crate::registry::write_test_registry(reg.path())?;
        let stack = Self::start(StackOptions {
            registry,
            entity_shards: 2,
            shard_depth: 2,
            ..Default::default()
        })
        .await?;
        let mut etcd = stack.etcd_client().await?;
        let r = etcd.get("/sys/shards", None).await?;
        let doc: lock_config::shards::ShardsDoc = serde_json::from_slice(
            r.kvs()
                .first()
                .context("no shard map on the coord cluster")?
                .value(),
        )?;
        let on = |shard: &str| {
            (0..200)
                .map(|i| format!("{prefix}-{i}"))
                .find(|k| doc.current.shard_of(k) == shard)
                .with_context(|| format!("no key of 200 under {prefix} on {shard}"))
        };
        let keys = [on("e1")?, on("e2")?];
        Ok((stack, reg, keys))
    }

    /// The two-person epoch advance from `from` on this stack's etcd, through lock-admin's
    /// own filing and approval code (`crate::admin`); it must succeed.
    pub async fn advance_epoch(&self, from: u16) -> anyhow::Result<EpochRecord> {
        crate::admin::advance_epoch(&self.etcd_access(), from, "test")
            .await?
            .map_err(|e| anyhow::anyhow!("the epoch advance from {from} failed: {e}"))
    }

    /// The two-person epoch advance of entity shard `i` (`e1` is 0) from `from`, through
    /// lock-admin's own filing and approval code given the coord cluster (`--coord`); it
    /// must succeed.
    pub async fn advance_shard_epoch(&self, i: usize, from: u16) -> anyhow::Result<EpochRecord> {
        let shard = self
            .shards
            .get(i)
            .with_context(|| format!("no entity shard {i}"))?;
        let coord = self.etcd_access();
        crate::admin::advance_epoch_with(
            &shard.access(&shard.client_url),
            Some(&coord),
            from,
            "test",
            false,
        )
        .await?
        .map_err(|e| anyhow::anyhow!("the advance of {} from {from} failed: {e}", shard.name))
    }

    pub async fn start(opts: StackOptions) -> anyhow::Result<Self> {
        let (tmp, dir) = crate::process::work_dir(opts.keep_dir.as_deref(), "lock-stack-")?;
        let pki = Pki::create(&dir.join("pki"))?;
        let n = opts.etcd_members.max(1);
        let lab = if opts.isolatable_etcd {
            Some(NetLab::create(n)?)
        } else {
            None
        };
        let mut members = match &lab {
            Some(lab) => Etcd::start_cluster_in(&dir, "etcd", lab, n, &opts.etcd_args)?,
            None => Etcd::start_cluster_with(&dir, "etcd", n, &opts.etcd_args)?,
        };
        let etcd = members.remove(0);
        let etcd_peers = members;
        let urls: Vec<&str> = std::iter::once(&etcd)
            .chain(&etcd_peers)
            .map(|m| m.client_url.as_str())
            .collect();
        let urls = urls.join(",");
        etcd.client().await.context("etcd not answering")?;
        if opts.init_epoch {
            // A bootstrap step: /sys/epoch is root's (and lock-admin's) to write.
            let out = lockctl_etcd(&["epoch", "init", "--etcd", &urls], &etcd.pki, "root")?;
            if !out.status.success() {
                bail!(
                    "lockctl epoch init failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        let mut shards = Vec::new();
        let mut arbiter_args = opts.arbiter_args.clone();
        if opts.entity_shards > 0 {
            let mut init = vec![
                "shards".to_owned(),
                "init".into(),
                "--etcd".into(),
                urls.clone(),
                "--depth".into(),
                opts.shard_depth.to_string(),
            ];
            for i in 1..=opts.entity_shards {
                let shard = Etcd::start_sharing(&dir, &format!("e{i}"), etcd.pki.clone())?;
                init.extend(["--shard".into(), format!("e{i}={}", shard.client_url)]);
                shards.push(shard);
            }
            let init: Vec<&str> = init.iter().map(String::as_str).collect();
            // Bootstrap: it creates each shard's epoch record (root's to write).
            let out = lockctl_etcd(&init, &etcd.pki, "root")?;
            if !out.status.success() {
                bail!(
                    "lockctl shards init failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            arbiter_args.push("--shards".into());
        }
        let mut arbiters = Vec::new();
        let mut etcd_links = Vec::new();
        let extra: Vec<&str> = arbiter_args.iter().map(String::as_str).collect();
        for i in 0..opts.arbiters {
            let urls = if opts.relayed_links {
                let links = std::iter::once(&etcd)
                    .chain(&etcd_peers)
                    .map(|m| Link::start(m.client_addr))
                    .collect::<anyhow::Result<Vec<_>>>()?;
                let relayed: Vec<String> = links
                    .iter()
                    .map(|l| format!("https://{}", l.addr))
                    .collect();
                etcd_links.push(links);
                relayed.join(",")
            } else {
                urls.clone()
            };
            arbiters.push(Arbiter::start_with_env(
                &dir,
                &format!("arbiter-{i}"),
                &etcd.access(&urls),
                &opts.registry,
                &pki,
                &extra,
                &opts.arbiter_env,
            )?);
        }
        let registry = lock_store::registry_files::load(&opts.registry)?;
        let mut filter =
            FilterConfig::from_registry(&registry, &opts.region, &[TRUST_DOMAIN.to_owned()], None);
        filter.unsafe_test_switches = opts.filter_switches.clone();
        let edge_links = if opts.relayed_links {
            arbiters
                .iter()
                .map(|a| Link::start(a.addr))
                .collect::<anyhow::Result<Vec<_>>>()?
        } else {
            Vec::new()
        };
        let upstreams = if opts.relayed_links {
            edge_links.iter().map(|l| l.addr).collect()
        } else {
            arbiters.iter().map(|a| a.addr).collect()
        };
        let mut config = EnvoyConfig::new(&pki.dir, filter, upstreams)?;
        if !opts.filter_switches.is_empty() {
            config.wasm = crate::paths::filter_wasm_debug()?;
        }
        if let Some(v) = &opts.envoy_version {
            config.binary = format!("envoy-{v}");
        }
        config.workers = opts.envoy_workers;
        let chosen = opts.envoy_ports.is_some();
        if let Some((listen, admin)) = opts.envoy_ports {
            config.listen_port = listen;
            config.admin_port = admin;
        }
        let envoy = Envoy::start_on_free_ports(&dir, &mut config, !chosen)?;
        Ok(Self {
            envoy,
            arbiters,
            etcd,
            etcd_peers,
            shards,
            pki,
            lab,
            etcd_links,
            edge_links,
            dir,
            envoy_config: config,
            _tmp: tmp,
        })
    }

    /// Every etcd member, member 0 first.
    pub fn members(&self) -> impl Iterator<Item = &Etcd> {
        std::iter::once(&self.etcd).chain(&self.etcd_peers)
    }

    /// Member `i` (0 is `etcd`).
    pub fn member_mut(&mut self, i: usize) -> Option<&mut Etcd> {
        match i {
            0 => Some(&mut self.etcd),
            i => self.etcd_peers.get_mut(i - 1),
        }
    }

    /// Every member's client URL, comma-separated (what the arbiters were given).
    pub fn etcd_urls(&self) -> String {
        let urls: Vec<&str> = self.members().map(|m| m.client_url.as_str()).collect();
        urls.join(",")
    }

    /// Every member's client URL and the cluster's PKI (what an arbiter is given).
    pub fn etcd_access(&self) -> crate::etcd::Access {
        self.etcd.access(&self.etcd_urls())
    }

    /// The index of the member the others follow, if a reachable member names one.
    pub async fn leader(&self) -> Option<usize> {
        let mut ids = Vec::new();
        let mut leader = 0;
        for m in self.members() {
            match m.status().await {
                Ok((id, l)) => {
                    ids.push(id);
                    if l != 0 {
                        leader = l;
                    }
                }
                Err(_) => ids.push(0),
            }
        }
        ids.iter().position(|id| *id == leader && leader != 0)
    }

    /// Stops Envoy (SIGKILL) and starts it again on the same ports and config.
    pub fn restart_envoy(&mut self) -> anyhow::Result<()> {
        self.envoy.proc.kill();
        self.envoy = Envoy::start(&self.dir, &self.envoy_config)?;
        Ok(())
    }

    pub fn endpoint(&self) -> String {
        format!("https://127.0.0.1:{}", self.envoy.listen.port())
    }

    /// A client through Envoy presenting `svid`.
    pub async fn client(&self, svid: &SvidFiles) -> anyhow::Result<LockClient<Channel>> {
        let s = Svid {
            cert: Some(&svid.cert),
            key: Some(&svid.key),
            ca: &svid.ca,
        };
        Ok(remote::connect(&self.endpoint(), &s, "localhost").await?)
    }

    /// A client through Envoy for a fresh SVID of `spiffe_id`.
    pub async fn workload(&self, spiffe_id: &str) -> anyhow::Result<LockClient<Channel>> {
        let name = spiffe_id.rsplit('/').next().unwrap_or("w").to_owned();
        let svid = self.pki.svid(&name, spiffe_id)?;
        self.client(&svid).await
    }

    /// A client straight to arbiter `i` (bypassing Envoy and the filter), presenting
    /// Envoy's SVID: what the edge is allowed to do, for tests that play the edge.
    pub async fn arbiter_direct(&self, i: usize) -> anyhow::Result<LockClient<Channel>> {
        let addr = self.arbiters.get(i).context("no such arbiter")?.addr;
        let channel =
            crate::arbiter_channel(addr, Some(&self.pki.edge_svid()), &self.pki.bundle())?;
        Ok(LockClient::new(channel))
    }

    pub async fn etcd_client(&self) -> anyhow::Result<etcd_client::Client> {
        self.etcd.client().await
    }

    /// Runs the real `lockctl` with `svid` as its identity against this stack.
    pub fn lockctl_as(&self, svid: &SvidFiles, args: &[&str]) -> anyhow::Result<Output> {
        Ok(self.lockctl_cmd(svid, args)?.output()?)
    }

    /// `lockctl grants push REGISTRY` to this stack's Envoy (its file ECDS resource), as
    /// security pushes reviewed grants: no restart.
    pub fn push_grants(&self, registry: &Path) -> anyhow::Result<Output> {
        let ecds = self.envoy_config.ecds_path();
        let wasm = self.envoy_config.wasm.clone();
        lockctl(
            &[
                "grants",
                "push",
                path_str(registry),
                "--region",
                "local",
                "--trust-domain",
                crate::pki::TRUST_DOMAIN,
                "--out",
                path_str(&ecds),
                "--wasm",
                path_str(&wasm),
            ],
            &[],
        )
    }

    /// The real `lockctl` with `svid` as its identity, not yet started.
    pub fn lockctl_cmd(&self, svid: &SvidFiles, args: &[&str]) -> anyhow::Result<Command> {
        let mut cmd = Command::new(workspace_bin("lockctl")?);
        cmd.args(args)
            .env("LOCK_ENDPOINT", self.endpoint())
            .env("LOCK_SVID", path_str(&svid.cert))
            .env("LOCK_SVID_KEY", path_str(&svid.key))
            .env("LOCK_CA", path_str(&svid.ca));
        Ok(cmd)
    }

    /// A lock-client for `spiffe_id` (a fresh SVID) through Envoy.
    pub fn lock_client(&self, spiffe_id: &str) -> anyhow::Result<lock_client::LockClient> {
        let name = format!("client-{}", spiffe_id.rsplit('/').next().unwrap_or("w"));
        let svid = self.pki.svid(&name, spiffe_id)?;
        self.lock_client_with(&svid, None)
    }

    /// A lock-client presenting `svid` through Envoy, as process `instance` among its
    /// identity's replicas (None: this process's own instance).
    pub fn lock_client_with(
        &self,
        svid: &SvidFiles,
        instance: Option<&str>,
    ) -> anyhow::Result<lock_client::LockClient> {
        let config = lock_client::Config::files(
            self.endpoint(),
            &svid.cert,
            &svid.key,
            &svid.ca,
            "localhost",
        );
        let config = match instance {
            Some(i) => config.with_instance(i),
            None => config,
        };
        Ok(lock_client::LockClient::new(config)?)
    }
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

/// Runs the workspace's `lockctl` binary.
/// The real `lockctl` with etcd credentials for `user` (the operator's for `epoch`, root's
/// for `roles`).
pub fn lockctl_etcd(
    args: &[&str],
    pki: &crate::etcd::EtcdPki,
    user: &str,
) -> anyhow::Result<Output> {
    let mut cmd = Command::new(workspace_bin("lockctl")?);
    cmd.args(args).envs(pki.lockctl_env(user));
    Ok(cmd.output()?)
}

pub fn lockctl(args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<Output> {
    let mut cmd = Command::new(workspace_bin("lockctl")?);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    Ok(cmd.output()?)
}
