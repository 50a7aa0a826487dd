//! The engine's reads, never a grant: ValidateToken (is a token the current grant?) and
//! Inspect (the holder record, the waiters, the shared holds).

use super::Engine;
use crate::error::ArbiterError;
use crate::lock::grant::{MAX_ATTEMPTS, reseal_once};
use crate::store::TxnBuilder;
use crate::store::layout::{EPOCH_KEY, Holder, decode, holder_key};
use etcd_client::KeyValue;
use lock_config::registry::Fairness;
use lock_config::{FencingToken, LockKey};

/// What Inspect reports: never a token.
#[derive(Debug, Clone, Default)]
pub struct Inspection {
    pub holder: Option<Holder>,
    pub waiters: usize,
    /// Shared holds of the key (a `shared: true` class).
    pub shared_holders: usize,
    /// A semaphore (`permits: N` class): its permits held now, N, and the class's name.
    pub permits_held: usize,
    pub permits: u32,
    pub class: Option<String>,
}

impl Engine {
    /// ValidateToken (ADR-16): is `token` the current grant of `key`? One linearizable
    /// transaction reads the holder and the epoch record together.
    pub async fn validate(&self, key: &LockKey, token: FencingToken) -> Result<bool, ArbiterError> {
        let hkey = holder_key(key);
        let store = &self.route(key).await?.store;
        let mut sealed = store.sealed().await?;
        for attempt in 0..MAX_ATTEMPTS {
            let mut txn = TxnBuilder::new();
            let holder = txn.then_read(&hkey);
            let epoch_read = txn.then_read(EPOCH_KEY);
            let resp = match sealed.txn(txn).await {
                Ok(r) => r,
                Err(e) => {
                    sealed = reseal_once(store, e, attempt).await?;
                    continue;
                }
            };
            let epoch = sealed.epoch();
            if resp.kv(epoch_read).map(KeyValue::mod_revision) != Some(epoch.mod_revision) {
                sealed = store.resealed().await?;
                continue;
            }
            let current = resp.kv(holder).map(KeyValue::mod_revision);
            let revision = i64::try_from(token.revision()).ok();
            if token.epoch() != epoch.record.epoch {
                return Ok(false);
            }
            if current == revision {
                return Ok(true);
            }
            // A shared hold's token names its own record (a class that is shared now, or
            // was: the records say, not the registry); so does a semaphore's permit.
            return match revision {
                Some(r) if crate::lock::shared::is_current(&sealed, key, r).await? => Ok(true),
                Some(_) => Ok(crate::lock::permit::record_of(&sealed, key, token)
                    .await?
                    .is_some()),
                None => Ok(false),
            };
        }
        Err(ArbiterError::NoQuorum)
    }

    /// Inspect: the holder record (identity, class, since when) and the waiter count.
    pub async fn inspect(&self, key: &LockKey) -> Result<Inspection, ArbiterError> {
        let sealed = self.route(key).await?.store.sealed().await?;
        let resp = sealed.get(&holder_key(key)).await?;
        let durable = self
            .registry()
            .class_for(key)
            .is_some_and(|c| c.spec.fairness == Fairness::Durable);
        let waiters = if durable {
            crate::lock::wait::durable::waiters(&sealed, key).await?
        } else {
            self.queues.len(key.as_str())
        };
        let registry = self.registry();
        let class = registry.class_for(key);
        let shared_holders = match &class {
            Some(c) if c.spec.shared => crate::lock::shared::count(&sealed, key).await?,
            _ => 0,
        };
        let (permits_held, permits) = match class.as_ref().and_then(|c| c.permits()) {
            Some(n) => (crate::lock::permit::count(&sealed, key).await?, n),
            None => (0, 0),
        };
        Ok(Inspection {
            shared_holders,
            permits_held,
            permits,
            class: class.map(|c| c.name.to_owned()),
            holder: resp
                .kvs()
                .first()
                .and_then(|kv| decode::<Holder>(kv.value())),
            waiters,
        })
    }
}
