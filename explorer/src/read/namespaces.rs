//! The namespaces that hold any key, a page at a time, and how many holds one has: one
//! read per namespace found, or a count, never a scan of their keys.

use super::range::range_end;
use super::{Etcd, HOLDER_PREFIX, MAX_PAGE, ReadError, SHARED_PREFIX};
use etcd_client::GetOptions;

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
pub(super) async fn namespaces_under(
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
