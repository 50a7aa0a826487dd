//! Where an entity-tier key lives (ADR-09): rendezvous (highest-random-weight) hashing of
//! the key's *home* — its namespace and the first `depth` segments of its path — over the
//! shards of a versioned map, with per-namespace overrides. Pure: no I/O.
//!
//! Rendezvous hashing gives each (shard, home) pair a score and homes a key on the shard
//! with the highest score. Adding a shard moves exactly the homes whose new top score is
//! the new shard's (about 1/(N+1) of them) and nothing between old shards; removing one
//! moves only its own homes. Keys sharing a home prefix stay together, so a namespace's
//! related keys are on one cluster at depth 1, or spread at depth 0.
//!
//! The score is xxh3-64 of `shard \0 home`: fast, stable across versions and platforms
//! (the map is shared by every arbiter), and well mixed for short strings.
//!
//! The map lives on the coord cluster as a [`ShardsDoc`] (the map in force and, during a
//! move, the next one). Each shard carries a [`ShardFence`] in its own epoch record, which
//! every grant transaction already compares: [`placement`] decides, from the document an
//! arbiter holds and the fence the shard itself carries, whether a grant may happen here.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use xxhash_rust::xxh3::xxh3_64;

pub mod moves;

/// One entity shard: an etcd cluster, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Shard {
    pub name: String,
    /// Its etcd endpoints.
    #[serde(default)]
    pub endpoints: Vec<String>,
}

/// The shard map: a versioned document (ADR-09).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ShardMap {
    pub version: u64,
    /// Path segments after the namespace that make a key's home (0: the namespace alone).
    pub depth: u8,
    pub shards: Vec<Shard>,
    /// Namespaces pinned to a shard ("right elsewhere": a tenant with its own cluster).
    #[serde(default)]
    pub overrides: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardMapError {
    #[error("a shard map needs at least one shard")]
    NoShards,
    #[error("shard {0} is listed twice")]
    Duplicate(String),
    #[error("namespace {0} is pinned to shard {1}, which is not in the map")]
    UnknownOverride(String, String),
    #[error("shard names must be non-empty")]
    EmptyName,
    #[error("`coord` names the coord cluster; a shard may not take it")]
    Reserved,
    #[error("shards {0} and {1} have the same session-id tag: rename one")]
    TagCollision(String, String),
}

/// A key's home: its namespace and first `depth` path segments.
pub fn home(key: &str, depth: u8) -> &str {
    let mut end = key.len();
    let mut seen = 0usize;
    for (i, c) in key.char_indices() {
        if c == '/' {
            if seen == usize::from(depth) {
                end = i;
                break;
            }
            seen += 1;
        }
    }
    &key[..end]
}

fn score(shard: &str, home: &str) -> u64 {
    let mut buf = Vec::with_capacity(shard.len() + home.len() + 1);
    buf.extend_from_slice(shard.as_bytes());
    buf.push(0);
    buf.extend_from_slice(home.as_bytes());
    xxh3_64(&buf)
}

impl ShardMap {
    pub fn validate(&self) -> Result<(), ShardMapError> {
        if self.shards.is_empty() {
            return Err(ShardMapError::NoShards);
        }
        let mut names = std::collections::BTreeSet::new();
        for s in &self.shards {
            if s.name.is_empty() {
                return Err(ShardMapError::EmptyName);
            }
            if s.name == COORD {
                return Err(ShardMapError::Reserved);
            }
            if !names.insert(s.name.as_str()) {
                return Err(ShardMapError::Duplicate(s.name.clone()));
            }
        }
        let mut tags = BTreeMap::from([(lease_tag(COORD), COORD)]);
        for s in &self.shards {
            if let Some(other) = tags.insert(lease_tag(&s.name), s.name.as_str()) {
                return Err(ShardMapError::TagCollision(
                    s.name.clone(),
                    other.to_owned(),
                ));
            }
        }
        for (ns, shard) in &self.overrides {
            if !names.contains(shard.as_str()) {
                return Err(ShardMapError::UnknownOverride(ns.clone(), shard.clone()));
            }
        }
        Ok(())
    }

    /// The shard `key` lives on (by name). Ties (astronomically rare) go to the smaller
    /// name, so every arbiter agrees.
    pub fn shard_of(&self, key: &str) -> &str {
        let ns = key.split('/').next().unwrap_or(key);
        if let Some(pinned) = self.overrides.get(ns) {
            return pinned;
        }
        let h = home(key, self.depth);
        self.shards
            .iter()
            .map(|s| (score(&s.name, h), std::cmp::Reverse(s.name.as_str())))
            .max()
            .map_or("", |(_, std::cmp::Reverse(name))| name)
    }
}

/// The name the coord cluster goes by (lease tags, routing). No shard may take it.
pub const COORD: &str = "coord";

/// The shard map document on the coord cluster (`/sys/shards`): the map in force and,
/// while a move is under way, the map it moves to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ShardsDoc {
    pub current: ShardMap,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<ShardMap>,
}

impl ShardsDoc {
    /// The map of `version`, if this document has it.
    pub fn map(&self, version: u64) -> Option<&ShardMap> {
        std::iter::once(&self.current)
            .chain(self.pending.as_ref())
            .find(|m| m.version == version)
    }

    /// Every shard named by either map (the clusters an arbiter needs a client for).
    pub fn shards(&self) -> impl Iterator<Item = &Shard> {
        let pending = self.pending.iter().flat_map(|m| m.shards.iter());
        self.current
            .shards
            .iter()
            .chain(pending.filter(|s| !self.current.shards.iter().any(|c| c.name == s.name)))
    }
}

/// What a shard's own epoch record says it serves: the map version in force there and,
/// during a move, the version being moved to. Written by the move on every shard, so every
/// grant transaction (which compares the epoch record unchanged) is fenced by it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ShardFence {
    /// This shard's name in the map.
    pub name: String,
    pub version: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<u64>,
}

/// May `key` be granted on the shard whose fence is `fence`, by an arbiter holding `doc`?
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Yes: the shard serves this key under the map it names.
    Here,
    /// The key lives on another shard (by the map this shard serves).
    Elsewhere(String),
    /// The key is in a range being moved: grants wait for the move (retryable).
    Moving,
    /// The document does not have the map version(s) the fence names: re-read it.
    StaleDoc,
}

/// The decision, on plain data. The shard's fence is the authority (it lives where the
/// grant is written and is compared by the grant's own transaction); the document only
/// supplies the maps the fence names.
pub fn placement(doc: &ShardsDoc, fence: &ShardFence, key: &str) -> Placement {
    let Some(current) = doc.map(fence.version) else {
        return Placement::StaleDoc;
    };
    let home = current.shard_of(key);
    if let Some(next) = fence.pending {
        let Some(next) = doc.map(next) else {
            return Placement::StaleDoc;
        };
        if next.shard_of(key) != home {
            return Placement::Moving;
        }
    }
    if home == fence.name {
        Placement::Here
    } else {
        Placement::Elsewhere(home.to_owned())
    }
}

/// A cluster's lease tag: the top 8 bits (below the sign) of every session id it issues,
/// so any arbiter can tell from a session id alone which cluster holds it.
pub fn lease_tag(cluster: &str) -> u8 {
    // Never 0: an untagged (single-cluster) id is not mistaken for a tagged one by chance
    // more often than 1 in 256.
    (xxh3_64(cluster.as_bytes()) % 255) as u8 + 1
}

/// The tag bits of a session id.
pub fn tag_of(lease: i64) -> u8 {
    ((lease >> 55) & 0xff) as u8
}

/// A session id with `tag` over `random` (any bits; the top 9 are replaced). Positive.
pub fn tagged_lease(tag: u8, random: u64) -> i64 {
    let id = (u64::from(tag) << 55) | (random & ((1 << 55) - 1));
    i64::try_from(id).unwrap_or(i64::MAX).max(1)
}

/// How a change of map moves `keys`: (moved, and for each (from, to) how many).
pub fn moves<'a>(
    old: &ShardMap,
    new: &ShardMap,
    keys: impl IntoIterator<Item = &'a str>,
) -> (usize, BTreeMap<(String, String), usize>) {
    let mut total = 0;
    let mut by = BTreeMap::new();
    for k in keys {
        let (a, b) = (old.shard_of(k), new.shard_of(k));
        if a != b {
            total += 1;
            *by.entry((a.to_owned(), b.to_owned())).or_insert(0) += 1;
        }
    }
    (total, by)
}

/// Keys per shard.
pub fn load<'a>(
    map: &ShardMap,
    keys: impl IntoIterator<Item = &'a str>,
) -> BTreeMap<String, usize> {
    let mut out: BTreeMap<String, usize> = map.shards.iter().map(|s| (s.name.clone(), 0)).collect();
    for k in keys {
        *out.entry(map.shard_of(k).to_owned()).or_insert(0) += 1;
    }
    out
}

/// A map of `n` shards named `shard-0..n`.
pub fn uniform(n: usize, depth: u8) -> ShardMap {
    ShardMap {
        version: 1,
        depth,
        shards: (0..n)
            .map(|i| Shard {
                name: format!("shard-{i}"),
                endpoints: Vec::new(),
            })
            .collect(),
        overrides: BTreeMap::new(),
    }
}

/// One simulated step: `n` shards, one added, over `keys`.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub shards: usize,
    pub keys: usize,
    pub moved: usize,
    /// Keys moved between two shards that were both there before (rendezvous: always 0).
    pub moved_between_old: usize,
    /// moved / keys, and the ideal 1/(n+1).
    pub fraction: f64,
    pub ideal: f64,
    /// Largest and smallest shard after the step, over the mean.
    pub max_over_mean: f64,
    pub min_over_mean: f64,
}

/// Adds a shard to `uniform(n)` and measures what moves and how balanced the result is.
pub fn simulate_add(n: usize, keys: &[String], depth: u8) -> Step {
    let old = uniform(n, depth);
    let new = uniform(n + 1, depth);
    let added = format!("shard-{n}");
    let (moved, by) = moves(&old, &new, keys.iter().map(String::as_str));
    let moved_between_old = by
        .iter()
        .filter(|((_, to), _)| *to != added)
        .map(|(_, c)| c)
        .sum();
    let per = load(&new, keys.iter().map(String::as_str));
    let mean = keys.len() as f64 / (n + 1) as f64;
    let max = per.values().copied().max().unwrap_or(0) as f64;
    let min = per.values().copied().min().unwrap_or(0) as f64;
    Step {
        shards: n,
        keys: keys.len(),
        moved,
        moved_between_old,
        fraction: moved as f64 / keys.len().max(1) as f64,
        ideal: 1.0 / (n + 1) as f64,
        max_over_mean: max / mean,
        min_over_mean: min / mean,
    }
}

/// Deterministic test keys: `ns<i % namespaces>/obj-<i>/part`.
pub fn sample_keys(count: usize, namespaces: usize) -> Vec<String> {
    (0..count)
        .map(|i| format!("ns{}/obj-{i}/part", i % namespaces.max(1)))
        .collect()
}

#[cfg(test)]
mod tests;
