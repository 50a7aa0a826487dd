//! Sessions (ADR-10): one etcd lease, bound to the identity that opened it by `/s/<lease>`.
//! The binding never changes while the lease lives, so it is cached after the first read.

use crate::error::ArbiterError;
use crate::layout::{SessionRecord, decode, encode, session_key};
use crate::store::Store;
use dashmap::DashMap;
use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub lease: i64,
    pub spiffe_id: String,
    pub ttl_seconds: u32,
    /// Create revision of `/s/<lease>`: grants compare it to know the session still lives.
    pub create_revision: i64,
}

#[derive(Default)]
pub struct Sessions {
    known: DashMap<i64, Session>,
}

impl Sessions {
    /// Grants a lease and binds it to `spiffe_id`.
    pub async fn open(
        &self,
        store: &Store,
        spiffe_id: &str,
        ttl_seconds: u32,
    ) -> Result<Session, ArbiterError> {
        let mut leases = store.lease();
        let lease = store
            .bounded(leases.grant(i64::from(ttl_seconds), None))
            .await?
            .id();
        let record = SessionRecord {
            spiffe_id: spiffe_id.to_owned(),
            ttl_seconds,
        };
        let key = session_key(lease);
        let txn = Txn::new()
            .when(vec![Compare::create_revision(
                key.as_str(),
                CompareOp::Equal,
                0,
            )])
            .and_then(vec![TxnOp::put(
                key.as_str(),
                encode(&record),
                Some(PutOptions::new().with_lease(lease)),
            )]);
        let bound = match store.txn(txn).await {
            Ok(r) if r.succeeded() => r.header().map(|h| h.revision()),
            Ok(_) => None,
            Err(e) => {
                let _ = store.bounded(leases.revoke(lease)).await;
                return Err(e);
            }
        };
        let Some(create_revision) = bound else {
            let _ = store.bounded(leases.revoke(lease)).await;
            return Err(ArbiterError::Store("session key already existed".into()));
        };
        let session = Session {
            lease,
            spiffe_id: spiffe_id.to_owned(),
            ttl_seconds,
            create_revision,
        };
        self.known.insert(lease, session.clone());
        Ok(session)
    }

    /// The session `lease` if it exists and belongs to `spiffe_id`. Another identity's
    /// session is reported exactly like a missing one.
    pub async fn owned(
        &self,
        store: &Store,
        lease: i64,
        spiffe_id: &str,
    ) -> Result<Session, ArbiterError> {
        let session = match self.known.get(&lease).map(|s| s.clone()) {
            Some(s) => s,
            None => {
                let resp = store.get(&session_key(lease)).await?;
                let kv = resp.kvs().first().ok_or(ArbiterError::SessionNotFound)?;
                let rec =
                    decode::<SessionRecord>(kv.value()).ok_or(ArbiterError::SessionNotFound)?;
                let s = Session {
                    lease,
                    spiffe_id: rec.spiffe_id,
                    ttl_seconds: rec.ttl_seconds,
                    create_revision: kv.create_revision(),
                };
                self.known.insert(lease, s.clone());
                s
            }
        };
        if session.spiffe_id == spiffe_id {
            Ok(session)
        } else {
            Err(ArbiterError::SessionNotFound)
        }
    }

    /// Forgets a session found gone.
    pub fn forget(&self, lease: i64) {
        self.known.remove(&lease);
    }

    /// Revokes the lease: etcd deletes every key attached to it in one committed entry.
    pub async fn close(&self, store: &Store, session: &Session) -> Result<(), ArbiterError> {
        let mut leases = store.lease();
        let r = store.bounded(leases.revoke(session.lease)).await;
        self.forget(session.lease);
        match r {
            Ok(_) => Ok(()),
            Err(ArbiterError::Store(m)) if m.contains("lease not found") => {
                Err(ArbiterError::SessionNotFound)
            }
            Err(e) => Err(e),
        }
    }
}
