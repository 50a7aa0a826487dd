//! One page of a namespace's holds from a cursor: the exclusive holders first, then the
//! shared holds, at most `limit` in all and at one revision, with their counts and
//! sessions.

use super::detail::{counts, sessions};
use super::range::run;
use super::{Cursor, Etcd, HOLDER_PREFIX, Holder, MAX_PAGE, ReadError, SHARED_PREFIX, decode};
use crate::view::Seen;

/// One page: what its reads found, the store revision they saw, and where the next page
/// starts (None: this was the last).
#[derive(Debug, Clone)]
pub struct Page {
    pub seen: Seen,
    pub revision: i64,
    pub next: Option<String>,
}

/// Reads the holds of `namespace` from the cursor `after` (as [`Cursor::word`] printed
/// it), at most `limit` rows: exclusive holders first, then shared holds.
pub async fn page(
    etcd: &Etcd,
    namespace: &str,
    after: Option<&str>,
    limit: usize,
    now_ms: u64,
) -> Result<Page, ReadError> {
    if limit == 0 || limit > MAX_PAGE {
        return Err(ReadError::PageSize(limit));
    }
    if namespace.is_empty() || namespace.contains('/') {
        return Err(ReadError::Namespace(namespace.to_owned()));
    }
    let cursor = Cursor::parse(namespace, after)?;
    let mut seen = Seen {
        now_ms,
        ..Seen::default()
    };
    let mut revision = 0;
    let mut next = None;
    if !matches!(cursor, Cursor::Shared(_)) {
        let prefix = format!("{HOLDER_PREFIX}{namespace}/");
        let start = match &cursor {
            Cursor::Held(k) => format!("{HOLDER_PREFIX}{k}\0"),
            _ => prefix.clone(),
        };
        let (kvs, rev, more) = run(etcd, &start, &prefix, limit, 0, false).await?;
        revision = rev;
        for (key, value) in &kvs {
            if let (Some(k), Some(h)) = (key.strip_prefix(HOLDER_PREFIX), decode::<Holder>(value)) {
                seen.holds.push((k.to_owned(), h));
            }
        }
        if more {
            next = kvs
                .last()
                .and_then(|(k, _)| k.strip_prefix(HOLDER_PREFIX))
                .map(|k| Cursor::Held(k.to_owned()));
        }
    }
    if next.is_none() {
        let room = limit.saturating_sub(seen.holds.len());
        let prefix = format!("{SHARED_PREFIX}{namespace}/");
        let start = match &cursor {
            Cursor::Shared(Some(k)) => format!("{SHARED_PREFIX}{k}\0"),
            _ => prefix.clone(),
        };
        if room == 0 {
            // A full page of exclusive holds: whether a shared run follows, without
            // reading it.
            let (kvs, _, _) = run(etcd, &start, &prefix, 1, revision, true).await?;
            next = (!kvs.is_empty()).then_some(Cursor::Shared(None));
        } else {
            let (kvs, rev, more) = run(etcd, &start, &prefix, room, revision, false).await?;
            revision = revision.max(rev);
            for (key, value) in &kvs {
                let Some((k, _lease)) = key
                    .strip_prefix(SHARED_PREFIX)
                    .and_then(|k| k.split_once("//s/"))
                else {
                    // An exclusive waiter's mark (`//w/`): counted per key below.
                    continue;
                };
                if let Some(h) = decode::<Holder>(value) {
                    seen.shared_holds.push((k.to_owned(), h));
                }
            }
            if more {
                next = kvs
                    .last()
                    .and_then(|(k, _)| k.strip_prefix(SHARED_PREFIX))
                    .map(|k| Cursor::Shared(Some(k.to_owned())));
            }
        }
    }
    counts(etcd, &mut seen, revision).await?;
    sessions(etcd, &mut seen, revision).await?;
    Ok(Page {
        seen,
        revision,
        next: next.map(|c| c.word()),
    })
}
