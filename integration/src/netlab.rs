//! Network namespaces for fault tests: each etcd member gets its own namespace with one
//! veth leg on a bridge in the test's namespace, so the members talk over real links that
//! a test can cut. Addresses come from 198.18.0.0/15 (RFC 2544, reserved for benchmark
//! networks), one /24 per lab; nothing listens outside the namespaces this creates.
//!
//! Cutting a link is a `blackhole` route on both ends: packets vanish, as in a real
//! partition (connections time out; nothing is refused). Needs root (CAP_NET_ADMIN) and
//! iproute2. Everything is removed on drop; labs left by a killed test (their owner pid is
//! gone) are removed by the next lab.

use anyhow::{Context as _, bail};
use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT_LAB: AtomicU32 = AtomicU32::new(0);

pub struct NetLab {
    /// Name prefix: `lkg<pid>x<n>` (interface names stay within 15 bytes).
    tag: String,
    bridge: String,
    subnet: [u8; 3],
    hosts: usize,
}

impl NetLab {
    /// A bridge and `hosts` namespaces, each with an address on the bridge's /24.
    pub fn create(hosts: usize) -> anyhow::Result<Self> {
        sweep_stale();
        let n = NEXT_LAB.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let tag = format!("lkg{pid}x{n}");
        // Spread labs of concurrent tests over 198.18.0.0/15 by pid and counter.
        let slot = (pid.wrapping_mul(31).wrapping_add(n)) % 512;
        let subnet = [198, 18 + (slot / 256) as u8, (slot % 256) as u8];
        let lab = Self {
            bridge: format!("{tag}b"),
            tag,
            subnet,
            hosts,
        };
        lab.build().with_context(|| {
            "creating network namespaces (needs root and iproute2; the gate isolates etcd members with them)"
        })?;
        Ok(lab)
    }

    fn build(&self) -> anyhow::Result<()> {
        let br = self.bridge.as_str();
        ip(&["link", "add", br, "type", "bridge"])?;
        ip(&["addr", "add", &format!("{}/24", self.gateway()), "dev", br])?;
        ip(&["link", "set", br, "up"])?;
        for i in 0..self.hosts {
            let ns = self.namespace(i);
            let (outer, inner) = (format!("{}h{i}", self.tag), format!("{}n{i}", self.tag));
            ip(&["netns", "add", &ns])?;
            ip(&[
                "link", "add", &outer, "type", "veth", "peer", "name", &inner,
            ])?;
            ip(&["link", "set", &inner, "netns", &ns])?;
            ip(&["link", "set", &outer, "master", br, "up"])?;
            in_ns(
                &ns,
                &[
                    "addr",
                    "add",
                    &format!("{}/24", self.host(i)),
                    "dev",
                    &inner,
                ],
            )?;
            in_ns(&ns, &["link", "set", &inner, "up"])?;
            in_ns(&ns, &["link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    /// The test namespace's address on the bridge (how arbiters reach the members).
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::new(self.subnet[0], self.subnet[1], self.subnet[2], 1)
    }

    /// Host `i`'s address.
    pub fn host(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::new(self.subnet[0], self.subnet[1], self.subnet[2], 10 + i as u8)
    }

    pub fn namespace(&self, i: usize) -> String {
        format!("{}m{i}", self.tag)
    }

    /// Cuts host `i` off from every other host (the bridge's own address stays reachable).
    pub fn isolate(&self, i: usize) -> anyhow::Result<()> {
        self.routes(i, "add")
    }

    /// Undoes [`NetLab::isolate`].
    pub fn heal(&self, i: usize) -> anyhow::Result<()> {
        self.routes(i, "del")
    }

    /// Cuts the link between hosts `i` and `j` only. With three hosts, cutting two of them
    /// apart leaves a bridge partition: two halves that share the third member.
    pub fn cut(&self, i: usize, j: usize) -> anyhow::Result<()> {
        self.pair(i, j, "add")
    }

    /// Undoes [`NetLab::cut`].
    pub fn mend(&self, i: usize, j: usize) -> anyhow::Result<()> {
        self.pair(i, j, "del")
    }

    fn routes(&self, i: usize, verb: &str) -> anyhow::Result<()> {
        for j in (0..self.hosts).filter(|j| *j != i) {
            self.pair(i, j, verb)?;
        }
        Ok(())
    }

    fn pair(&self, i: usize, j: usize, verb: &str) -> anyhow::Result<()> {
        for (from, to) in [(i, j), (j, i)] {
            in_ns(
                &self.namespace(from),
                &["route", verb, "blackhole", &format!("{}/32", self.host(to))],
            )?;
        }
        Ok(())
    }
}

impl Drop for NetLab {
    fn drop(&mut self) {
        remove(&self.tag);
    }
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running ip")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn in_ns(ns: &str, args: &[&str]) -> anyhow::Result<()> {
    let mut all = vec!["netns", "exec", ns, "ip"];
    all.extend_from_slice(args);
    ip(&all)
}

/// Deletes a lab's namespaces (their veth pairs go with them) and its bridge.
fn remove(tag: &str) {
    if let Ok(out) = Command::new("ip").args(["netns", "list"]).output() {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let name = line.split_whitespace().next().unwrap_or_default();
            if name.starts_with(&format!("{tag}m")) {
                let _ = ip(&["netns", "del", name]);
            }
        }
    }
    let _ = ip(&["link", "del", &format!("{tag}b")]);
}

/// Removes labs whose owning process is gone (a test killed before its drop ran).
fn sweep_stale() {
    let Ok(out) = Command::new("ip")
        .args(["-o", "link", "show", "type", "bridge"])
        .output()
    else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(name) = line.split(": ").nth(1) else {
            continue;
        };
        let Some(rest) = name.strip_prefix("lkg").and_then(|r| r.strip_suffix('b')) else {
            continue;
        };
        let Some((pid, _)) = rest.split_once('x') else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            remove(&name[..name.len() - 1]);
        }
    }
}
