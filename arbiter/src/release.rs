//! Release: delete the holder only if it is still the same grant (its create revision is
//! the token's revision) under the current epoch, in one transaction.
//!
//! With a session, the grant must be attached to it (a lease compare); without one (an
//! operator's `lockctl release`), the holder's identity must be the caller's: read first,
//! then the transaction compares the holder unchanged since that read.

use crate::bugs::{Bug, Bugs};
use crate::error::ArbiterError;
use crate::grant::{MAX_ATTEMPTS, reseal_once};
use crate::layout::{EPOCH_KEY, Holder, decode};
use crate::sessions::Sessions;
use crate::store::{Sealed, Store};
use etcd_client::{Compare, CompareOp, KeyValue, Txn, TxnOp, TxnOpResponse};
use lock_config::FencingToken;

/// One release transaction's outcome.
#[derive(Debug, PartialEq, Eq)]
enum Released {
    Done,
    /// The epoch record moved since it was cached: re-read it and retry.
    EpochMoved,
}

/// What a release transaction's answer means: committed, or (its compares failed) the
/// epoch record moved — every compare may have failed for that, so retry — or, with the
/// epoch unchanged, the holder is not this token's grant (released, expired, re-granted).
fn release_verdict(
    committed: bool,
    epoch_seen: Option<i64>,
    epoch_compared: i64,
) -> Result<Released, ArbiterError> {
    if committed {
        Ok(Released::Done)
    } else if epoch_seen == Some(epoch_compared) {
        Err(ArbiterError::StaleToken)
    } else {
        Ok(Released::EpochMoved)
    }
}

pub struct Releaser<'a> {
    pub store: &'a Store,
    pub sessions: &'a Sessions,
    pub bugs: &'a Bugs,
}

impl Releaser<'_> {
    pub async fn release(
        &self,
        identity: &str,
        hkey: &str,
        token: FencingToken,
        lease: Option<i64>,
    ) -> Result<(), ArbiterError> {
        let revision = i64::try_from(token.revision()).map_err(|_| ArbiterError::MalformedToken)?;
        let mut sealed = self.store.sealed().await?;
        for attempt in 0..MAX_ATTEMPTS {
            match self
                .try_release(&sealed, identity, hkey, token, revision, lease)
                .await
            {
                Ok(Released::Done) => return Ok(()),
                Ok(Released::EpochMoved) => sealed = self.store.resealed().await?,
                Err(e) => sealed = reseal_once(self.store, e, attempt).await?,
            }
        }
        Err(ArbiterError::StaleToken)
    }

    async fn try_release(
        &self,
        sealed: &Sealed,
        identity: &str,
        hkey: &str,
        token: FencingToken,
        revision: i64,
        lease: Option<i64>,
    ) -> Result<Released, ArbiterError> {
        let epoch = sealed.epoch();
        if token.epoch() != epoch.record.epoch {
            return Err(ArbiterError::StaleToken);
        }
        let mut compares = vec![Compare::mod_revision(
            EPOCH_KEY,
            CompareOp::Equal,
            epoch.mod_revision,
        )];
        let token_compare = !self.bugs.has(Bug::ReleaseWithoutTokenCompare);
        if token_compare {
            compares.push(Compare::create_revision(hkey, CompareOp::Equal, revision));
        }
        match lease {
            Some(lease) => {
                self.sessions.owned(self.store, lease, identity).await?;
                compares.push(Compare::lease(hkey, CompareOp::Equal, lease));
            }
            None => {
                let resp = sealed.get(hkey).await?;
                let kv = resp.kvs().first().ok_or(ArbiterError::StaleToken)?;
                let ours = decode::<Holder>(kv.value()).is_some_and(|h| h.spiffe_id == identity);
                if !ours || (token_compare && kv.create_revision() != revision) {
                    return Err(ArbiterError::StaleToken);
                }
                compares.push(Compare::mod_revision(
                    hkey,
                    CompareOp::Equal,
                    kv.mod_revision(),
                ));
            }
        }
        let txn = Txn::new()
            .when(compares)
            .and_then(vec![TxnOp::delete(hkey, None)])
            .or_else(vec![TxnOp::get(EPOCH_KEY, None)]);
        let resp = sealed.txn(txn).await?;
        let epoch_seen = match resp.op_responses().first() {
            Some(TxnOpResponse::Get(g)) => g.kvs().first().map(KeyValue::mod_revision),
            _ => None,
        };
        release_verdict(resp.succeeded(), epoch_seen, epoch.mod_revision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_verdict_table() {
        let cases = [
            // (committed, epoch record's mod revision read back, compared, verdict)
            (true, None, 5, Ok(Released::Done)),
            (false, Some(5), 5, Err("stale")), // same epoch: not this token's grant
            (false, Some(9), 5, Ok(Released::EpochMoved)), // advanced: retry
            (false, None, 5, Ok(Released::EpochMoved)), // record gone: re-read it
        ];
        for (committed, seen, compared, want) in cases {
            let got = release_verdict(committed, seen, compared);
            match (got, want) {
                (Ok(g), Ok(w)) => assert_eq!(g, w),
                (Err(ArbiterError::StaleToken), Err(_)) => {}
                (g, w) => panic!("{committed} {seen:?} {compared}: got {g:?}, want {w:?}"),
            }
        }
    }
}
