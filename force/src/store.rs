//! The etcd side of a force release: read the hold, file the request, and execute the
//! approval as one transaction that re-checks everything it relies on.
//!
//! The execution Txn (ADR-20):
//! ```text
//! if   mod_revision(/l/<key>)               == the hold's revision in the request
//!  and mod_revision(/sys/force-request/<id>) == as read (still pending: one approval wins)
//!  [and mod_revision(/s/<session>)           == as read, when revoking the session]
//! then delete /l/<key>; delete /sys/force-request/<id>;
//!      put /sys/force/<id> = ForceRecord  (24 h lease)
//!      [put /s/<session> = {.., closing: true} (on its own lease)]
//! ```
//! then, when asked, the session's lease is revoked (every other hold it has ends; the
//! `closing` mark makes the audit trail record a close, not an expiry). The 24 h lease on
//! the record keeps etcd small; the audit tailer copies the record to the audit store.
//!
//! With etcd roles this runs as the `force` user (`lock_store::etcd_roles`).

use crate::oidc::Operator;
use crate::request::{ForceRecord, ForceRequest, HoldView, Refusal, approve_verdict, file_verdict};
use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use lock_config::registry::Enforcement;
use lock_store::layout::{
    FORCE_PREFIX, FORCE_REQUEST_PREFIX, HOLDER_PREFIX, Holder, SessionRecord, decode, encode,
    session_key,
};
use lock_store::{Etcd, StoreError, registry_files};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long an executed release's record stays in etcd (the audit store keeps it after).
pub const RECORD_TTL_SECONDS: i64 = 24 * 3600;

#[derive(Debug, thiserror::Error)]
pub enum ForceError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error("etcd: {0}")]
    Store(String),
}

impl From<StoreError> for ForceError {
    fn from(e: StoreError) -> Self {
        ForceError::Store(e.to_string())
    }
}

impl From<etcd_client::Error> for ForceError {
    fn from(e: etcd_client::Error) -> Self {
        ForceError::Store(e.to_string())
    }
}

/// An approval's outcome: the record, and whether revoking the session (when asked)
/// failed after the hold was released.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Executed {
    pub record: ForceRecord,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_revoke_error: Option<String>,
}

pub struct ForceStore {
    etcd: Etcd,
    /// The registry folder: read at each filing, for the class's enforcement.
    registry: Option<PathBuf>,
    request_ttl: Duration,
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn request_key(id: &str) -> String {
    format!("{FORCE_REQUEST_PREFIX}{id}")
}

fn record_key(id: &str) -> String {
    format!("{FORCE_PREFIX}{id}")
}

/// Request ids are random (64 bits), lower-case hex: unguessable enough that a page link
/// names one request, and short enough to type.
pub fn new_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// Deletes `key` if it is still at mod revision `rev` (a pending request withdrawn).
/// Best effort: an error leaves it to expire on its lease.
pub async fn delete_if_unchanged(etcd: &Etcd, key: &str, rev: i64) {
    let txn = Txn::new()
        .when([Compare::mod_revision(key, CompareOp::Equal, rev)])
        .and_then([TxnOp::delete(key, None)]);
    let _ = etcd.txn(txn).await;
}

pub fn is_request_id(id: &str) -> bool {
    id.len() == 16
        && id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

impl ForceStore {
    pub fn new(etcd: Etcd, registry: Option<PathBuf>, request_ttl: Duration) -> Self {
        ForceStore {
            etcd,
            registry,
            request_ttl,
        }
    }

    /// The etcd handle (the explorer reads the same store with it).
    pub fn etcd(&self) -> &Etcd {
        &self.etcd
    }

    /// The hold on `key` now, if any.
    pub async fn hold(&self, key: &str) -> Result<Option<HoldView>, ForceError> {
        let resp = self.etcd.get(&format!("{HOLDER_PREFIX}{key}")).await?;
        Ok(resp.kvs().first().map(|kv| {
            let h = decode::<Holder>(kv.value()).unwrap_or_default();
            HoldView {
                revision: kv.mod_revision(),
                spiffe_id: h.spiffe_id,
                session: h.session,
                class: h.class,
                acquired_at_ms: h.acquired_at_ms,
            }
        }))
    }

    fn enforcement_of(&self, class: &str) -> String {
        let Some(dir) = &self.registry else {
            return "unknown".into();
        };
        match registry_files::load(dir) {
            Ok(reg) => match reg
                .classes()
                .find(|c| c.name == class)
                .map(|c| c.spec.enforcement)
            {
                Some(Enforcement::Fenced) => "fenced".into(),
                Some(Enforcement::Advisory) => "advisory".into(),
                None => "unknown".into(),
            },
            Err(_) => "unknown".into(),
        }
    }

    /// Files a request by `requester`; it expires after the request TTL.
    pub async fn file(
        &self,
        key: &str,
        reason: &str,
        revoke_session: bool,
        requester: &Operator,
    ) -> Result<ForceRequest, ForceError> {
        let hold = if lock_config::LockKey::parse(key).is_ok() {
            self.hold(key).await?
        } else {
            None
        };
        file_verdict(key, reason, hold.as_ref())?;
        let Some(hold) = hold else {
            return Err(Refusal::NotHeld.into());
        };
        let now = now_ms();
        let ttl = i64::try_from(self.request_ttl.as_secs())
            .unwrap_or(3600)
            .max(60);
        let req = ForceRequest {
            id: new_id(),
            key: key.to_owned(),
            reason: reason.trim().to_owned(),
            revoke_session,
            requester: requester.clone(),
            filed_at_ms: now,
            expires_at_ms: now + u64::try_from(ttl).unwrap_or(3600) * 1000,
            enforcement: self.enforcement_of(&hold.class),
            hold,
        };
        let lease = self.etcd.lease().grant(ttl, None).await?.id();
        self.etcd
            .kv()
            .put(
                request_key(&req.id),
                encode(&req),
                Some(PutOptions::new().with_lease(lease)),
            )
            .await?;
        Ok(req)
    }

    async fn list<T: for<'de> serde::Deserialize<'de>>(
        &self,
        prefix: &str,
    ) -> Result<Vec<T>, ForceError> {
        let resp = self
            .etcd
            .kv()
            .get(prefix, Some(GetOptions::new().with_prefix()))
            .await?;
        Ok(resp
            .kvs()
            .iter()
            .filter_map(|kv| decode(kv.value()))
            .collect())
    }

    /// Pending requests, oldest first.
    pub async fn pending(&self) -> Result<Vec<ForceRequest>, ForceError> {
        let mut all: Vec<ForceRequest> = self.list(FORCE_REQUEST_PREFIX).await?;
        let now = now_ms();
        all.retain(|r| r.expires_at_ms > now);
        all.sort_by_key(|r| r.filed_at_ms);
        Ok(all)
    }

    /// Releases executed in the last 24 h, newest first.
    pub async fn executed(&self) -> Result<Vec<ForceRecord>, ForceError> {
        let mut all: Vec<ForceRecord> = self.list(FORCE_PREFIX).await?;
        all.sort_by_key(|r| std::cmp::Reverse(r.executed_at_ms));
        Ok(all)
    }

    /// A pending request and its key's mod revision.
    async fn request(&self, id: &str) -> Result<(ForceRequest, i64), ForceError> {
        // Ids are what `new_id` makes; anything else names no request (and no other key).
        if !is_request_id(id) {
            return Err(Refusal::NotFound.into());
        }
        let resp = self.etcd.get(&request_key(id)).await?;
        let kv = resp.kvs().first().ok_or(Refusal::NotFound)?;
        let req = decode::<ForceRequest>(kv.value()).ok_or(Refusal::NotFound)?;
        Ok((req, kv.mod_revision()))
    }

    /// A request whose hold has ended or changed can never be approved: it is deleted
    /// (if still the one read), so no one approves a stale request later. Best effort: an
    /// error leaves it to expire.
    async fn withdraw_if_dead(&self, refusal: &Refusal, id: &str, rev: i64) {
        if matches!(refusal, Refusal::HoldChanged { .. } | Refusal::HoldGone) {
            delete_if_unchanged(&self.etcd, &request_key(id), rev).await;
        }
    }

    /// Approves and executes request `id` as `approver`.
    pub async fn approve(&self, id: &str, approver: &Operator) -> Result<Executed, ForceError> {
        let (req, req_rev) = self.request(id).await?;
        let hold = self.hold(&req.key).await?;
        if let Err(refusal) = approve_verdict(&req, approver, hold.as_ref(), now_ms()) {
            self.withdraw_if_dead(&refusal, id, req_rev).await;
            return Err(refusal.into());
        }
        let session_lease = i64::from_str_radix(&req.hold.session, 16)
            .or_else(|_| u64::from_str_radix(&req.hold.session, 16).map(|v| v as i64))
            .ok();
        // When revoking the session, mark its record closing in the same Txn.
        let session = match (req.revoke_session, session_lease) {
            (true, Some(lease)) => {
                let resp = self.etcd.get(&session_key(lease)).await?;
                resp.kvs().first().and_then(|kv| {
                    decode::<SessionRecord>(kv.value()).map(|r| (lease, r, kv.mod_revision()))
                })
            }
            _ => None,
        };
        let record = ForceRecord::of(&req, approver, now_ms());
        let record_lease = self
            .etcd
            .lease()
            .grant(RECORD_TTL_SECONDS, None)
            .await?
            .id();
        let holder_key = format!("{HOLDER_PREFIX}{}", req.key);
        let mut compares = vec![
            Compare::mod_revision(holder_key.as_str(), CompareOp::Equal, req.hold.revision),
            Compare::mod_revision(request_key(id), CompareOp::Equal, req_rev),
        ];
        let mut ops = vec![
            TxnOp::delete(holder_key.as_str(), None),
            TxnOp::delete(request_key(id), None),
            TxnOp::put(
                record_key(id),
                encode(&record),
                Some(PutOptions::new().with_lease(record_lease)),
            ),
        ];
        if let Some((lease, rec, rev)) = &session {
            let closing = SessionRecord {
                closing: true,
                ..rec.clone()
            };
            compares.push(Compare::mod_revision(
                session_key(*lease),
                CompareOp::Equal,
                *rev,
            ));
            ops.push(TxnOp::put(
                session_key(*lease),
                encode(&closing),
                Some(PutOptions::new().with_lease(*lease)),
            ));
        }
        let resp = self.etcd.txn(Txn::new().when(compares).and_then(ops)).await;
        let committed = match resp {
            Ok(r) => r.succeeded(),
            Err(e) => {
                // Unknown outcome: the record's lease is kept (if the Txn committed, the
                // record is on it). The caller sees an error and can list to find out.
                return Err(e.into());
            }
        };
        if !committed {
            let _ = self.etcd.revoke(record_lease).await;
            // Say what changed.
            let (still, _) = match self.request(id).await {
                Ok(r) => r,
                Err(ForceError::Refused(Refusal::NotFound)) => {
                    return Err(Refusal::NotFound.into());
                }
                Err(e) => return Err(e),
            };
            let now = self.hold(&still.key).await?;
            if let Err(refusal) = approve_verdict(&still, approver, now.as_ref(), now_ms()) {
                self.withdraw_if_dead(&refusal, id, req_rev).await;
                return Err(refusal.into());
            }
            // The request and the hold read as before, so the session record moved (a
            // close marks it; renewals do not write it): its hold is ending.
            return Err(Refusal::HoldGone.into());
        }
        let mut session_revoke_error = None;
        if req.revoke_session && session.is_none() {
            // The holder record named no readable session: only the hold was released.
            session_revoke_error = Some(format!(
                "the hold is released, but its session ({}) could not be read to revoke; its other holds end when its TTL lapses",
                req.hold.session
            ));
        }
        if let Some((lease, _, _)) = session
            && let Err(e) = self.etcd.revoke(lease).await
        {
            session_revoke_error = Some(format!(
                "the hold is released, but revoking session {:x} failed ({e}); its other holds end when its TTL lapses",
                lease
            ));
        }
        Ok(Executed {
            record,
            session_revoke_error,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_sixteen_lower_hex_digits() {
        assert!(is_request_id(&new_id()));
        for bad in [
            "",
            "../../epoch",
            "0123456789ABCDEF",
            "0123456789abcde",
            "0123456789abcdef0",
        ] {
            assert!(!is_request_id(bad), "{bad:?}");
        }
    }
}
