//! More than one etcd cluster (ADR-07 tiers, ADR-09 shards): where a request goes. How a
//! shard's keys move is `lock_store::rehome` (lockctl's, store to store).
//!
//! | module     | owns                                                                        |
//! |------------|-----------------------------------------------------------------------------|
//! | `clusters` | a store per etcd cluster, and the route of a request by tier, shard and tag |
//!
//! May import: `store`, `error`, `ops`. Never `lock` or `serve` (the engine in `serve`
//! routes through `clusters`).

pub mod clusters;
