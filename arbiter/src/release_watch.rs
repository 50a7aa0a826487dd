//! Waiting for a key's release: a watch on the holder key from a known revision, for
//! delete events only. The watch is a hint (ADR-15): what it reports is acted on only by
//! running a full grant transaction.

use crate::store::Store;
use etcd_client::{EventType, WatchFilterType, WatchOptions};
use std::time::{Duration, SystemTime};
use tokio::time::{Instant, timeout_at};

pub enum Wake {
    /// The holder key was deleted (release, session expiry or epoch advance) at `revision`.
    Released { revision: i64 },
    /// The caller's wait deadline passed.
    Deadline,
    /// The watch could not be created, was cancelled (e.g. compaction) or broke.
    Broken,
}

/// Waits until the key at `holder_key` is deleted at or after `from_revision`.
pub async fn wait(store: &Store, holder_key: &str, from_revision: i64, deadline: Instant) -> Wake {
    let opts = WatchOptions::new()
        .with_start_revision(from_revision)
        .with_filters([WatchFilterType::NoPut]);
    // The watch comes from the sealed store: a response from another cluster breaks it, and
    // the grant attempt that follows answers SEALED.
    let opened = async { store.sealed().await?.watch(holder_key, opts).await };
    let mut stream = match timeout_at(deadline, opened).await {
        Err(_) => return Wake::Deadline,
        Ok(Err(_)) => return Wake::Broken,
        Ok(Ok(s)) => s,
    };
    loop {
        match timeout_at(deadline, stream.next()).await {
            Err(_) => return Wake::Deadline,
            Ok(Ok(Some(resp))) => {
                if resp.canceled() {
                    return Wake::Broken;
                }
                if let Some(e) = resp
                    .events()
                    .iter()
                    .find(|e| e.event_type() == EventType::Delete)
                {
                    let revision = e.kv().map_or(0, |kv| kv.mod_revision());
                    return Wake::Released { revision };
                }
            }
            Ok(Ok(None)) | Ok(Err(_)) => return Wake::Broken,
        }
    }
}

/// One second with up to ±200 ms of jitter, so pollers of one key do not align.
pub fn poll_interval() -> Duration {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    Duration::from_millis(800 + u64::from(nanos % 400_000_000) / 1_000_000)
}
