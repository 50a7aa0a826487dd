//! The tiers' etcd clusters as manifests (ADR-07, 10: the coord cluster of five members,
//! entity shards of three each), rendered from `deploy/kubernetes/etcd.yaml` so every
//! cluster is configured the same way (TLS, QoS, zones, checkpoints, compaction) and a
//! change to one is a change to all. `docsgen write` writes them; `docsgen check` and
//! `integration/tests/deploy.rs` fail when one is stale.

use crate::paths::workspace_root;
use anyhow::Context as _;

/// The clusters rendered: (name, members). The single-cluster layout is etcd.yaml itself.
pub const TIERS: [(&str, usize); 2] = [("coord", 5), ("e1", 3)];

/// The manifest of cluster `name` with `members` members, from the base manifest's text.
pub fn render(base: &str, name: &str, members: usize) -> anyhow::Result<String> {
    let cluster = format!("lock-etcd-{name}");
    // The StorageClass is shared: it stays in etcd.yaml.
    let docs: Vec<&str> = base.split("\n---\n").collect();
    let body = docs
        .get(1..)
        .context("etcd.yaml: no documents after the StorageClass")?
        .join("\n---\n");
    let peers = (0..members)
        .map(|i| format!("{cluster}-{i}=https://{cluster}-{i}.{cluster}.lock.svc:2380"))
        .collect::<Vec<_>>()
        .join(",");
    let clients = (0..members)
        .map(|i| format!("https://{cluster}-{i}.{cluster}.lock.svc:2379"))
        .collect::<Vec<_>>()
        .join(",");
    let mut out = String::new();
    // More members than zones (five on the usual three): spread evenly instead of one per
    // zone (2/2/1: a zone's loss leaves three of five), since one per zone would leave two
    // Pending. The base's zone term is the anti-affinity's last one.
    let mut skipping = false;
    for line in body.lines() {
        if members > 3 && line.trim_start().starts_with("# One member per hall") {
            skipping = true;
        }
        if skipping {
            if line.contains("topologyKey: topology.kubernetes.io/zone") {
                skipping = false;
                out.push_str(&format!(
                    "      # {members} members over the zones, evenly (2/2/1 on three): a zone's loss takes\n      \
                     # at most two, never a majority.\n      topologySpreadConstraints:\n      \
                     - maxSkew: 1\n        topologyKey: topology.kubernetes.io/zone\n        \
                     whenUnsatisfiable: DoNotSchedule\n        labelSelector:\n          \
                     matchLabels: {{app.kubernetes.io/name: {cluster}}}\n"
                ));
            }
            continue;
        }
        let line = if line.trim_start().starts_with("- --initial-cluster=") {
            let indent = &line[..line.len() - line.trim_start().len()];
            format!("{indent}- --initial-cluster={peers}")
        } else if line.contains("name: LOCK_ETCD, value:") {
            let indent = &line[..line.len() - line.trim_start().len()];
            format!("{indent}- {{name: LOCK_ETCD, value: \"{clients}\"}}")
        } else if line.trim() == "replicas: 3" {
            line.replace("replicas: 3", &format!("replicas: {members}"))
        } else {
            line.replace("lock-etcd-local", "\u{0}")
                .replace("lock-etcd", &cluster)
                .replace('\u{0}', "lock-etcd-local")
        };
        out.push_str(&line);
        out.push('\n');
    }
    let what = if name == "coord" {
        "The coord cluster (ADR-07: coord-tier classes, the shard map, the epoch allocator)"
    } else {
        "An entity shard (ADR-07, 09: the entity-tier keys the shard map homes here)"
    };
    Ok(format!(
        "# Generated from etcd.yaml by `cargo run -p lock-integration --bin docsgen -- write`;\n\
         # do not edit.\n# {what}:\n# {members} members, configured as etcd.yaml's (TLS, QoS, zones, lease checkpoints,\n\
         # compaction), with its own certificates (Secrets {cluster}-*). The StorageClass\n\
         # is etcd.yaml's.\n{out}"
    ))
}

/// Every rendered manifest: its path under the workspace and its text.
pub fn generated() -> anyhow::Result<Vec<(String, String)>> {
    let base = std::fs::read_to_string(workspace_root().join("deploy/kubernetes/etcd.yaml"))?;
    TIERS
        .iter()
        .map(|(name, members)| {
            Ok((
                format!("deploy/kubernetes/tiers/etcd-{name}.yaml"),
                render(&base, name, *members)?,
            ))
        })
        .collect()
}

/// The rendered manifests whose committed text differs.
pub fn stale() -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    for (path, text) in generated()? {
        let have = std::fs::read_to_string(workspace_root().join(&path)).unwrap_or_default();
        if have != text {
            out.push(path);
        }
    }
    Ok(out)
}

pub fn write_all() -> anyhow::Result<()> {
    for (path, text) in generated()? {
        let p = workspace_root().join(&path);
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&p, text).with_context(|| p.display().to_string())?;
    }
    Ok(())
}
