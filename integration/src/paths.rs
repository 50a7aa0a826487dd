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

/// The etcd release line the harness runs, from `LOCK_ETCD_LINE` (`make ... ETCD=3.6`; `LOCK_ETCD` is the etcd endpoints of lockctl and the daemons): Debian's
/// 3.5 (the default) or 3.6 built from the Go module proxy (integration/etcd).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EtcdLine {
    V3_5,
    V3_6,
}

impl EtcdLine {
    /// The line `LOCK_ETCD_LINE` names; 3.5 when it is unset. Any other value is a mistake worth
    /// stopping for, not a silent default.
    pub fn current() -> Self {
        match std::env::var("LOCK_ETCD_LINE").as_deref() {
            Err(_) | Ok("") | Ok("3.5") => EtcdLine::V3_5,
            Ok("3.6") => EtcdLine::V3_6,
            Ok(other) => panic!("LOCK_ETCD_LINE={other}: the harness runs etcd 3.5 or 3.6"),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            EtcdLine::V3_5 => "3.5",
            EtcdLine::V3_6 => "3.6",
        }
    }

    /// The folder its etcd, etcdctl and etcdutl are linked in.
    pub fn bin_dir(self) -> PathBuf {
        match self {
            EtcdLine::V3_5 => workspace_root().join(".deps/bin"),
            EtcdLine::V3_6 => workspace_root().join(".deps/etcd-3.6/bin"),
        }
    }

    /// Lease checkpoints on (ADR-05/10). 3.6 names them as feature gates and deprecates the
    /// 3.5 flags (3.7 removes them).
    pub fn checkpoint_flags(self) -> &'static [&'static str] {
        match self {
            EtcdLine::V3_5 => &[
                "--experimental-enable-lease-checkpoint",
                "--experimental-enable-lease-checkpoint-persist",
            ],
            EtcdLine::V3_6 => &["--feature-gates=LeaseCheckpoint=true,LeaseCheckpointPersist=true"],
        }
    }
}

/// `name` (etcd, etcdctl, etcdutl) of etcd `line`; `LOCK_DEPS_BIN` overrides the folder.
pub fn etcd_tool(line: EtcdLine, name: &str) -> anyhow::Result<PathBuf> {
    installed(line.bin_dir(), name)
}

/// A real component installed by the install script (`etcd`, `etcdctl`, `etcdutl`, `envoy`).
/// etcd's three come from the line `LOCK_ETCD_LINE` selects ([`EtcdLine`]); `LOCK_DEPS_BIN`
/// overrides the folder of everything.
pub fn dep(name: &str) -> anyhow::Result<PathBuf> {
    match name {
        "etcd" | "etcdctl" | "etcdutl" => etcd_tool(EtcdLine::current(), name),
        _ => installed(workspace_root().join(".deps/bin"), name),
    }
}

/// `name` in `dir` (or in `LOCK_DEPS_BIN`), or how to get it.
fn installed(dir: PathBuf, name: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::var_os("LOCK_DEPS_BIN")
        .map(PathBuf::from)
        .unwrap_or(dir);
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
