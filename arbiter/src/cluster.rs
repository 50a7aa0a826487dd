//! More than one etcd cluster (ADR-07 tiers, ADR-09 shards): where a request goes, and how
//! a shard's keys move.
//!
//! | module     | owns                                                                        |
//! |------------|-----------------------------------------------------------------------------|
//! | `clusters` | a store per etcd cluster, and the route of a request by tier, shard and tag |
//! | `rehome`   | `lockctl shards`: setting up the shard map and the one move protocol        |
//!
//! May import: `store`, `error`, `ops`. Never `lock` or `serve` (the engine in `serve`
//! routes through `clusters`).

pub mod clusters;
pub mod rehome;
