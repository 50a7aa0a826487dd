//! A container as runc runs it: the image's root (unpacked once per image, shared,
//! read-only where the chart says so), the pod's network namespace and hostname, the
//! user, the volumes as bind mounts, the pod's /etc/hosts.

use super::objects::{ContainerPlan, ImageRef, Volume};
use crate::images::{self, Built};
use anyhow::{Context as _, bail};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The built images, each unpacked once on first use.
pub struct ImageStore {
    built: Built,
    dir: PathBuf,
    unpacked: HashMap<String, PathBuf>,
}

impl ImageStore {
    pub fn new(built: Built, dir: &Path) -> Self {
        Self {
            built,
            dir: dir.to_path_buf(),
            unpacked: HashMap::new(),
        }
    }

    /// The unpacked bundle of the image `r` names. A reference must pin the built image's
    /// digest: a tag alone, or another digest, is refused (what runs is what was built).
    pub fn bundle(&mut self, r: &ImageRef) -> anyhow::Result<PathBuf> {
        let image = self
            .built
            .get(&r.name)
            .with_context(|| format!("image {} was not built (make images)", r.name))?
            .clone();
        match &r.digest {
            Some(d) if *d == image.digest => {}
            Some(d) => bail!(
                "image {} is pinned at {d}, but the built image is {}",
                r.name,
                image.digest
            ),
            None => bail!("image {} is not pinned by digest", r.name),
        }
        if let Some(p) = self.unpacked.get(&r.name) {
            return Ok(p.clone());
        }
        let bundle = self.dir.join(&r.name);
        images::unpack(&self.built, &image, &bundle)?;
        self.unpacked.insert(r.name.clone(), bundle.clone());
        Ok(bundle)
    }
}

/// Where a pod's volumes live on the host: `dir/NAME`, written once per pod.
pub fn write_volumes(
    dir: &Path,
    volumes: &BTreeMap<String, Volume>,
    fs_group: Option<u32>,
    store: &mut ImageStore,
) -> anyhow::Result<BTreeMap<String, PathBuf>> {
    let mut out = BTreeMap::new();
    for (name, volume) in volumes {
        let path = match volume {
            Volume::Files(files) => {
                let root = dir.join(name);
                std::fs::create_dir_all(&root)?;
                for (rel, bytes, mode) in files {
                    let file = root.join(rel);
                    if let Some(parent) = file.parent() {
                        std::fs::create_dir_all(parent)?;
                    }
                    std::fs::write(&file, bytes)?;
                    // As the kubelet does: root owns the files; with an fsGroup the group
                    // owns them too and may read them.
                    let mut mode = *mode;
                    if let Some(g) = fs_group {
                        std::os::unix::fs::chown(&file, Some(0), Some(g))?;
                        mode |= 0o040;
                    }
                    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode))?;
                }
                root
            }
            Volume::EmptyDir => {
                let root = dir.join(name);
                std::fs::create_dir_all(&root)?;
                std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777))?;
                root
            }
            Volume::Image(r) => store.bundle(r)?.join("rootfs"),
        };
        out.insert(name.clone(), path);
    }
    Ok(out)
}

/// What a container needs beyond its plan.
pub struct Place<'a> {
    pub id: &'a str,
    pub hostname: &'a str,
    pub netns: &'a str,
    pub hosts_file: &'a Path,
    pub resolv_conf: &'a Path,
    pub volumes: &'a BTreeMap<String, PathBuf>,
    pub image_bundle: &'a Path,
    pub bundle: &'a Path,
}

/// Writes the container's bundle (config.json pointing at the image's shared root).
pub fn write_bundle(plan: &ContainerPlan, at: &Place<'_>) -> anyhow::Result<()> {
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(
        at.image_bundle.join("config.json"),
    )?)?;
    let image_argv: Vec<Value> = config["process"]["args"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    // Kubernetes: `command` replaces the entry point (and the image's arguments); `args`
    // alone replaces the image's arguments and keeps its entry point. These images have an
    // entry point and no arguments.
    let argv: Vec<Value> = match &plan.command {
        Some(cmd) => cmd
            .iter()
            .chain(plan.args.iter())
            .map(|s| Value::String(s.clone()))
            .collect(),
        None => image_argv
            .into_iter()
            .take(1)
            .chain(plan.args.iter().map(|s| Value::String(s.clone())))
            .collect(),
    };
    if argv.is_empty() {
        bail!("container {}: nothing to run", plan.name);
    }
    config["process"]["args"] = Value::Array(argv);
    config["process"]["terminal"] = json!(false);
    let mut env: Vec<Value> = config["process"]["env"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| !e.as_str().is_some_and(|s| s.starts_with("TERM=")))
        .collect();
    env.push(json!(format!("HOSTNAME={}", at.hostname)));
    env.extend(plan.env.iter().map(|(k, v)| json!(format!("{k}={v}"))));
    config["process"]["env"] = Value::Array(env);
    if let Some((uid, gid)) = plan.user {
        config["process"]["user"] = json!({"uid": uid, "gid": gid});
    }
    config["root"] = json!({
        "path": at.image_bundle.join("rootfs"),
        "readonly": plan.read_only_root,
    });
    config["hostname"] = json!(at.hostname);
    let namespaces = config["linux"]["namespaces"]
        .as_array_mut()
        .context("the image's runtime config has no namespaces")?;
    for ns in namespaces.iter_mut() {
        if ns["type"] == "network" {
            ns["path"] = json!(format!("/var/run/netns/{}", at.netns));
        }
    }
    let mounts = config["mounts"]
        .as_array_mut()
        .context("the image's runtime config has no mounts")?;
    for (destination, source) in [
        ("/etc/hosts", at.hosts_file),
        ("/etc/resolv.conf", at.resolv_conf),
    ] {
        mounts.push(json!({
            "destination": destination, "type": "bind", "source": source,
            "options": ["rbind", "ro"],
        }));
    }
    for m in &plan.mounts {
        let mut source = at
            .volumes
            .get(&m.volume)
            .with_context(|| format!("container {}: no volume {}", plan.name, m.volume))?
            .clone();
        if let Some(sub) = &m.sub_path {
            source = source.join(sub);
        }
        mounts.push(json!({
            "destination": m.path, "type": "bind", "source": source,
            "options": ["rbind", if m.read_only { "ro" } else { "rw" }],
        }));
    }
    std::fs::create_dir_all(at.bundle)?;
    std::fs::write(
        at.bundle.join("config.json"),
        serde_json::to_vec_pretty(&config)?,
    )?;
    Ok(())
}

/// A started container: runc in the foreground, its output in `log`.
pub struct Container {
    pub id: String,
    pub name: String,
    pub log: PathBuf,
    child: Child,
}

impl Container {
    pub fn start(id: &str, name: &str, bundle: &Path, log: &Path) -> anyhow::Result<Self> {
        let out = std::fs::File::create(log)?;
        let child = Command::new("runc")
            .args(["run", "--bundle"])
            .arg(bundle)
            .arg(id)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("runc (install-deps.sh installs it)")?;
        Ok(Self {
            id: id.to_owned(),
            name: name.to_owned(),
            log: log.to_path_buf(),
            child,
        })
    }

    /// Its exit status, once it has ended.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL, as a node that dies takes its pods.
    pub fn kill(&mut self) {
        let _ = Command::new("runc")
            .args(["kill", &self.id, "KILL"])
            .output();
        let _ = self.child.wait();
        let _ = Command::new("runc")
            .args(["delete", "--force", &self.id])
            .output();
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if self.exited().is_none() {
            self.kill();
        } else {
            let _ = Command::new("runc")
                .args(["delete", "--force", &self.id])
                .output();
        }
    }
}
