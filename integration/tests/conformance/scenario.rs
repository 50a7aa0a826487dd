//! A scenario as written in `clients/conformance/*.yaml`: processes, then steps. Plain
//! data; `clients/conformance/README.md` is its reference.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    pub about: String,
    #[serde(default)]
    pub needs: Vec<Need>,
    pub processes: BTreeMap<String, ProcessSpec>,
    pub steps: Vec<Step>,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Need {
    /// PostgreSQL for `fence_write`.
    Postgres,
    /// Three etcd members, for `quorum`.
    Quorum,
    /// Relays in front of the edge, for `link`.
    Relay,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct ProcessSpec {
    pub identity: Identity,
    /// The pod's `LOCK_INSTANCE` (unset: the process has none).
    pub lock_instance: Option<String>,
    /// Reaches the edge through a relay of its own.
    #[serde(default)]
    pub relay: bool,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Identity {
    Me,
    Other,
    Limited,
    Anonymous,
}

/// One step. `do` names it; the other fields are what that step reads.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct Step {
    #[serde(rename = "do")]
    pub action: String,
    pub process: Option<String>,
    pub client: Option<String>,
    pub instance_of: Option<String>,
    pub key: Option<String>,
    pub keys: Option<Vec<String>>,
    pub hold: Option<String>,
    pub wait_ms: Option<u64>,
    pub expect: Option<String>,
    #[serde(rename = "as")]
    pub as_call: Option<String>,
    pub call: Option<String>,
    pub within_ms: Option<u64>,
    pub for_ms: Option<u64>,
    pub after_fenced: Option<String>,
    pub ms: Option<u64>,
    pub can_start: Option<bool>,
    pub fenced: Option<bool>,
    pub first: Option<String>,
    pub then: Option<String>,
    pub obs: Option<String>,
    pub at_least: Option<usize>,
    pub held: Option<bool>,
    pub kind: Option<String>,
    pub shape: Option<String>,
    /// `quorum`'s `lose` / `restore`.
    #[serde(rename = "action")]
    pub quorum: Option<String>,
    pub count: Option<usize>,
    pub expect_some: Option<String>,
}

impl Step {
    /// A field the step needs, or an error naming it.
    pub fn need<'a, T>(&self, field: &'a Option<T>, name: &str) -> anyhow::Result<&'a T> {
        field
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("step `{}` needs `{name}`", self.action))
    }
}

/// Every scenario in `dir`, by file name.
pub fn load_all(dir: &Path) -> anyhow::Result<Vec<(PathBuf, Scenario)>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        // The broken clients that prove the scenarios, not a scenario.
        .filter(|p| !p.ends_with("mutants.yaml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p)?;
            let s: Scenario = serde_yaml_ng::from_str(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
            Ok((p, s))
        })
        .collect()
}

/// The prefixes the placeholders stand for (the test registry's classes).
pub struct Prefixes {
    pub fast: String,
    pub slow: String,
    pub shared: String,
    pub fair: String,
    pub denied: String,
}

/// `{fast}/x` → `pay/fast/<run>/x`: the run's own segment right after the class prefix,
/// so scenarios run on one stack (and reruns) never meet.
pub fn expand(key: &str, p: &Prefixes, run: &str) -> String {
    let mut out = key.to_owned();
    for (name, prefix) in [
        ("{fast}", &p.fast),
        ("{slow}", &p.slow),
        ("{shared}", &p.shared),
        ("{fair}", &p.fair),
        ("{denied}", &p.denied),
    ] {
        out = out.replace(name, &format!("{prefix}/{run}"));
    }
    out
}
