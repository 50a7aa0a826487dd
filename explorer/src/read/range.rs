//! One bounded range read under a prefix (at most `limit` pairs, and whether more follow),
//! and the end of a prefix's range, which the page, key and namespace reads share.

use super::{Etcd, ReadError};
use etcd_client::GetOptions;

/// The first key after every key starting with `prefix` (etcd's prefix range end).
pub(super) fn range_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// One bounded range read from `start` to the end of `prefix`: at most `limit` pairs, the
/// revision read at (`at`, or the newest when 0), and whether more follow.
pub(super) async fn run(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_ends_follow_their_prefix() {
        assert_eq!(range_end("/l/pay/"), b"/l/pay0".to_vec());
        assert_eq!(range_end("/l/"), b"/l0".to_vec());
    }
}
