//! Sessions (ADR-10): one etcd lease, bound to the identity that opened it by `/s/<lease>`.
//! The binding never changes while the lease lives, so it is cached after the first read.

use crate::error::ArbiterError;
use crate::ops::metrics::METRICS;
use crate::store::layout::{SessionRecord, decode, encode, session_key};
use crate::store::{Sealed, Store, TxnBuilder};
use dashmap::DashMap;
use etcd_client::{Compare, CompareOp};
use lock_store::{Contended, StoreError};
use std::collections::HashSet;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub lease: i64,
    pub spiffe_id: String,
    /// The client's process instance (`lock-instance`), if it sent one; copied into the
    /// holder record of every grant to this session.
    pub instance: Option<String>,
    pub ttl_seconds: u32,
    /// Create revision of `/s/<lease>`: grants compare it to know the session still lives.
    pub create_revision: i64,
}

/// Attempts at a random lease id before giving up (a collision among 2^63 ids is a
/// once-in-a-lifetime event; more than one in a row means something else is wrong).
const LEASE_ID_ATTEMPTS: usize = 4;

/// Sessions one KeepAlive stream may renew: a process has one session per TTL, so a handful.
pub const MAX_SESSIONS_PER_STREAM: usize = 16;

/// A session id the caller cannot guess: etcd's own lease ids are nearly sequential
/// (issue 13 found a victim's session in four guesses), so the arbiter picks a random
/// positive 63-bit id and asks etcd for exactly that one. Ownership is still checked on
/// every use (`/s/<lease>`); randomness only stops the enumeration.
///
/// With several clusters the top 8 bits (below the sign) are the cluster's tag
/// (`lock_config::shards::lease_tag`), so any arbiter routes a session id to its cluster;
/// 55 random bits remain.
pub(crate) async fn grant_random_lease(
    sealed: &Sealed,
    ttl_seconds: u32,
    tag: Option<u8>,
) -> Result<i64, ArbiterError> {
    for _ in 0..LEASE_ID_ATTEMPTS {
        let id = match tag {
            Some(tag) => lock_config::shards::tagged_lease(tag, rand::random::<u64>()),
            None => random_lease_id(),
        };
        if let Some(lease) = sealed.grant_lease(ttl_seconds, id).await? {
            return Ok(lease);
        }
    }
    Err(ArbiterError::Store(StoreError::Contended(
        Contended::LeaseIds,
    )))
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
    /// Grants a lease and binds it to `spiffe_id` (and the caller's `instance`).
    pub async fn open(
        &self,
        store: &Store,
        spiffe_id: &str,
        instance: Option<String>,
        ttl_seconds: u32,
    ) -> Result<Session, ArbiterError> {
        let sealed = store.sealed().await?;
        let lease = grant_random_lease(&sealed, ttl_seconds, store.lease_tag()).await?;
        let record = SessionRecord {
            spiffe_id: spiffe_id.to_owned(),
            instance: instance.clone(),
            ttl_seconds,
            closing: false,
        };
        let key = session_key(lease);
        let mut txn = TxnBuilder::new();
        txn.when(
            "session-absent",
            Compare::create_revision(key.as_str(), CompareOp::Equal, 0),
        );
        txn.put(&key, encode(&record), Some(lease));
        let bound = match sealed.txn(txn).await {
            Ok(r) if r.succeeded() => r.revision(),
            Ok(_) => None,
            Err(e) => {
                let _ = sealed.revoke(lease).await;
                return Err(e);
            }
        };
        let Some(create_revision) = bound else {
            let _ = sealed.revoke(lease).await;
            return Err(ArbiterError::Store(StoreError::Contended(
                Contended::SessionKey,
            )));
        };
        let session = Session {
            lease,
            spiffe_id: spiffe_id.to_owned(),
            instance,
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
                let resp = store.sealed().await?.get(&session_key(lease)).await?;
                let kv = resp.kvs().first().ok_or(ArbiterError::SessionNotFound)?;
                let rec =
                    decode::<SessionRecord>(kv.value()).ok_or(ArbiterError::SessionNotFound)?;
                let s = Session {
                    lease,
                    spiffe_id: rec.spiffe_id,
                    instance: rec.instance,
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
        let sealed = store.sealed().await?;
        // Mark the record closing (an overwrite on the same lease, only while it is this
        // session's), then revoke: the audit trail reads the mark in the revoke's deletes.
        let key = session_key(session.lease);
        let record = SessionRecord {
            spiffe_id: session.spiffe_id.clone(),
            instance: session.instance.clone(),
            ttl_seconds: session.ttl_seconds,
            closing: true,
        };
        let mut mark = TxnBuilder::new();
        mark.when(
            "session",
            Compare::create_revision(key.as_str(), CompareOp::Equal, session.create_revision),
        );
        mark.put(&key, encode(&record), Some(session.lease));
        if !sealed.txn(mark).await?.succeeded() {
            self.forget(session.lease);
            return Err(ArbiterError::SessionNotFound);
        }
        let revoked = sealed.revoke(session.lease).await;
        self.forget(session.lease);
        match revoked? {
            true => Ok(()),
            false => Err(ArbiterError::SessionNotFound),
        }
    }

    /// Renews `lease` for `spiffe_id`, one of the sessions of one client stream (`keepers`).
    /// Returns the lease's remaining TTL.
    pub async fn renew(
        &self,
        store: &Store,
        lease: i64,
        spiffe_id: &str,
        keepers: &mut Keepers,
    ) -> Result<i64, ArbiterError> {
        self.owned(store, lease, spiffe_id).await?;
        if !keepers.0.contains(&lease) && keepers.0.len() >= MAX_SESSIONS_PER_STREAM {
            return Err(ArbiterError::StreamFull {
                limit: MAX_SESSIONS_PER_STREAM,
            });
        }
        let resp = store.sealed().await?.renew(lease).await?;
        if keepers.0.insert(lease) {
            METRICS.sessions_kept.inc();
        }
        if resp.ttl() <= 0
            && store
                .bugs()
                .has(crate::ops::bugs::Bug::RenewalIgnoresExpiry)
        {
            return Ok(1);
        }
        if resp.ttl() <= 0 {
            if keepers.0.remove(&lease) {
                METRICS.sessions_kept.dec();
            }
            self.forget(lease);
            METRICS.keepalive_failures.inc();
            return Err(ArbiterError::SessionNotFound);
        }
        METRICS.keepalives.inc();
        Ok(resp.ttl())
    }
}

/// The sessions one client KeepAlive stream renews (bounded: [`MAX_SESSIONS_PER_STREAM`]).
/// Every renewal goes out on the arbiter's one etcd keepalive stream (`renewals.rs`).
#[derive(Default)]
pub struct Keepers(HashSet<i64>);

impl Drop for Keepers {
    /// The client's stream ended: its sessions are no longer kept here.
    fn drop(&mut self) {
        METRICS.sessions_kept.dec_by(self.0.len() as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_lease_ids_are_positive_and_never_zero() {
        // Zero asks etcd to choose (a guessable id); negative ids are refused by etcd.
        for _ in 0..10_000 {
            assert!(random_lease_id() > 0);
        }
    }
}
