//! `lockctl grants compile|push`: the edge filter's configuration compiled from a registry
//! for one region, and pushed to Envoy as its file-based ECDS resource (DESIGN 5).

use crate::Failure;
use clap::Subcommand;
use lock_config::FilterConfig;
use lock_store::registry_files;
use std::path::{Path, PathBuf};

#[derive(Subcommand)]
pub enum GrantsCmd {
    /// Print the filter's plugin configuration (JSON) for one region.
    Compile {
        dir: PathBuf,
        #[arg(long)]
        region: String,
        #[arg(long = "trust-domain", required = true)]
        trust_domains: Vec<String>,
    },
    /// Validate the registry, compile the filter configuration and write Envoy's ECDS
    /// resource atomically (temp file + rename); Envoy applies it without a restart.
    Push {
        dir: PathBuf,
        #[arg(long)]
        region: String,
        #[arg(long = "trust-domain", required = true)]
        trust_domains: Vec<String>,
        /// The ECDS file Envoy's `path_config_source` watches.
        #[arg(long)]
        out: PathBuf,
        /// lock_filter.wasm as Envoy should load it (keep it unchanged between pushes so
        /// Envoy keeps the VM and its rate buckets).
        #[arg(long)]
        wasm: PathBuf,
    },
}

/// `lockctl grants ...`.
pub fn grants(cmd: GrantsCmd) -> Result<(), Failure> {
    match cmd {
        GrantsCmd::Compile {
            dir,
            region,
            trust_domains,
        } => grants_compile(&dir, &region, &trust_domains),
        GrantsCmd::Push {
            dir,
            region,
            trust_domains,
            out,
            wasm,
        } => grants_push(&dir, &region, &trust_domains, &out, &wasm),
    }
}

/// The filter configuration for `region`, validated with the same code the filter runs.
pub fn filter_config(
    dir: &Path,
    region: &str,
    trust_domains: &[String],
) -> Result<FilterConfig, Failure> {
    let registry = registry_files::load(dir).map_err(|e| Failure::input(e.to_string()))?;
    let config = FilterConfig::from_registry(&registry, region, trust_domains, None);
    // The filter compiles it again in on_configure; compile here so a push never ships a
    // configuration the filter would refuse.
    config
        .compile()
        .map_err(|e| Failure::input(format!("filter configuration: {e}")))?;
    Ok(config)
}

fn grants_compile(dir: &Path, region: &str, trust_domains: &[String]) -> Result<(), Failure> {
    println!("{}", filter_config(dir, region, trust_domains)?.to_json());
    Ok(())
}

fn grants_push(
    dir: &Path,
    region: &str,
    trust_domains: &[String],
    out: &Path,
    wasm: &Path,
) -> Result<(), Failure> {
    let config = filter_config(dir, region, trust_domains)?;
    // What the push changes against what is live (the file Envoy watches).
    let live = std::fs::read(out)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|doc| lock_config::ecds::configuration_of(&doc));
    match &live {
        Some(live) => {
            let changes = lock_config::registry::diff::diff_filter(live, &config);
            if changes.is_empty() {
                println!("no change to grants or namespaces against what is live");
            }
            for c in changes {
                println!("{c}{}", if c.risky() { "   [widens]" } else { "" });
            }
        }
        None => println!("nothing live at {} yet: every grant is new", out.display()),
    }
    let doc = lock_config::ecds::discovery_response(&config, &wasm.display().to_string());
    let text = serde_json::to_string_pretty(&doc).map_err(|e| Failure::input(e.to_string()))?;
    let tmp = out.with_extension("tmp");
    let write = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, out));
    write.map_err(|e| Failure::input(format!("{}: {e}", out.display())))?;
    println!(
        "pushed {} grants for region {region} to {} (version {})",
        config.grants.len(),
        out.display(),
        doc["version_info"].as_str().unwrap_or_default()
    );
    Ok(())
}
