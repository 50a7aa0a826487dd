//! The shard map's changes (ADR-09), pure: the next map for each operator move, and which
//! shards receive keys in a change. `lock_arbiter::rehome` runs the move protocol on them.

use super::{Shard, ShardMap};
use std::collections::{BTreeMap, BTreeSet};

/// The map after adding `shard`.
pub fn with_shard(map: &ShardMap, shard: Shard) -> ShardMap {
    let mut next = map.clone();
    next.version += 1;
    next.shards.push(shard);
    next
}

/// The map after pinning namespace `ns` to `to` (None: back to hashing).
pub fn with_pin(map: &ShardMap, ns: &str, to: Option<&str>) -> ShardMap {
    let mut next = map.clone();
    next.version += 1;
    match to {
        Some(to) => next.overrides.insert(ns.to_owned(), to.to_owned()),
        None => next.overrides.remove(ns),
    };
    next
}

/// The map without shard `name` (its keys re-homed over the rest; pins to it dropped).
pub fn without_shard(map: &ShardMap, name: &str) -> ShardMap {
    let mut next = map.clone();
    next.version += 1;
    next.shards.retain(|s| s.name != name);
    next.overrides.retain(|_, to| to != name);
    next
}

/// Which shards may receive keys in a change from `old` to `new`, and from which: a new
/// shard and a new pin's target receive; when a shard leaves, every remaining one may.
/// (Rendezvous hashing moves keys only onto an added shard or off a removed one.)
pub fn receivers(old: &ShardMap, new: &ShardMap) -> BTreeMap<String, BTreeSet<String>> {
    let old_names: BTreeSet<&str> = old.shards.iter().map(|s| s.name.as_str()).collect();
    let new_names: BTreeSet<&str> = new.shards.iter().map(|s| s.name.as_str()).collect();
    let removed = old_names.difference(&new_names).next().is_some();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for d in &new_names {
        let gains = removed
            || !old_names.contains(d)
            || new
                .overrides
                .iter()
                .any(|(ns, to)| to == d && old.overrides.get(ns) != Some(to));
        // A pin changed away from a shard: its namespace re-hashes, anywhere.
        let unpinned = old
            .overrides
            .iter()
            .any(|(ns, to)| new.overrides.get(ns) != Some(to) && !new.overrides.contains_key(ns));
        if gains || unpinned {
            let from = old_names
                .iter()
                .filter(|s| *s != d)
                .map(|s| (*s).to_owned())
                .collect();
            out.insert((*d).to_owned(), from);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(names: &[&str]) -> ShardMap {
        ShardMap {
            version: 1,
            depth: 1,
            shards: names
                .iter()
                .map(|n| Shard {
                    name: (*n).into(),
                    endpoints: vec![],
                })
                .collect(),
            overrides: BTreeMap::new(),
        }
    }

    #[test]
    fn receivers_table() {
        let two = map(&["e1", "e2"]);
        let set = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<_>>();
        // Adding: only the new shard receives, from every old one.
        let added = with_shard(
            &two,
            Shard {
                name: "e3".into(),
                endpoints: vec![],
            },
        );
        assert_eq!(
            receivers(&two, &added),
            BTreeMap::from([("e3".into(), set(&["e1", "e2"]))])
        );
        // Pinning: the pin's target receives.
        let pinned = with_pin(&two, "pay", Some("e2"));
        assert_eq!(
            receivers(&two, &pinned),
            BTreeMap::from([("e2".into(), set(&["e1"]))])
        );
        // Unpinning: the namespace re-hashes, anywhere.
        let unpinned = with_pin(&pinned, "pay", None);
        assert_eq!(receivers(&pinned, &unpinned).len(), 2);
        // Draining: every remaining shard may receive from the leaving one.
        let three = map(&["e1", "e2", "e3"]);
        let drained = without_shard(&three, "e3");
        assert_eq!(
            receivers(&three, &drained),
            BTreeMap::from([
                ("e1".into(), set(&["e2", "e3"])),
                ("e2".into(), set(&["e1", "e3"]))
            ])
        );
        // Nothing changes: nobody receives.
        let mut same = two.clone();
        same.version = 2;
        assert!(receivers(&two, &same).is_empty());
    }
}
