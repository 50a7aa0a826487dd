//! More than one etcd cluster (ADR-07, 09) as the store sees it: the shard map and the
//! move of keys between shards.
//!
//! | module      | owns                                                                       |
//! |-------------|----------------------------------------------------------------------------|
//! | `shard_map` | the map's I/O: its document, its watched copy, each shard's fence, epochs  |
//! |             | allocated from the coord cluster                                           |
//! | `rehome`    | `lockctl shards`: setting up the map, and the one move protocol            |
//!
//! `rehome` is here, not in the arbiter: it is an operation from store to store (documents,
//! fences, epoch advances), run by lockctl with an operator's credential; no arbiter takes
//! part, each only obeys the fences it writes.
//!
//! May import: `epoch`, `connection`, `records`, `error`.

pub mod rehome;
pub mod shard_map;
