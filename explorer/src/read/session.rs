//! One session: what it holds and waits for, from the keys etcd has on its lease (one
//! call, bounded by what the session took, not by its namespace).

use super::{Etcd, ReadError};
use etcd_client::LeaseTimeToLiveOptions;

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
