//! How each client's driver is built once and started per process. The drivers themselves
//! live with their clients (`clients/conformance/README.md` lists them).

use anyhow::{Context as _, bail};
use lock_integration::paths::{workspace_bin, workspace_root};
use std::path::{Path, PathBuf};
use tokio::process::Command;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    Rust,
    Python,
    Node,
    Go,
    Java,
}

impl Lang {
    pub fn name(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::Node => "node",
            Lang::Go => "go",
            Lang::Java => "java",
        }
    }
}

/// A driver ready to start: the program and its fixed arguments and environment.
#[derive(Debug, Clone)]
pub struct Launcher {
    pub lang: Lang,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    dir: PathBuf,
}

impl Launcher {
    /// A command for one driver process (the caller adds the process's environment).
    /// Each driver is started as the program itself, never through a shell, so SIGSTOP
    /// and SIGKILL reach the process that holds the client.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .current_dir(&self.dir)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env_remove("LOCK_INSTANCE")
            .env_remove("SPIFFE_ENDPOINT_SOCKET");
        cmd
    }
}

fn checked(cmd: &mut std::process::Command, what: &str) -> anyhow::Result<()> {
    let out = cmd
        .output()
        .with_context(|| format!("{what}: {cmd:?} (is the toolchain installed?)"))?;
    if !out.status.success() {
        bail!(
            "{what} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Builds what `lang`'s driver needs (once per test) into `scratch`.
pub fn prepare(lang: Lang, scratch: &Path) -> anyhow::Result<Launcher> {
    let root = workspace_root();
    let launcher =
        |program: PathBuf, args: Vec<String>, env: Vec<(String, String)>, dir: PathBuf| Launcher {
            lang,
            program,
            args,
            env,
            dir,
        };
    Ok(match lang {
        Lang::Rust => launcher(
            workspace_bin("conformance-rust")?,
            vec![],
            vec![],
            root.clone(),
        ),
        Lang::Python => python(&root.join("clients/python/src"))?,
        Lang::Node => {
            let dir = root.join("clients/node");
            checked(
                std::process::Command::new(dir.join("node_modules/.bin/tsc"))
                    .args(["-p", "."])
                    .current_dir(&dir),
                "building the Node client (tsc)",
            )?;
            launcher(
                "node".into(),
                vec!["conformance/driver.mjs".into()],
                vec![],
                dir,
            )
        }
        Lang::Go => {
            let dir = root.join("clients/go");
            let bin = scratch.join("conformance-go");
            checked(
                std::process::Command::new("go")
                    .args(["build", "-o"])
                    .arg(&bin)
                    .arg("./conformance")
                    .current_dir(&dir),
                "building the Go driver",
            )?;
            launcher(bin, vec![], vec![], dir)
        }
        Lang::Java => {
            let dir = root.join("clients/java");
            checked(
                std::process::Command::new("mvn")
                    .args(["-B", "-q", "-o", "test-compile"])
                    .current_dir(&dir),
                "compiling the Java client and its driver (mvn -o test-compile)",
            )?;
            let deps = std::fs::read_to_string(dir.join("target/classpath.txt"))
                .context("target/classpath.txt (written by test-compile)")?;
            let cp = format!(
                "{}:{}:{}",
                dir.join("target/test-classes").display(),
                dir.join("target/classes").display(),
                deps.trim()
            );
            launcher(
                "java".into(),
                vec![
                    "-cp".into(),
                    cp,
                    "io.github.fencedlock.lock.conformance.Driver".into(),
                ],
                vec![],
                dir,
            )
        }
    })
}

/// The Python driver importing `lock_client` from `src` (the client's own source, or a
/// copy broken on purpose by the mutant test).
pub fn python(src: &Path) -> anyhow::Result<Launcher> {
    let root = workspace_root();
    let venv_python = root.join(".deps/python-venv/bin/python");
    if !venv_python.exists() {
        bail!(
            "{} not found: run integration/scripts/install-deps.sh",
            venv_python.display()
        );
    }
    Ok(Launcher {
        lang: Lang::Python,
        program: venv_python,
        args: vec![
            root.join("clients/python/conformance/driver.py")
                .display()
                .to_string(),
        ],
        env: vec![
            ("PYTHONPATH".into(), src.display().to_string()),
            ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
            ("PYTHONUNBUFFERED".into(), "1".into()),
        ],
        dir: root.join("clients/python"),
    })
}
