//! Ending a shared hold (its session's record, or an operator's by the caller's identity),
//! and the reads of a key's shared holds: Inspect's count and ValidateToken's check.

use super::{first_kv, key_str};
use crate::error::ArbiterError;
use crate::lock::grant::{Granter, MAX_ATTEMPTS, reseal_once};
use crate::store::Sealed;
use crate::store::layout::{EPOCH_KEY, Holder, decode, shared_hold_key, shared_holds_prefix};
use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, Txn, TxnOp};
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
        let mut compares = vec![
            Compare::mod_revision(EPOCH_KEY, CompareOp::Equal, epoch.mod_revision),
            Compare::mod_revision(record.as_str(), CompareOp::Equal, revision),
        ];
        compares.extend(epoch.fence_compare());
        let txn = Txn::new()
            .when(compares)
            .and_then(vec![TxnOp::delete(record.as_str(), None)])
            .or_else(vec![TxnOp::get(EPOCH_KEY, None)]);
        match sealed.txn(txn).await {
            Ok(r) if r.succeeded() => return Ok(r.header().map_or(0, |h| h.revision())),
            Ok(r) => {
                let epoch_seen = first_kv(&r.op_responses(), 0).map(KeyValue::mod_revision);
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
