//! Grant and release: one etcd transaction each (DESIGN 4.2).
//!
//! Grant: compare `/sys/epoch` unchanged AND `/l/<key>` absent AND the session still bound
//! -> put the holder on the session lease; else read all three to classify the refusal.
//! The token is `epoch << 48 | header.revision` of the committing transaction, handed out
//! only after the header's cluster ID passes the seal check.
//! Release: delete the holder only if it is still the same grant (its create revision is the
//! token's revision) under the current epoch.

use crate::epoch::{Epoch, EpochCache};
use crate::error::ArbiterError;
use crate::layout::{EPOCH_KEY, Holder, decode, encode, holder_key, lease_hex, session_key};
use crate::sessions::{Session, Sessions};
use crate::store::Store;
use etcd_client::{
    Compare, CompareOp, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse,
};
use lock_config::registry::ResolvedClass;
use lock_config::{FencingToken, LockKey, Registry};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Attempts per request when the epoch record moved or the key was released between the
/// compare and the classification read; bounded so a flapping store cannot spin a request.
const MAX_ATTEMPTS: usize = 3;

pub struct Engine {
    pub store: Store,
    pub registry: Arc<Registry>,
    pub epoch: EpochCache,
    pub sessions: Sessions,
}

/// A successful grant.
#[derive(Debug, Clone)]
pub struct Grant {
    pub token: FencingToken,
    pub class: String,
    pub ttl_seconds: u32,
}

enum Outcome {
    Granted(Grant),
    Retry,
}

impl Engine {
    pub fn new(store: Store, registry: Arc<Registry>) -> Self {
        Self {
            store,
            registry,
            epoch: EpochCache::default(),
            sessions: Sessions::default(),
        }
    }

    pub fn class_for(&self, key: &LockKey) -> Result<ResolvedClass<'_>, ArbiterError> {
        self.registry.class_for(key).ok_or(ArbiterError::NoClass)
    }

    pub async fn open_session(
        &self,
        identity: &str,
        key: &LockKey,
    ) -> Result<(Session, String), ArbiterError> {
        let class = self.class_for(key)?;
        // Refuse to hand out sessions from a sealed or uninitialised store.
        self.epoch.current(&self.store).await?;
        let session = self
            .sessions
            .open(&self.store, identity, class.ttl_seconds)
            .await?;
        Ok((session, class.name.to_owned()))
    }

    pub async fn acquire(
        &self,
        identity: &str,
        key: &LockKey,
        lease: i64,
    ) -> Result<Grant, ArbiterError> {
        let class = self.class_for(key)?;
        let session = self.sessions.owned(&self.store, lease, identity).await?;
        if session.ttl_seconds != class.ttl_seconds {
            return Err(ArbiterError::WrongSessionTtl {
                class: class.name.to_owned(),
                ttl_seconds: class.ttl_seconds,
            });
        }
        for _ in 0..MAX_ATTEMPTS {
            let epoch = self.epoch.current(&self.store).await?;
            match self.try_grant(&epoch, &session, key, &class).await? {
                Outcome::Granted(g) => return Ok(g),
                Outcome::Retry => continue,
            }
        }
        Err(ArbiterError::Held)
    }

    async fn try_grant(
        &self,
        epoch: &Epoch,
        session: &Session,
        key: &LockKey,
        class: &ResolvedClass<'_>,
    ) -> Result<Outcome, ArbiterError> {
        let hkey = holder_key(key);
        let skey = session_key(session.lease);
        let holder = Holder {
            spiffe_id: session.spiffe_id.clone(),
            session: lease_hex(session.lease),
            class: class.name.to_owned(),
            acquired_at_ms: now_ms(),
        };
        let txn = Txn::new()
            .when(vec![
                Compare::mod_revision(EPOCH_KEY, CompareOp::Equal, epoch.mod_revision),
                Compare::create_revision(hkey.as_str(), CompareOp::Equal, 0),
                Compare::create_revision(skey.as_str(), CompareOp::Equal, session.create_revision),
            ])
            .and_then(vec![TxnOp::put(
                hkey.as_str(),
                encode(&holder),
                Some(PutOptions::new().with_lease(session.lease)),
            )])
            .or_else(vec![
                TxnOp::get(hkey.as_str(), None),
                TxnOp::get(EPOCH_KEY, None),
                TxnOp::get(skey.as_str(), None),
            ]);
        let resp = match self.store.txn(txn).await {
            Ok(r) => r,
            // The outcome is unknown: the transaction may have committed. Read back before
            // answering so a committed grant is reported, not orphaned.
            Err(ArbiterError::NoQuorum) => {
                return self.read_back(epoch, session, &hkey, class).await;
            }
            Err(e) => return Err(e),
        };
        epoch.check_header(resp.header())?;
        if resp.succeeded() {
            let revision = resp.header().map_or(0, |h| h.revision());
            return self.granted(epoch, revision, class).map(Outcome::Granted);
        }
        self.classify(epoch, session, &resp, class).await
    }

    fn granted(
        &self,
        epoch: &Epoch,
        revision: i64,
        class: &ResolvedClass<'_>,
    ) -> Result<Grant, ArbiterError> {
        let revision =
            u64::try_from(revision).map_err(|_| ArbiterError::Store("bad revision".into()))?;
        let token = FencingToken::pack(epoch.record.epoch, revision)
            .map_err(|e| ArbiterError::Store(format!("cannot mint token: {e}")))?;
        Ok(Grant {
            token,
            class: class.name.to_owned(),
            ttl_seconds: class.ttl_seconds,
        })
    }

    async fn classify(
        &self,
        epoch: &Epoch,
        session: &Session,
        resp: &TxnResponse,
        class: &ResolvedClass<'_>,
    ) -> Result<Outcome, ArbiterError> {
        let ops = resp.op_responses();
        let got = |i: usize| -> Option<&KeyValue> {
            match ops.get(i) {
                Some(TxnOpResponse::Get(g)) => g.kvs().first(),
                _ => None,
            }
        };
        let (holder, epoch_kv, session_kv) = (got(0), got(1), got(2));
        if epoch_kv.map(KeyValue::mod_revision) != Some(epoch.mod_revision) {
            self.epoch.refresh(&self.store).await?;
            return Ok(Outcome::Retry);
        }
        if session_kv.map(KeyValue::create_revision) != Some(session.create_revision) {
            self.sessions.forget(session.lease);
            return Err(ArbiterError::SessionNotFound);
        }
        let Some(kv) = holder else {
            // Released between the compare and the read: try again.
            return Ok(Outcome::Retry);
        };
        self.holder_verdict(epoch, session, kv, class)
            .map(Outcome::Granted)
    }

    /// Who holds the key decides the refusal (ADR-13). Held by this very session: the
    /// grant already exists (a retried Acquire), so it is returned again.
    fn holder_verdict(
        &self,
        epoch: &Epoch,
        session: &Session,
        kv: &KeyValue,
        class: &ResolvedClass<'_>,
    ) -> Result<Grant, ArbiterError> {
        let holder = decode::<Holder>(kv.value());
        match holder {
            Some(h) if h.session == lease_hex(session.lease) => {
                self.granted(epoch, kv.create_revision(), class)
            }
            Some(h) if h.spiffe_id == session.spiffe_id => Err(ArbiterError::LeakedHold),
            _ => Err(ArbiterError::Held),
        }
    }

    async fn read_back(
        &self,
        epoch: &Epoch,
        session: &Session,
        hkey: &str,
        class: &ResolvedClass<'_>,
    ) -> Result<Outcome, ArbiterError> {
        let resp = self.store.get(hkey).await?;
        epoch.check_header(resp.header())?;
        match resp.kvs().first() {
            Some(kv)
                if decode::<Holder>(kv.value())
                    .is_some_and(|h| h.session == lease_hex(session.lease)) =>
            {
                self.holder_verdict(epoch, session, kv, class)
                    .map(Outcome::Granted)
            }
            // Not granted to us: the transaction did not commit (or the session expired).
            _ => Err(ArbiterError::NoQuorum),
        }
    }

    /// Releases the grant named by `token`. With a session, the grant must be attached to
    /// it; without, the holder's identity must be the caller's (read first, then a
    /// transaction comparing the holder unchanged).
    pub async fn release(
        &self,
        identity: &str,
        key: &LockKey,
        token: FencingToken,
        lease: Option<i64>,
    ) -> Result<(), ArbiterError> {
        let hkey = holder_key(key);
        let revision = i64::try_from(token.revision()).map_err(|_| ArbiterError::MalformedToken)?;
        for _ in 0..MAX_ATTEMPTS {
            let epoch = self.epoch.current(&self.store).await?;
            if token.epoch() != epoch.record.epoch {
                return Err(ArbiterError::StaleToken);
            }
            let mut compares = vec![
                Compare::mod_revision(EPOCH_KEY, CompareOp::Equal, epoch.mod_revision),
                Compare::create_revision(hkey.as_str(), CompareOp::Equal, revision),
            ];
            match lease {
                Some(lease) => {
                    self.sessions.owned(&self.store, lease, identity).await?;
                    compares.push(Compare::lease(hkey.as_str(), CompareOp::Equal, lease));
                }
                None => {
                    let resp = self.store.get(&hkey).await?;
                    epoch.check_header(resp.header())?;
                    let kv = resp.kvs().first().ok_or(ArbiterError::StaleToken)?;
                    let ours =
                        decode::<Holder>(kv.value()).is_some_and(|h| h.spiffe_id == identity);
                    if !ours || kv.create_revision() != revision {
                        return Err(ArbiterError::StaleToken);
                    }
                    compares.push(Compare::mod_revision(
                        hkey.as_str(),
                        CompareOp::Equal,
                        kv.mod_revision(),
                    ));
                }
            }
            let txn = Txn::new()
                .when(compares)
                .and_then(vec![TxnOp::delete(hkey.as_str(), None)])
                .or_else(vec![TxnOp::get(EPOCH_KEY, None)]);
            let resp = self.store.txn(txn).await?;
            epoch.check_header(resp.header())?;
            if resp.succeeded() {
                return Ok(());
            }
            let epoch_moved = match resp.op_responses().first() {
                Some(TxnOpResponse::Get(g)) => {
                    g.kvs().first().map(KeyValue::mod_revision) != Some(epoch.mod_revision)
                }
                _ => true,
            };
            if !epoch_moved {
                return Err(ArbiterError::StaleToken);
            }
            self.epoch.refresh(&self.store).await?;
        }
        Err(ArbiterError::StaleToken)
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
