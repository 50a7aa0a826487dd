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
//! Not built yet (issue 24): the arbiter routing by this map, the map document on the coord
//! cluster and its watch, and moves under an epoch advance. This module is the decision
//! those will share, and what the simulation measures.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use xxhash_rust::xxh3::xxh3_64;

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
            if !names.insert(s.name.as_str()) {
                return Err(ShardMapError::Duplicate(s.name.clone()));
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
mod tests {
    use super::*;

    #[test]
    fn home_table() {
        for (key, depth, want) in [
            ("pay/ledger/42", 0, "pay"),
            ("pay/ledger/42", 1, "pay/ledger"),
            ("pay/ledger/42", 2, "pay/ledger/42"),
            ("pay/ledger/42", 9, "pay/ledger/42"),
            ("pay", 1, "pay"),
        ] {
            assert_eq!(home(key, depth), want, "{key} at {depth}");
        }
    }

    #[test]
    fn keys_of_one_home_stay_together_and_overrides_pin() {
        let mut m = uniform(8, 1);
        let a = m.shard_of("pay/ledger/1").to_owned();
        for i in 0..50 {
            assert_eq!(m.shard_of(&format!("pay/ledger/{i}")), a);
        }
        m.overrides.insert("pay".into(), "shard-3".into());
        assert_eq!(m.shard_of("pay/anything/1"), "shard-3");
        assert_eq!(m.validate(), Ok(()));
        m.overrides.insert("x".into(), "shard-99".into());
        assert_eq!(
            m.validate(),
            Err(ShardMapError::UnknownOverride(
                "x".into(),
                "shard-99".into()
            ))
        );
    }

    #[test]
    fn validation_table() {
        let mut dup = uniform(2, 1);
        dup.shards[1].name = "shard-0".into();
        let cases = [
            (uniform(0, 1), Err(ShardMapError::NoShards)),
            (dup, Err(ShardMapError::Duplicate("shard-0".into()))),
            (uniform(3, 1), Ok(())),
        ];
        for (m, want) in cases {
            assert_eq!(m.validate(), want);
        }
    }

    #[test]
    fn adding_a_shard_moves_about_one_in_n_plus_one_and_only_to_it() {
        let keys = sample_keys(100_000, 1000);
        for n in [1, 2, 4, 9] {
            // depth 1: every key its own home here (obj-<i>).
            let s = simulate_add(n, &keys, 1);
            assert_eq!(s.moved_between_old, 0, "{s:?}");
            assert!(
                (s.fraction - s.ideal).abs() < s.ideal * 0.1,
                "n={n}: moved {:.4}, ideal {:.4}",
                s.fraction,
                s.ideal
            );
        }
    }

    #[test]
    fn removing_a_shard_moves_only_its_keys() {
        let keys = sample_keys(20_000, 100);
        let old = uniform(5, 1);
        let mut new = old.clone();
        new.shards.retain(|s| s.name != "shard-2");
        let (moved, by) = moves(&old, &new, keys.iter().map(String::as_str));
        assert!(by.keys().all(|(from, _)| from == "shard-2"), "{by:?}");
        let had = load(&old, keys.iter().map(String::as_str))["shard-2"];
        assert_eq!(moved, had);
    }
}
