//! Reads a registry directory (every `*.yaml`/`*.yml`, sorted) and validates it with the
//! one validation function of lock-config, dated today (UTC).

use lock_config::Registry;
use lock_config::registry::{Date, RegistryErrors, Source};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: no *.yaml documents")]
    Empty { path: String },
    #[error(transparent)]
    Invalid(#[from] RegistryErrors),
}

pub fn today() -> Date {
    let days = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400);
    Date::from_unix_days(i64::try_from(days).unwrap_or(0))
}

pub fn read_sources(dir: &Path) -> Result<Vec<Source>, LoadError> {
    let io = |source| LoadError::Io {
        path: dir.display().to_string(),
        source,
    };
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(LoadError::Empty {
            path: dir.display().to_string(),
        });
    }
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).map_err(|source| LoadError::Io {
                path: p.display().to_string(),
                source,
            })?;
            Ok(Source {
                name: p.display().to_string(),
                text,
            })
        })
        .collect()
}

pub fn load(dir: &Path) -> Result<Registry, LoadError> {
    Ok(Registry::load(&read_sources(dir)?, today())?)
}

/// [`load`], with the registry's version (`lock_config::registry::sources_version`).
pub fn load_versioned(dir: &Path) -> Result<(Registry, u64), LoadError> {
    let sources = read_sources(dir)?;
    let version = lock_config::registry::sources_version(&sources);
    Ok((Registry::load(&sources, today())?, version))
}
