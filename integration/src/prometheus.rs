//! A real Prometheus (Debian's, unpacked into `.deps`) scraping the stack's arbiters
//! (`/metrics` on their admin listeners) and Envoy (`/stats/prometheus`) every second.

use crate::paths::dep;
use crate::process::{Proc, free_port, patience};
use anyhow::{Context as _, bail};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

pub struct Prometheus {
    pub proc: Proc,
    pub addr: SocketAddr,
}

impl Prometheus {
    pub fn start(
        dir: &Path,
        arbiters: &[SocketAddr],
        envoy_admin: SocketAddr,
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        let targets = |addrs: &[SocketAddr]| {
            addrs
                .iter()
                .map(|a| format!("'{a}'"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let config = format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
- job_name: arbiters
  static_configs: [{{targets: [{}]}}]
- job_name: envoy
  metrics_path: /stats/prometheus
  static_configs: [{{targets: [{}]}}]
",
            targets(arbiters),
            targets(&[envoy_admin])
        );
        let config_path = dir.join("prometheus.yml");
        std::fs::write(&config_path, config)?;
        let mut cmd = Command::new(dep("prometheus")?);
        cmd.arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn");
        let mut proc = Proc::spawn("prometheus", cmd, dir)?;
        proc.wait_for_port(addr, patience())?;
        let p = Self { proc, addr };
        let deadline = Instant::now() + patience();
        while crate::admin_get(p.addr, "/-/ready").map_or(true, |b| !b.contains("Ready")) {
            if Instant::now() > deadline {
                bail!("prometheus not ready within {:?}", patience());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(p)
    }

    /// `GET /api/v1/<path>?<param>=<value>`: the `data` of a successful answer.
    pub fn api(&self, path: &str, param: &str, value: &str) -> anyhow::Result<serde_json::Value> {
        let body = crate::admin_get(
            self.addr,
            &format!("/api/v1/{path}?{param}={}", encode(value)),
        )?;
        let v: serde_json::Value =
            serde_json::from_str(&body).with_context(|| format!("prometheus answered {body}"))?;
        if v["status"] != "success" {
            bail!("prometheus: {body}");
        }
        Ok(v["data"].clone())
    }

    /// An instant query's result vector.
    pub fn query(&self, q: &str) -> anyhow::Result<Vec<serde_json::Value>> {
        Ok(self.api("query", "query", q)?["result"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// Every series matching `selector` (label sets).
    pub fn series(&self, selector: &str) -> anyhow::Result<Vec<serde_json::Value>> {
        Ok(self
            .api("series", "match%5B%5D", selector)?
            .as_array()
            .cloned()
            .unwrap_or_default())
    }
}

/// Percent-encodes a query parameter (everything but unreserved characters).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Every metric name starting with `prefix` that `text` (alert rules, a dashboard) uses,
/// each with the base name its exposition declares (`# TYPE base ...`): a counter's
/// `_total` and a histogram's `_bucket`/`_sum`/`_count` are stripped.
pub fn names_used(text: &str, prefix: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(prefix) {
        let name: String = rest[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        // Only where a name starts: `etcd_` is not a prefix of `lock_arbiter_etcd_...`.
        let inside = rest[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if inside {
            rest = &rest[i + name.len()..];
            continue;
        }
        let base = name
            .trim_end_matches("_total")
            .trim_end_matches("_bucket")
            .trim_end_matches("_count")
            .trim_end_matches("_sum")
            .to_owned();
        rest = &rest[i + name.len()..];
        out.push((name, base));
    }
    out
}

/// The label names used by the samples of a Prometheus text exposition (`name{a="x",b="y"} 1`).
pub fn label_names(exposition: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    for line in exposition.lines().filter(|l| !l.starts_with('#')) {
        let Some(open) = line.find('{') else { continue };
        let Some(close) = line.rfind('}') else {
            continue;
        };
        let mut rest = &line[open + 1..close];
        // name="value" pairs; a value may hold commas and escaped quotes.
        while let Some(eq) = rest.find("=\"") {
            names.insert(rest[..eq].trim_start_matches(',').trim().to_owned());
            let value = &rest[eq + 2..];
            let mut end = 0;
            let mut escaped = false;
            for (i, c) in value.char_indices() {
                match (escaped, c) {
                    (true, _) => escaped = false,
                    (false, '\\') => escaped = true,
                    (false, '"') => {
                        end = i;
                        break;
                    }
                    _ => {}
                }
            }
            rest = &value[(end + 1).min(value.len())..];
        }
    }
    names
}

#[cfg(test)]
mod label_tests {
    #[test]
    fn label_names_of_an_exposition() {
        let text = "# HELP x y\n# TYPE a counter\na_total{class=\"pay,ledger\",reason=\"say \\\"hi\\\"\"} 1\nb 2\nc_bucket{le=\"0.1\"} 3\n";
        let names: Vec<String> = super::label_names(text).into_iter().collect();
        assert_eq!(names, ["class", "le", "reason"]);
    }
}
