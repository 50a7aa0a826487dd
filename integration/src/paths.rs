//! Where the harness finds things: the workspace, the installed real components (`.deps`,
//! filled by integration/scripts/install-deps.sh) and the workspace's built binaries.

use anyhow::{Context as _, bail};
use std::path::{Path, PathBuf};

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// A real component installed by the install script (`etcd`, `etcdctl`, `etcdutl`, `envoy`).
/// `LOCK_DEPS_BIN` overrides the folder.
pub fn dep(name: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::var_os("LOCK_DEPS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".deps/bin"));
    let p = dir.join(name);
    if !p.exists() {
        bail!(
            "{} not found: run integration/scripts/install-deps.sh (make test does)",
            p.display()
        );
    }
    Ok(p)
}

/// The target directory's profile folder this binary runs from.
fn profile_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("current_exe")?;
    // target/<profile>/deps/<test> or target/<profile>/<bin>
    let mut dir = exe.parent().context("exe has no parent")?.to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    Ok(dir)
}

/// An example of this workspace (`singleton_worker`), built by `make build` and
/// `cargo test --workspace`.
pub fn workspace_example(name: &str) -> anyhow::Result<PathBuf> {
    let p = profile_dir()?.join("examples").join(name);
    if !p.exists() {
        bail!(
            "{} not found: run `cargo build --workspace --examples` first (make build does)",
            p.display()
        );
    }
    Ok(p)
}

/// A binary of this workspace (`arbiter`, `lockctl`, `devstack`), built by `cargo build`.
pub fn workspace_bin(name: &str) -> anyhow::Result<PathBuf> {
    let p = profile_dir()?.join(name);
    if !p.exists() {
        bail!(
            "{} not found: run `cargo build --workspace` first (make test does)",
            p.display()
        );
    }
    Ok(p)
}

/// The filter built for wasm32-wasip1 (release), or `LOCK_FILTER_WASM`.
pub fn filter_wasm() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("LOCK_FILTER_WASM") {
        return Ok(PathBuf::from(p));
    }
    let p = workspace_root().join("target/wasm32-wasip1/release/lock_filter.wasm");
    if !p.exists() {
        bail!(
            "{} not found: run `cargo build -p lock-filter --target wasm32-wasip1 --release` (make test does)",
            p.display()
        );
    }
    Ok(p)
}

/// The filter's debug build: the only one that honours `unsafeTestSwitches` (the boundary
/// tests switch one edge check off with it to show they catch its absence).
pub fn filter_wasm_debug() -> anyhow::Result<PathBuf> {
    let p = workspace_root().join("target/wasm32-wasip1/debug/lock_filter.wasm");
    if !p.exists() {
        bail!(
            "{} not found: run `cargo build -p lock-filter --target wasm32-wasip1` (make test does)",
            p.display()
        );
    }
    Ok(p)
}

/// The dev registry shipped with the project.
pub fn dev_registry() -> PathBuf {
    workspace_root().join("config/registry/dev")
}

/// Temp file + rename, for every file a watcher reads (Envoy's SDS and ECDS files, the
/// registry folder): a watcher sees whole files only.
pub fn write_atomic(path: &Path, contents: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}
