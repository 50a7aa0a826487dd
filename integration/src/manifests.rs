//! `deploy/kubernetes` is the Helm chart's output (`deploy/helm/fenced-lock`, ADR-06, 07,
//! 18): `integration/scripts/render-manifests.sh` renders it with the production values
//! (every etcd cluster, coord and the entity shards in `tiers/`, from one template, so
//! every cluster is configured alike). `docsgen write` runs the script; `docsgen check`
//! and `integration/tests/helm.rs` fail when a committed file differs from a fresh render.

use crate::paths::{dep, workspace_root};
use anyhow::Context as _;
use std::path::{Path, PathBuf};

/// The script that renders the chart into a folder, from the workspace root.
pub const SCRIPT: &str = "integration/scripts/render-manifests.sh";

/// The first line of every file the script writes (how a stale one is recognised).
pub const MARK: &str = "# Generated from the Helm chart deploy/helm/fenced-lock by integration/scripts/render-manifests.sh;";

/// Renders the chart into `out` (created if missing; generated files it no longer renders
/// are removed, hand-written ones left alone).
pub fn render(out: &Path) -> anyhow::Result<()> {
    let helm = dep("helm")?;
    let output = std::process::Command::new(workspace_root().join(SCRIPT))
        .arg(out)
        .env("HELM", helm)
        .output()
        .with_context(|| SCRIPT.to_owned())?;
    anyhow::ensure!(
        output.status.success(),
        "{SCRIPT} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

/// Every file under `dir`, relative to it, sorted.
fn files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).with_context(|| d.display().to_string())? {
            let p = e?.path();
            if p.is_dir() {
                todo.push(p);
            } else if let Ok(rel) = p.strip_prefix(dir) {
                out.push(rel.to_path_buf());
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The files under `deploy/kubernetes` that differ from a fresh render: changed or missing
/// ones, and generated ones the chart no longer renders.
pub fn stale() -> anyhow::Result<Vec<String>> {
    let tmp = tempfile::tempdir()?;
    render(tmp.path())?;
    let committed = workspace_root().join("deploy/kubernetes");
    let mut out = Vec::new();
    let fresh = files(tmp.path())?;
    for rel in &fresh {
        let want = std::fs::read(tmp.path().join(rel))?;
        let have = std::fs::read(committed.join(rel)).unwrap_or_default();
        if have != want {
            out.push(format!("deploy/kubernetes/{}", rel.display()));
        }
    }
    for rel in files(&committed)? {
        let text = std::fs::read_to_string(committed.join(&rel)).unwrap_or_default();
        if text.starts_with(MARK) && !fresh.contains(&rel) {
            out.push(format!(
                "deploy/kubernetes/{} (no longer rendered)",
                rel.display()
            ));
        }
    }
    Ok(out)
}

/// Renders the chart into `deploy/kubernetes`.
pub fn write_all() -> anyhow::Result<()> {
    render(&workspace_root().join("deploy/kubernetes"))
}

/// `kubernetes-validate --strict` against the Kubernetes 1.37 schemas (PyPI, in the
/// project's venv): whether every file passed, and what it printed.
pub fn validate(files: &[PathBuf]) -> anyhow::Result<(bool, String)> {
    let exe = workspace_root().join(".deps/python-venv/bin/kubernetes-validate");
    anyhow::ensure!(
        exe.exists(),
        "{} missing: run integration/scripts/install-deps.sh (make test does)",
        exe.display()
    );
    crate::process::run_text(
        std::process::Command::new(exe)
            .args(["--strict", "--kubernetes-version", "1.37.0"])
            .args(files),
    )
}
