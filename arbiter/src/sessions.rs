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

/// Attempts at a random lease id before giving up (a collision among 2^63 ids is a
/// once-in-a-lifetime event; more than one in a row means something else is wrong).
const LEASE_ID_ATTEMPTS: usize = 4;

/// A session id the caller cannot guess: etcd's own lease ids are nearly sequential
/// (issue 13 found a victim's session in four guesses), so the arbiter picks a random
/// positive 63-bit id and asks etcd for exactly that one. Ownership is still checked on
/// every use (`/s/<lease>`); randomness only stops the enumeration.
async fn grant_random_lease(
    store: &Store,
    leases: &mut etcd_client::LeaseClient,
    ttl_seconds: u32,
) -> Result<i64, ArbiterError> {
    for _ in 0..LEASE_ID_ATTEMPTS {
        let id = random_lease_id();
        let options = etcd_client::LeaseGrantOptions::new().with_id(id);
        match store
            .raw_bounded(leases.grant(i64::from(ttl_seconds), Some(options)))
            .await
        {
            Ok(Ok(r)) => return Ok(r.id()),
            // etcd's ErrGRPCLeaseExist: that id is taken; draw another.
            Ok(Err(etcd_client::Error::GRpcStatus(s)))
                if s.code() == tonic::Code::FailedPrecondition => {}
            Ok(Err(e)) => return Err(e.into()),
            Err(e) => return Err(e),
        }
    }
    Err(ArbiterError::Store("no free random lease id".into()))
}

/// Uniform in 1..2^63: positive, never 0 (0 asks etcd to choose).
fn random_lease_id() -> i64 {
    let id = rand::random::<u64>() >> 1;
    i64::try_from(id).unwrap_or(i64::MAX).max(1)
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
        let lease = grant_random_lease(store, &mut leases, ttl_seconds).await?;
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
