//! The audit trail (ADR-21): the tailer that turns etcd's revision log into one row per
//! lock event (`classify.rs`, pure), stored idempotently (`store.rs`), one tailer active
//! per cluster (`tailer.rs`), which also reports the longest hold per class
//! (`longest.rs`), with a day's rows exported to Parquet (`export.rs`).

pub mod classify;
pub mod export;
pub mod longest;
pub mod metrics;
pub mod retention;
pub mod store;
pub mod tailer;
