//! Which epoch an advance moves a cluster to (ADR-03, 07, 09). One decision for both
//! advances: lock-admin's two-person path and `lockctl epoch advance break-glass`.
//!
//! A lone cluster goes from E to E+1. Once there are entity shards, every cluster's epoch
//! comes from the coord cluster's allocator (`/sys/epoch-allocator`), above every epoch it
//! has handed out. E+1 may already be another cluster's epoch there, and two clusters
//! minting tokens in one epoch is what the allocator exists to prevent: a key moved between
//! them could see its token go back, and a token no longer names the cluster that made it.
//!
//! Pure: [`source`] decides on facts read at the rim (`shard_map::read_estate`);
//! [`allocation`] and [`above`] decide one step of the allocator inside its
//! compare-and-put (`shard_map::allocate_for_advance`, `shard_map::allocate_epoch`).

use lock_config::token::MAX_EPOCH;

/// What the stores say about the advanced cluster's place in the estate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Estate {
    /// The advanced cluster's shard fence names it an entity shard (`/sys/shard-fence`).
    pub shard: Option<String>,
    /// What the coord cluster holds. None: no coord cluster was given, and the advanced
    /// cluster holds neither the shard map nor the allocator (it is not the coord).
    pub coord: Option<Coord>,
}

/// The coord cluster's part of the estate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Coord {
    /// The shard map document exists (`/sys/shards`).
    pub map: bool,
    /// The last epoch the allocator handed out (None: no allocator record).
    pub allocator: Option<u16>,
}

/// Where the new epoch comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A lone cluster: this epoch (E+1), on the cluster itself.
    OnCluster(u16),
    /// Shards exist: from the coord cluster's allocator.
    Coord,
}

/// Why no epoch can be chosen; nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error(
        "this cluster is entity shard {shard}: its epochs come from the coord cluster's allocator, and this advance was not given the coord cluster (lock-admin `--coord`, break-glass `--coord`)"
    )]
    CoordRequired { shard: String },
    #[error(
        "the coord cluster's epoch allocator last handed out epoch {last}, below this cluster's epoch {from}: an epoch was taken outside the allocator, so the one it would give next may be another cluster's already"
    )]
    AllocatorBehind { last: u16, from: u16 },
    #[error("the epoch space is exhausted: no epoch above this one can be minted")]
    Exhausted,
}

/// Where the epoch of an advance from `from` comes from. Shards exist when the advanced
/// cluster is one, or the coord cluster holds a shard map or an allocator.
pub fn source(from: u16, estate: &Estate) -> Result<Source, Refused> {
    let coord_in_use = estate.coord.is_some_and(|c| c.map || c.allocator.is_some());
    match (&estate.shard, coord_in_use) {
        (Some(shard), false) if estate.coord.is_none() => Err(Refused::CoordRequired {
            shard: shard.clone(),
        }),
        (Some(_), _) | (None, true) => Ok(Source::Coord),
        (None, false) => above(from, from)
            .map(Source::OnCluster)
            .ok_or(Refused::Exhausted),
    }
}

/// The two-person advance's step of the allocator: the epoch to hand out for an advance
/// from `from`, given the allocator's `last` (None: no allocator record). The allocator
/// must already stand at or above `from`: every epoch of a sharded estate came from it, so
/// one below means an epoch was taken outside it and the next may be taken already.
pub fn allocation(last: Option<u16>, from: u16) -> Result<u16, Refused> {
    let last = last.unwrap_or(0);
    if last < from {
        return Err(Refused::AllocatorBehind { last, from });
    }
    above(last, from).ok_or(Refused::Exhausted)
}

/// The allocator's step for everyone else (`epoch init --coord`, a shard's first epoch, a
/// move's advance, break-glass): the next epoch above both the allocator's `last` and
/// `at_least`. None: the epoch space is exhausted.
pub fn above(last: u16, at_least: u16) -> Option<u16> {
    last.max(at_least)
        .checked_add(1)
        .filter(|e| *e <= MAX_EPOCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(name: &str, coord: Option<Coord>) -> Estate {
        Estate {
            shard: Some(name.into()),
            coord,
        }
    }

    fn lone(coord: Option<Coord>) -> Estate {
        Estate { shard: None, coord }
    }

    fn coord(map: bool, allocator: Option<u16>) -> Option<Coord> {
        Some(Coord { map, allocator })
    }

    /// (name, from, the estate, the answer).
    type SourceCase = (&'static str, u16, Estate, Result<Source, Refused>);

    #[test]
    fn source_table() {
        let max = MAX_EPOCH;
        let cases: Vec<SourceCase> = vec![
            (
                "a lone cluster: E+1, as always",
                3,
                lone(None),
                Ok(Source::OnCluster(4)),
            ),
            (
                "a lone cluster given a coord that has no shards: E+1",
                3,
                lone(coord(false, None)),
                Ok(Source::OnCluster(4)),
            ),
            (
                "an entity shard: from the allocator",
                2,
                shard("e1", coord(true, Some(3))),
                Ok(Source::Coord),
            ),
            (
                "an entity shard whose coord was not given: refused, never E+1",
                2,
                shard("e1", None),
                Err(Refused::CoordRequired { shard: "e1".into() }),
            ),
            (
                "the coord cluster of a sharded estate (it holds the map): from its allocator",
                1,
                lone(coord(true, Some(3))),
                Ok(Source::Coord),
            ),
            (
                "a cluster whose epochs came from an allocator (no map yet): from it",
                5,
                lone(coord(false, Some(7))),
                Ok(Source::Coord),
            ),
            (
                "a shard given a coord that lost its map and allocator: from the coord, whose step refuses",
                2,
                shard("e1", coord(false, None)),
                Ok(Source::Coord),
            ),
            (
                "a lone cluster at the last epoch",
                max,
                lone(None),
                Err(Refused::Exhausted),
            ),
        ];
        for (name, from, estate, want) in cases {
            assert_eq!(source(from, &estate), want, "{name}");
        }
    }

    /// (name, the allocator's last, from, the answer).
    type AllocationCase = (&'static str, Option<u16>, u16, Result<u16, Refused>);

    /// The estate `Stack::with_two_shards` builds: coord 1, e1 2, e2 3, the allocator at 3.
    /// The old rule advanced e1 to E+1 = 3, e2's epoch; the allocator gives 4.
    #[test]
    fn allocation_table() {
        let max = MAX_EPOCH;
        let cases: Vec<AllocationCase> = vec![
            (
                "e1 (at 2) after init: above e2's 3, not 2+1",
                Some(3),
                2,
                Ok(4),
            ),
            ("e2 (at 3), the newest: 4", Some(3), 3, Ok(4)),
            ("e2 after e1 took 4: 5", Some(4), 3, Ok(5)),
            ("the coord (at 1)", Some(3), 1, Ok(4)),
            (
                "a cluster above the allocator: advanced outside it (E+1)",
                Some(3),
                4,
                Err(Refused::AllocatorBehind { last: 3, from: 4 }),
            ),
            (
                "no allocator on a sharded estate",
                None,
                2,
                Err(Refused::AllocatorBehind { last: 0, from: 2 }),
            ),
            (
                "the allocator at the last epoch",
                Some(max),
                3,
                Err(Refused::Exhausted),
            ),
            ("the last epoch there is", Some(max - 1), 3, Ok(max)),
        ];
        for (name, last, from, want) in cases {
            assert_eq!(allocation(last, from), want, "{name}");
        }
        // The old rule's case: E+1 lands on the other shard's epoch; the allocator never.
        let (e1, e2, last) = (2, 3, Some(3));
        assert_eq!(e1 + 1, e2, "the old rule collides");
        assert_ne!(allocation(last, e1), Ok(e2));
    }

    #[test]
    fn above_table() {
        let max = MAX_EPOCH;
        for (last, at_least, want) in [
            (0, 0, Some(1)), // the first epoch of a new estate
            (3, 0, Some(4)),
            (3, 7, Some(8)), // a cluster that served alone up to 7 joins
            (max - 1, 0, Some(max)),
            (max, 0, None),
            (0, max, None),
        ] {
            assert_eq!(
                above(last, at_least),
                want,
                "last {last}, at least {at_least}"
            );
        }
    }
}
