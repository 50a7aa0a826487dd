//! The read model's reads (I/O at the rim): one page of a namespace's held keys, and the
//! namespaces that hold any, from the store the arbiters wrote. Every read is bounded: a
//! page is at most [`MAX_PAGE`] keys, and what is read for them (their sessions, their
//! queue and shared-hold counts) is bounded by the page.
//!
//! What the store cannot say: the waiters of a `fairness: memory` class live in the
//! arbiters' memory, not in etcd, so only durable waiters (`/q/`) and shared holds (`/r/`)
//! are counted here.

use crate::view::{Seen, SessionSeen};
use etcd_client::{GetOptions, LeaseTimeToLiveOptions, Txn, TxnOp, TxnOpResponse};
use lock_store::layout::{
    HOLDER_PREFIX, Holder, QUEUE_PREFIX, SHARED_PREFIX, SessionRecord, decode, session_key,
};
use lock_store::{Etcd, StoreError};
use std::collections::BTreeSet;

/// Most keys one page holds.
pub const MAX_PAGE: usize = 500;
/// Most operations in one read transaction (etcd's `--max-txn-ops` default is 128).
const TXN_OPS: usize = 120;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("a page holds 1 to {MAX_PAGE} keys, not {0}")]
    PageSize(usize),
    #[error("not a namespace: {0:?} (one path segment, no '/')")]
    Namespace(String),
    #[error(
        "not a cursor of this namespace: {0:?} (give what the last page printed after --after)"
    )]
    Cursor(String),
    #[error("not a lock key: {0:?}")]
    Key(String),
    #[error("not a session: {0:?} (its lease in hex)")]
    Session(String),
}

/// One page: what its reads found, the store revision they saw, and where the next page
/// starts (None: this was the last).
#[derive(Debug, Clone)]
pub struct Page {
    pub seen: Seen,
    pub revision: i64,
    pub next: Option<String>,
}

/// The first key after every key starting with `prefix` (etcd's prefix range end).
fn range_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Where a page starts. A namespace's holds are read in two runs: the exclusive holders
/// (`/l/<ns>/`, by key), then the shared holds (`/r/<ns>/`, by their store key, which
/// names key and session). One cursor walks both, so a page never leaves a hold out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cursor {
    Start,
    /// After this key's exclusive holder.
    Held(String),
    /// In the shared run: at its start (None), or after this store key (without `/r/`).
    Shared(Option<String>),
}

impl Cursor {
    /// `held:<key>`, `shared:` or `shared:<store key>`, as [`Cursor::word`] printed it.
    pub fn parse(namespace: &str, text: Option<&str>) -> Result<Self, ReadError> {
        let bad = || ReadError::Cursor(text.unwrap_or_default().to_owned());
        let ours = |k: &str| {
            k.strip_prefix(namespace)
                .is_some_and(|r| r.len() > 1 && r.starts_with('/'))
        };
        match text {
            None => Ok(Cursor::Start),
            Some(t) => match t.split_once(':') {
                Some(("held", k)) if ours(k) => Ok(Cursor::Held(k.to_owned())),
                Some(("shared", "")) => Ok(Cursor::Shared(None)),
                Some(("shared", k)) if ours(k) => Ok(Cursor::Shared(Some(k.to_owned()))),
                _ => Err(bad()),
            },
        }
    }

    pub fn word(&self) -> String {
        match self {
            Cursor::Start => String::new(),
            Cursor::Held(k) => format!("held:{k}"),
            Cursor::Shared(k) => format!("shared:{}", k.as_deref().unwrap_or_default()),
        }
    }
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

/// Keys of a session [`session`] shows, of each kind.
pub const SESSION_KEYS: usize = 100;

/// What the session `lease_hex` holds and waits for: one call, the keys etcd has on its
/// lease (a session's keys are as many as its holder took, not the namespace's).
pub async fn session(etcd: &Etcd, lease_hex: &str) -> Result<crate::view::SessionView, ReadError> {
    let id =
        i64::from_str_radix(lease_hex, 16).map_err(|_| ReadError::Session(lease_hex.to_owned()))?;
    let mut lease = etcd.lease();
    let resp = etcd
        .bounded(lease.time_to_live(id, Some(LeaseTimeToLiveOptions::new().with_keys())))
        .await?;
    let ttl = resp.ttl();
    let keys: Vec<String> = resp
        .keys()
        .iter()
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    Ok(crate::view::session_view(
        &keys,
        (ttl >= 0).then_some(ttl),
        SESSION_KEYS,
    ))
}

/// One bounded range read from `start` to the end of `prefix`: at most `limit` pairs, the
/// revision read at (`at`, or the newest when 0), and whether more follow.
async fn run(
    etcd: &Etcd,
    start: &str,
    prefix: &str,
    limit: usize,
    at: i64,
    keys_only: bool,
) -> Result<(Vec<(String, Vec<u8>)>, i64, bool), ReadError> {
    let mut opts = GetOptions::new()
        .with_range(range_end(prefix))
        .with_limit(i64::try_from(limit + 1).unwrap_or(i64::MAX));
    if at > 0 {
        opts = opts.with_revision(at);
    }
    if keys_only {
        opts = opts.with_keys_only();
    }
    let resp = etcd.range(start, Some(opts)).await?;
    let revision = resp.header().map_or(0, |h| h.revision());
    let kvs = resp
        .kvs()
        .iter()
        .take(limit)
        .filter_map(|kv| Some((kv.key_str().ok()?.to_owned(), kv.value().to_vec())))
        .collect();
    Ok((kvs, revision, resp.kvs().len() > limit))
}

/// Per key of the page: durable waiters, shared holds and whether a writer is marked,
/// counted at the page's revision in transactions of at most [`TXN_OPS`] reads.
async fn counts(etcd: &Etcd, seen: &mut Seen, revision: i64) -> Result<(), ReadError> {
    let count = |prefix: String| {
        TxnOp::get(
            prefix,
            Some(
                GetOptions::new()
                    .with_prefix()
                    .with_count_only()
                    .with_revision(revision),
            ),
        )
    };
    let keys: BTreeSet<&String> = seen
        .holds
        .iter()
        .chain(&seen.shared_holds)
        .map(|(k, _)| k)
        .collect();
    let keys: Vec<String> = keys.into_iter().cloned().collect();
    for chunk in keys.chunks(TXN_OPS / 3) {
        let ops: Vec<TxnOp> = chunk
            .iter()
            .flat_map(|k| {
                [
                    count(format!("{QUEUE_PREFIX}{k}//")),
                    count(format!("{SHARED_PREFIX}{k}//s/")),
                    count(format!("{SHARED_PREFIX}{k}//w/")),
                ]
            })
            .collect();
        let resp = etcd.txn(Txn::new().and_then(ops)).await?;
        let got: Vec<u64> = resp
            .op_responses()
            .iter()
            .map(|r| match r {
                TxnOpResponse::Get(g) => u64::try_from(g.count()).unwrap_or(0),
                _ => 0,
            })
            .collect();
        for (k, c) in chunk.iter().zip(got.chunks(3)) {
            if let [queued, shared, writers] = c {
                if *queued > 0 {
                    seen.durable_waiters.insert(k.clone(), *queued);
                }
                if *shared > 0 || *writers > 0 {
                    seen.shared.insert(k.clone(), (*shared, *writers > 0));
                }
            }
        }
    }
    Ok(())
}

/// The sessions the page's holds name: their records at the page's revision, and their
/// leases' remaining TTL now (one call per distinct session: at most one per key).
async fn sessions(etcd: &Etcd, seen: &mut Seen, revision: i64) -> Result<(), ReadError> {
    let leases: BTreeSet<String> = seen
        .holds
        .iter()
        .chain(&seen.shared_holds)
        .map(|(_, h)| h.session.clone())
        .collect();
    let leases: Vec<(String, i64)> = leases
        .into_iter()
        .filter_map(|hex| i64::from_str_radix(&hex, 16).ok().map(|id| (hex, id)))
        .collect();
    for chunk in leases.chunks(TXN_OPS) {
        let ops: Vec<TxnOp> = chunk
            .iter()
            .map(|(_, id)| {
                TxnOp::get(
                    session_key(*id),
                    Some(GetOptions::new().with_revision(revision)),
                )
            })
            .collect();
        let resp = etcd.txn(Txn::new().and_then(ops)).await?;
        for ((hex, _), r) in chunk.iter().zip(resp.op_responses()) {
            let record = match r {
                TxnOpResponse::Get(g) => g
                    .kvs()
                    .first()
                    .and_then(|kv| decode::<SessionRecord>(kv.value())),
                _ => None,
            };
            seen.sessions.insert(
                hex.clone(),
                SessionSeen {
                    record,
                    ttl_left_s: None,
                },
            );
        }
    }
    let mut lease = etcd.lease();
    for (hex, id) in &leases {
        let ttl = etcd.bounded(lease.time_to_live(*id, None)).await?.ttl();
        if let Some(s) = seen.sessions.get_mut(hex) {
            // etcd answers -1 for a lease that is gone.
            s.ttl_left_s = (ttl >= 0).then_some(ttl);
        }
    }
    Ok(())
}

/// How many exclusive holds `namespace` has now, and how many shared-run entries (shared
/// holds and exclusive waiters' marks): counts, not reads of them.
pub async fn held_count(etcd: &Etcd, namespace: &str) -> Result<(u64, u64), ReadError> {
    if namespace.is_empty() || namespace.contains('/') {
        return Err(ReadError::Namespace(namespace.to_owned()));
    }
    let mut out = [0; 2];
    for (slot, root) in out.iter_mut().zip([HOLDER_PREFIX, SHARED_PREFIX]) {
        let opts = GetOptions::new().with_prefix().with_count_only();
        let resp = etcd
            .range(&format!("{root}{namespace}/"), Some(opts))
            .await?;
        *slot = u64::try_from(resp.count()).unwrap_or(0);
    }
    Ok((out[0], out[1]))
}

/// The namespaces that hold any key (exclusively or shared), after `after`, at most
/// `limit`, and the last one when more follow.
pub async fn namespaces(
    etcd: &Etcd,
    after: Option<&str>,
    limit: usize,
) -> Result<(Vec<String>, Option<String>), ReadError> {
    if limit == 0 || limit > MAX_PAGE {
        return Err(ReadError::PageSize(limit));
    }
    let mut all = namespaces_under(etcd, HOLDER_PREFIX, after, limit + 1).await?;
    all.extend(namespaces_under(etcd, SHARED_PREFIX, after, limit + 1).await?);
    all.sort();
    all.dedup();
    let more = all.len() > limit;
    all.truncate(limit);
    let next = more.then(|| all.last().cloned()).flatten();
    Ok((all, next))
}

/// The first `limit` namespaces under `root` after `after`: one read per namespace (each
/// skips past the namespace it found), never a scan of their keys.
async fn namespaces_under(
    etcd: &Etcd,
    root: &str,
    after: Option<&str>,
    limit: usize,
) -> Result<Vec<String>, ReadError> {
    let end = range_end(root);
    let mut from = match after {
        Some(ns) => range_end(&format!("{root}{ns}/")),
        None => root.as_bytes().to_vec(),
    };
    let mut kv = etcd.kv();
    let mut out = Vec::new();
    while out.len() < limit {
        let opts = GetOptions::new()
            .with_range(end.clone())
            .with_limit(1)
            .with_keys_only();
        let resp = etcd.bounded(kv.get(from.clone(), Some(opts))).await?;
        let Some(ns) = resp
            .kvs()
            .first()
            .and_then(|kv| kv.key_str().ok())
            .and_then(|k| k.strip_prefix(root))
            .and_then(|k| k.split('/').next())
            .map(str::to_owned)
        else {
            break;
        };
        from = range_end(&format!("{root}{ns}/"));
        out.push(ns);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_ends_follow_their_prefix() {
        assert_eq!(range_end("/l/pay/"), b"/l/pay0".to_vec());
        assert_eq!(range_end("/l/"), b"/l0".to_vec());
    }

    #[test]
    fn a_cursor_names_its_run_and_stays_in_its_namespace() {
        for (text, want) in [
            (None, Ok(Cursor::Start)),
            (Some("held:pay/a"), Ok(Cursor::Held("pay/a".into()))),
            (Some("shared:"), Ok(Cursor::Shared(None))),
            (
                Some("shared:pay/r//s/7b"),
                Ok(Cursor::Shared(Some("pay/r//s/7b".into()))),
            ),
            (Some("held:payroll/a"), Err(())),
            (Some("held:ops/a"), Err(())),
            (Some("pay/a"), Err(())),
            (Some("held:"), Err(())),
        ] {
            let got = Cursor::parse("pay", text).map_err(|_| ());
            assert_eq!(got, want, "{text:?}");
            if let Ok(c) = got
                && text.is_some()
            {
                assert_eq!(Some(c.word().as_str()), text);
            }
        }
    }
}
