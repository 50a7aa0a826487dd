//! Ending a shared hold (its session's record, or an operator's by the caller's identity),
//! and the reads of a key's shared holds: Inspect's count and ValidateToken's check.

use super::key_str;
use crate::error::ArbiterError;
use crate::lock::grant::{Granter, MAX_ATTEMPTS, reseal_once};
use crate::store::layout::{EPOCH_KEY, Holder, decode, shared_hold_key, shared_holds_prefix};
use crate::store::{Sealed, TxnBuilder};
use etcd_client::{Compare, CompareOp, GetOptions, KeyValue};
use lock_config::{FencingToken, LockKey};

/// Ends the shared hold `token` names: with a session, that session's record; without
/// (an operator's `lockctl release`), a record of the caller's identity whose grant it is.
pub async fn release(
    granter: &Granter<'_>,
    identity: &str,
    key: &LockKey,
    token: FencingToken,
    lease: Option<i64>,
) -> Result<i64, ArbiterError> {
    let store = granter.store;
    let revision = i64::try_from(token.revision()).map_err(|_| ArbiterError::MalformedToken)?;
    if let Some(lease) = lease {
        granter.sessions.owned(store, lease, identity).await?;
    }
    let mut sealed = store.sealed().await?;
    for attempt in 0..MAX_ATTEMPTS {
        let epoch = sealed.epoch();
        if token.epoch() != epoch.record.epoch {
            if attempt == 0 && token.epoch() > epoch.record.epoch {
                sealed = store.resealed().await?;
                continue;
            }
            return Err(ArbiterError::StaleToken);
        }
        let record = match lease {
            Some(lease) => shared_hold_key(key, lease),
            None => {
                let resp = sealed
                    .range(
                        &shared_holds_prefix(key),
                        Some(GetOptions::new().with_prefix()),
                    )
                    .await?;
                let mine = resp.kvs().iter().find(|kv| {
                    kv.mod_revision() == revision
                        && decode::<Holder>(kv.value()).is_some_and(|h| h.spiffe_id == identity)
                });
                match mine {
                    Some(kv) => key_str(kv),
                    None => return Err(ArbiterError::StaleToken),
                }
            }
        };
        let mut t = TxnBuilder::new();
        t.when(
            "epoch",
            Compare::mod_revision(EPOCH_KEY, CompareOp::Equal, epoch.mod_revision),
        )
        .when(
            "token",
            Compare::mod_revision(record.as_str(), CompareOp::Equal, revision),
        )
        .when_some("shard-fence", epoch.fence_compare());
        t.delete(&record);
        let epoch_read = t.read(EPOCH_KEY);
        match sealed.txn(t).await {
            Ok(r) if r.succeeded() => return Ok(r.revision().unwrap_or(0)),
            Ok(r) => {
                let epoch_seen = r.kv(epoch_read).map(KeyValue::mod_revision);
                if epoch_seen == Some(epoch.mod_revision) {
                    return Err(ArbiterError::StaleToken);
                }
                sealed = store.resealed().await?;
            }
            Err(e) => sealed = reseal_once(store, e, attempt).await?,
        }
    }
    Err(ArbiterError::StaleToken)
}

/// Shared holds of `key` now.
pub async fn count(sealed: &Sealed, key: &LockKey) -> Result<usize, ArbiterError> {
    let resp = sealed
        .range(
            &shared_holds_prefix(key),
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await?;
    Ok(usize::try_from(resp.count()).unwrap_or(0))
}

/// Is a shared hold of `key` the grant at `revision` now (ValidateToken)?
pub async fn is_current(
    sealed: &Sealed,
    key: &LockKey,
    revision: i64,
) -> Result<bool, ArbiterError> {
    let resp = sealed
        .range(
            &shared_holds_prefix(key),
            Some(GetOptions::new().with_prefix().with_keys_only()),
        )
        .await?;
    Ok(resp.kvs().iter().any(|kv| kv.mod_revision() == revision))
}
