//! Registry documents (ADR-24): `lockctl registry check|diff|status|crds`.

use crate::Failure;
use clap::Subcommand;
use lock_config::registry::Enforcement;
use lock_store::registry_files;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Subcommand)]
pub enum RegistryCmd {
    /// Validate a registry directory and print each class's cost and liveness bound.
    Check {
        dir: PathBuf,
        /// Expected concurrent sessions per class, for the keepalive load estimate.
        #[arg(long, default_value_t = 1000)]
        sessions: u64,
    },
    /// What a change does: identities gaining and losing prefixes, namespaces moving
    /// region, classes changing enforcement, posture, TTL or tier (with their renewal cost
    /// and liveness bound). OLD and NEW are directories, or `REV:DIR` read from git (e.g.
    /// `origin/main:registry`). Exit 0: no change (or none risky, with --fail-on risky);
    /// 1: changes; 2: a registry is invalid.
    Diff {
        old: String,
        new: String,
        /// Expected concurrent sessions per class, for the keepalive load estimate.
        #[arg(long, default_value_t = 1000)]
        sessions: u64,
        /// Which changes make the exit status 1.
        #[arg(long, value_enum, default_value_t = FailOn::Any)]
        fail_on: FailOn,
    },
    /// Who serves which version: each Envoy's filter configuration (its
    /// `lock_edge.config_version` gauge) and each arbiter's registry (its `/status`),
    /// against what DIR compiles to. Exit 0: all current; 1: some stale; 3: unreachable.
    Status {
        dir: PathBuf,
        #[arg(long)]
        region: String,
        #[arg(long = "trust-domain", required = true)]
        trust_domains: Vec<String>,
        /// Envoy admin listeners (host:port).
        #[arg(long, value_delimiter = ',')]
        envoy_admin: Vec<String>,
        /// Arbiter admin listeners (host:port).
        #[arg(long, value_delimiter = ',')]
        arbiter_admin: Vec<String>,
    },
    /// The CustomResourceDefinitions of the registry's kinds, generated from the document
    /// types: written to OUT (one file per kind), or with --check, compared with OUT
    /// (exit 1 when they differ: regenerate).
    Crds {
        #[arg(long, default_value = "deploy/kubernetes/crds")]
        out: PathBuf,
        #[arg(long)]
        check: bool,
    },
}

/// Exit 1 when a command found differences (like diff(1)), else 0.
fn differs(found: bool) -> ExitCode {
    if found {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// `lockctl registry ...`.
pub async fn registry(cmd: RegistryCmd) -> Result<ExitCode, Failure> {
    match cmd {
        RegistryCmd::Check { dir, sessions } => check(&dir, sessions).map(|()| ExitCode::SUCCESS),
        RegistryCmd::Diff {
            old,
            new,
            sessions,
            fail_on,
        } => diff(&old, &new, sessions, fail_on).map(differs),
        RegistryCmd::Crds { out, check } => crds(&out, check).map(differs),
        RegistryCmd::Status {
            dir,
            region,
            trust_domains,
            envoy_admin,
            arbiter_admin,
        } => status(&dir, &region, &trust_domains, &envoy_admin, &arbiter_admin)
            .await
            .map(differs),
    }
}

fn check(dir: &Path, sessions: u64) -> Result<(), Failure> {
    let registry = registry_files::load(dir).map_err(|e| Failure::input(e.to_string()))?;
    println!(
        "{:<24} {:<12} {:<12} {:<10} {:>6} {:>18} {:>10}",
        "CLASS", "NAMESPACE", "PURPOSE", "ENFORCE", "TTL", "KEEPALIVES/S", "LIVENESS"
    );
    for c in registry.classes() {
        // One keepalive per session every TTL/3 (ADR-10, 11).
        let per_second = sessions as f64 * 3.0 / f64::from(c.ttl_seconds);
        println!(
            "{:<24} {:<12} {:<12} {:<10} {:>5}s {:>10.1} ({} sess) {:>9}s",
            c.name,
            c.spec.namespace,
            format!("{:?}", c.spec.purpose).to_lowercase(),
            if c.spec.enforcement == Enforcement::Fenced {
                "fenced"
            } else {
                "advisory"
            },
            c.ttl_seconds,
            per_second,
            sessions,
            c.ttl_seconds
        );
    }
    println!(
        "ok: {} namespaces, {} classes, {} identities with grants",
        registry.namespaces().count(),
        registry.classes().count(),
        registry.grants().count()
    );
    Ok(())
}

/// Which changes make `lockctl registry diff` exit 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FailOn {
    /// Any change (like diff(1)).
    Any,
    /// Only changes that widen access or weaken a guarantee.
    Risky,
}

/// Reads a registry from a directory or, for `REV:DIR` that is not a path, from git.
fn registry_at(spec: &str) -> Result<lock_config::Registry, Failure> {
    let sources = match spec.split_once(':') {
        Some((rev, dir)) if !Path::new(spec).exists() => git_sources(rev, dir)?,
        _ => registry_files::read_sources(Path::new(spec))
            .map_err(|e| Failure::input(e.to_string()))?,
    };
    lock_config::Registry::load(&sources, registry_files::today())
        .map_err(|e| Failure::input(format!("{spec}: {e}")))
}

/// Every `*.yaml`/`*.yml` directly in `dir` at git revision `rev` (in the current repo).
fn git_sources(rev: &str, dir: &str) -> Result<Vec<lock_config::registry::Source>, Failure> {
    let git = |args: &[&str]| -> Result<String, Failure> {
        let out = std::process::Command::new("git")
            .args(args)
            .output()
            .map_err(|e| Failure::input(format!("git: {e}")))?;
        if !out.status.success() {
            return Err(Failure::input(format!(
                "git {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let dir = dir.trim_end_matches('/');
    let listing = git(&["ls-tree", "--name-only", rev, &format!("{dir}/")])?;
    let mut names: Vec<&str> = listing
        .lines()
        .filter(|n| n.ends_with(".yaml") || n.ends_with(".yml"))
        .collect();
    names.sort_unstable();
    if names.is_empty() {
        return Err(Failure::input(format!("{rev}:{dir}: no *.yaml documents")));
    }
    names
        .into_iter()
        .map(|name| {
            Ok(lock_config::registry::Source {
                name: format!("{rev}:{name}"),
                text: git(&["show", &format!("{rev}:{name}")])?,
            })
        })
        .collect()
}

/// `lockctl registry diff OLD NEW`: prints the changes; Ok(true) when the exit status is 1.
fn diff(old: &str, new: &str, sessions: u64, fail_on: FailOn) -> Result<bool, Failure> {
    use lock_config::registry::diff::{Change, diff, keepalives_per_second};
    let (before, after) = (registry_at(old)?, registry_at(new)?);
    let changes = diff(&before, &after);
    if changes.is_empty() {
        println!("no change");
        return Ok(false);
    }
    let mut touched = std::collections::BTreeMap::new();
    for c in &changes {
        println!("{c}{}", if c.risky() { "   [risk]" } else { "" });
        if let Change::ClassChanged { name, ttl, .. } = c {
            touched.insert(name.clone(), *ttl);
        }
    }
    for (name, (from, to)) in touched {
        println!(
            "  {name}: keepalives/s for {sessions} sessions {:.1} -> {:.1}; liveness bound {from}s -> {to}s",
            keepalives_per_second(sessions, from),
            keepalives_per_second(sessions, to),
        );
    }
    // What durable fairness costs in consensus writes (ADR-14), per class it changes for.
    for cost in changes.iter().filter_map(Change::cost) {
        println!("  {cost}");
    }
    let risky = changes.iter().filter(|c| c.risky()).count();
    println!("{} change(s), {risky} risky", changes.len());
    Ok(match fail_on {
        FailOn::Any => true,
        FailOn::Risky => risky > 0,
    })
}

/// What one component serves, as `registry status` finds it.
enum Served {
    Version(u64),
    Unreachable(String),
}

/// `lockctl registry status`: Ok(true) when the exit status is 1 (something stale).
async fn status(
    dir: &Path,
    region: &str,
    trust_domains: &[String],
    envoys: &[String],
    arbiters: &[String],
) -> Result<bool, Failure> {
    use lock_config::ecds::{config_version, version_text};
    let config = crate::grants::filter_config(dir, region, trust_domains)?;
    let filter_want = config_version(
        serde_json::to_string(&config)
            .map_err(|e| Failure::input(e.to_string()))?
            .as_bytes(),
    );
    let sources = registry_files::read_sources(dir).map_err(|e| Failure::input(e.to_string()))?;
    let arbiter_want = lock_config::registry::sources_version(&sources);
    let mut rows = Vec::new();
    for addr in envoys {
        let path = "/stats?filter=^wasmcustom.lock_edge.config_version$";
        let served = match lock_store::admin::get(addr, path).await {
            Ok(body) => body
                .lines()
                .find_map(|l| l.strip_prefix("wasmcustom.lock_edge.config_version: "))
                .and_then(|v| v.trim().parse().ok())
                .map_or(
                    Served::Unreachable(
                        "no lock_edge.config_version gauge (no configuration accepted?)".into(),
                    ),
                    Served::Version,
                ),
            Err(e) => Served::Unreachable(e),
        };
        rows.push(("envoy", addr, served, filter_want));
    }
    for addr in arbiters {
        let served = match lock_store::admin::get(addr, "/status").await {
            Ok(body) => serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| u64::from_str_radix(v["registry_version"].as_str()?, 16).ok())
                .map_or(
                    Served::Unreachable("no registry_version in /status".into()),
                    Served::Version,
                ),
            Err(e) => Served::Unreachable(e),
        };
        rows.push(("arbiter", addr, served, arbiter_want));
    }
    println!(
        "{:<8} {:<24} {:<14} {:<14} STATE",
        "ROLE", "ADMIN", "SERVES", "EXPECTED"
    );
    let (mut stale, mut unreachable) = (0, 0);
    for (role, addr, served, want) in &rows {
        let (serves, state) = match served {
            Served::Version(v) if v == want => (version_text(*v), "current".to_owned()),
            Served::Version(v) => {
                stale += 1;
                (version_text(*v), "STALE".to_owned())
            }
            Served::Unreachable(e) => {
                unreachable += 1;
                ("-".to_owned(), format!("UNREACHABLE: {e}"))
            }
        };
        println!(
            "{role:<8} {addr:<24} {serves:<14} {:<14} {state}",
            version_text(*want)
        );
    }
    if unreachable > 0 {
        return Err(Failure::unreachable(format!(
            "{unreachable} component(s) did not answer"
        )));
    }
    Ok(stale > 0)
}

/// `lockctl registry crds`: writes the generated CRDs to `out`, or (check) reports the
/// files that differ from what would be written. Ok(true): some differ.
fn crds(out: &Path, check: bool) -> Result<bool, Failure> {
    let io = |e: std::io::Error| Failure::input(format!("{}: {e}", out.display()));
    let mut differ = false;
    if !check {
        std::fs::create_dir_all(out).map_err(io)?;
    }
    for (name, text) in lock_kube::crd::files() {
        let path = out.join(&name);
        if check {
            if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                println!(
                    "{}: differs from the document types; run `lockctl registry crds`",
                    path.display()
                );
                differ = true;
            }
        } else {
            std::fs::write(&path, text).map_err(io)?;
            println!("wrote {}", path.display());
        }
    }
    if check && !differ {
        println!("the CRDs in {} match the document types", out.display());
    }
    Ok(differ)
}
