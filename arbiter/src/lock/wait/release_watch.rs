//! Waiting for a key's release: a watch on the holder key from a known revision, for
//! delete events only, on the arbiter's one watch stream (`watch_hub.rs`). The watch is a
//! hint (ADR-15): what it reports is acted on only by running a full grant transaction.

use crate::lock::wait::wait_end::WaitEnd;
use crate::store::Store;
pub use crate::store::watch_hub::Wake;
use crate::store::watch_hub::Watch;
use std::time::{Duration, SystemTime};

/// Waits until the key at `holder_key` is deleted at or after `from_revision`, on the
/// arbiter's one watch stream (`watch_hub.rs`); giving up (the wait's end, or the caller
/// dropping this future) cancels the watch.
pub async fn wait(store: &Store, holder_key: &str, from_revision: i64, end: &WaitEnd) -> Wake {
    wait_for(store, holder_key, from_revision, false, end).await
}

/// [`wait`], woken by an overwrite of the record too: a durable queue's first waiter, to
/// whom a release may hand the key on by overwriting the holder record (`release.rs`).
pub async fn wait_or_overwrite(
    store: &Store,
    holder_key: &str,
    from_revision: i64,
    end: &WaitEnd,
) -> Wake {
    wait_for(store, holder_key, from_revision, true, end).await
}

/// Waits until any key under `prefix` is deleted at or after `from_revision` (a
/// semaphore's permits: the end of any may free one), on the same stream.
pub async fn wait_prefix(store: &Store, prefix: &str, from_revision: i64, end: &WaitEnd) -> Wake {
    let watch = Watch::deletes(prefix, from_revision).under_prefix();
    first(store, watch, end).await
}

async fn wait_for(
    store: &Store,
    holder_key: &str,
    from_revision: i64,
    overwrites: bool,
    end: &WaitEnd,
) -> Wake {
    let watch = if overwrites {
        Watch::changes(holder_key, from_revision)
    } else {
        Watch::deletes(holder_key, from_revision)
    };
    first(store, watch, end).await
}

/// The first event of `watch`, or the wait's end.
async fn first(store: &Store, watch: Watch, end: &WaitEnd) -> Wake {
    let mut watching = store.watch_hub().first(watch);
    end.bound(watching.next()).await.unwrap_or_else(Wake::Ended)
}

/// One second with up to ±200 ms of jitter, so pollers of one key do not align.
pub fn poll_interval() -> Duration {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    Duration::from_millis(800 + u64::from(nanos % 400_000_000) / 1_000_000)
}
