//! The OCI images `make images` builds (integration/scripts/build-images.sh), as the tests
//! use them: build a layout, unpack one image into a runc bundle, run its entry point in
//! its own pid, network, ipc, uts and mount namespaces.
//!
//! runc runs the image exactly as its config says (user, entry point, environment); the
//! only changes a test makes are the arguments, a read-only root and no terminal, which
//! is how the chart runs every container.

use crate::paths::workspace_root;
use anyhow::{Context as _, bail};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// One built image: `NAME VERSION DIGEST` from the build's digests.txt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub name: String,
    pub version: String,
    pub digest: String,
}

/// A built set of images: the layouts under `dir/oci/NAME`.
#[derive(Debug)]
pub struct Built {
    pub dir: PathBuf,
    pub images: Vec<Image>,
}

impl Built {
    pub fn get(&self, name: &str) -> Option<&Image> {
        self.images.iter().find(|i| i.name == name)
    }

    /// The layout reference umoci and skopeo read: `DIR/oci/NAME:VERSION`.
    pub fn reference(&self, image: &Image) -> String {
        format!(
            "{}:{}",
            self.dir.join("oci").join(&image.name).display(),
            image.version
        )
    }
}

/// Runs build-images.sh for `profile` (`debug` in the tests: the binaries `make test`
/// built; `release` for `make images`) into `out`, with the etcd and Envoy fixtures when
/// asked.
pub fn build(out: &Path, profile: &str, fixtures: bool) -> anyhow::Result<Built> {
    let script = workspace_root().join("integration/scripts/build-images.sh");
    let mut cmd = Command::new("bash");
    cmd.arg(script)
        .args(["--profile", profile, "--out"])
        .arg(out);
    if fixtures {
        cmd.arg("--fixtures");
    }
    let output = cmd.output().context("running build-images.sh")?;
    if !output.status.success() {
        bail!(
            "build-images.sh failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let text = std::fs::read_to_string(out.join("digests.txt"))?;
    let images = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f[..] {
                [name, version, digest] => Ok(Image {
                    name: name.to_owned(),
                    version: version.to_owned(),
                    digest: digest.to_owned(),
                }),
                _ => bail!("digests.txt: {l:?}"),
            }
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Built {
        dir: out.to_path_buf(),
        images,
    })
}

/// Unpacks `image` into a runc bundle at `bundle` (rootfs/ and config.json).
pub fn unpack(built: &Built, image: &Image, bundle: &Path) -> anyhow::Result<()> {
    let out = Command::new("umoci")
        .args(["unpack", "--image", &built.reference(image)])
        .arg(bundle)
        .output()
        .context("umoci (install-deps.sh installs it)")?;
    if !out.status.success() {
        bail!(
            "umoci unpack {}: {}",
            image.name,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// The bundle's runtime config, as umoci wrote it from the image's config.
pub fn runtime_config(bundle: &Path) -> anyhow::Result<serde_json::Value> {
    Ok(serde_json::from_str(&std::fs::read_to_string(
        bundle.join("config.json"),
    )?)?)
}

/// Sets the process's arguments (the entry point, then `args`), a read-only root and no
/// terminal; everything else stays as the image says.
pub fn prepare(bundle: &Path, args: &[&str]) -> anyhow::Result<()> {
    let mut config = runtime_config(bundle)?;
    let entry = config["process"]["args"][0]
        .as_str()
        .context("the image has no entry point")?
        .to_owned();
    let mut argv = vec![serde_json::Value::String(entry)];
    argv.extend(
        args.iter()
            .map(|a| serde_json::Value::String((*a).to_owned())),
    );
    config["process"]["args"] = serde_json::Value::Array(argv);
    config["process"]["terminal"] = serde_json::Value::Bool(false);
    config["root"]["readonly"] = serde_json::Value::Bool(true);
    std::fs::write(bundle.join("config.json"), serde_json::to_vec(&config)?)?;
    Ok(())
}

/// Runs the bundle's process to its end under runc (bounded by `patience`, then killed):
/// whether it exited 0, and what it printed.
pub fn run_to_end(bundle: &Path, id: &str, patience: Duration) -> anyhow::Result<(bool, String)> {
    let out = Command::new("timeout")
        .args(["--kill-after=5", &format!("{}", patience.as_secs().max(1))])
        .args(["runc", "run", "--bundle"])
        .arg(bundle)
        .arg(id)
        .stdin(std::process::Stdio::null())
        .output()
        .context("runc (install-deps.sh installs it)")?;
    // A killed run leaves its container record behind.
    let _ = Command::new("runc")
        .args(["delete", "--force", id])
        .output();
    Ok((
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    ))
}
