//! Everything held on one key, at one revision: its exclusive holder, its shared holds
//! (at most a page of them), their counts and sessions; and its waiters when nobody holds
//! it.

use super::detail::{counts, sessions};
use super::range::run;
use super::{
    Etcd, HOLDER_PREFIX, Holder, MAX_PAGE, QUEUE_PREFIX, ReadError, SHARED_PREFIX, decode,
};
use crate::view::Seen;
use etcd_client::GetOptions;

/// Everything held on one key: its exclusive holder and its shared holds (at most
/// [`MAX_PAGE`] of them), with their counts and sessions, at one revision.
pub async fn one_key(etcd: &Etcd, key: &str, now_ms: u64) -> Result<Seen, ReadError> {
    if lock_config::LockKey::parse(key).is_err() {
        return Err(ReadError::Key(key.to_owned()));
    }
    let mut seen = Seen {
        now_ms,
        ..Seen::default()
    };
    let held = etcd.range(&format!("{HOLDER_PREFIX}{key}"), None).await?;
    let revision = held.header().map_or(0, |h| h.revision());
    if let Some(h) = held
        .kvs()
        .first()
        .and_then(|kv| decode::<Holder>(kv.value()))
    {
        seen.holds.push((key.to_owned(), h));
    }
    let prefix = format!("{SHARED_PREFIX}{key}//s/");
    let (kvs, _, _) = run(etcd, &prefix, &prefix, MAX_PAGE, revision, false).await?;
    for (_, value) in &kvs {
        if let Some(h) = decode::<Holder>(value) {
            seen.shared_holds.push((key.to_owned(), h));
        }
    }
    counts(etcd, &mut seen, revision).await?;
    if seen.holds.is_empty() && seen.shared_holds.is_empty() {
        // Nobody holds it, but some may wait: count them anyway.
        let (mut queued, mut writers) = (0, 0);
        for (prefix, n) in [
            (format!("{QUEUE_PREFIX}{key}//"), &mut queued),
            (format!("{SHARED_PREFIX}{key}//w/"), &mut writers),
        ] {
            let opts = GetOptions::new().with_prefix().with_count_only();
            *n = u64::try_from(etcd.range(&prefix, Some(opts)).await?.count()).unwrap_or(0);
        }
        if queued > 0 {
            seen.durable_waiters.insert(key.to_owned(), queued);
        }
        if writers > 0 {
            seen.shared.insert(key.to_owned(), (0, true));
        }
    }
    sessions(etcd, &mut seen, revision).await?;
    Ok(seen)
}
