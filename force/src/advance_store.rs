//! The etcd side of the two-person epoch advance: file the request, and execute the
//! approval as the compare-and-advance transaction with the request's own compare and
//! delete inside it (`lock_arbiter::epoch::advance`):
//!
//! ```text
//! if   mod_revision(/sys/epoch)                  == as read (still epoch E)
//!  and mod_revision(/sys/advance-request/<id>)   == as read (still pending: one approval wins)
//! then put /sys/epoch = {E+1, cluster ID, advanced_by}; delete /l/*, /q/*;
//!      delete /sys/advance-request/<id>
//! ```
//!
//! With etcd roles this runs as the `force` user, whose role may write `/sys/epoch*` and
//! `/sys/advance-request/`; the operator's may not.

use crate::advance::{AdvanceRequest, StoreNow, approve_verdict, file_verdict, is_dead};
use crate::oidc::Operator;
use crate::request::Refusal;
use crate::store::{ForceError, delete_if_unchanged, is_request_id, new_id, now_ms};
use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, TxnOp};
use lock_arbiter::layout::{ADVANCE_REQUEST_PREFIX, EPOCH_KEY, EpochRecord, decode, encode};
use lock_arbiter::{Etcd, epoch};
use std::time::Duration;

fn request_key(id: &str) -> String {
    format!("{ADVANCE_REQUEST_PREFIX}{id}")
}

pub struct AdvanceStore {
    etcd: Etcd,
    request_ttl: Duration,
}

impl AdvanceStore {
    pub fn new(etcd: Etcd, request_ttl: Duration) -> Self {
        AdvanceStore { etcd, request_ttl }
    }

    /// The store's epoch and the cluster ID its answer came from (None: no record).
    pub async fn now(&self) -> Result<Option<StoreNow>, ForceError> {
        let resp = self.etcd.get(EPOCH_KEY).await?;
        let cluster_id = resp
            .header()
            .map(|h| EpochRecord::cluster_id_hex(h.cluster_id()))
            .unwrap_or_default();
        Ok(resp
            .kvs()
            .first()
            .and_then(|kv| decode::<EpochRecord>(kv.value()))
            .map(|r| StoreNow {
                epoch: r.epoch,
                cluster_id,
            }))
    }

    /// Files an advance from `from` by `requester`; it expires after the request TTL.
    pub async fn file(
        &self,
        from: u16,
        reason: &str,
        requester: &Operator,
    ) -> Result<AdvanceRequest, ForceError> {
        let now = self.now().await?;
        file_verdict(from, reason, now.as_ref())?;
        let cluster_id = now.map(|n| n.cluster_id).unwrap_or_default();
        let filed = now_ms();
        let ttl = i64::try_from(self.request_ttl.as_secs())
            .unwrap_or(3600)
            .max(60);
        let req = AdvanceRequest {
            id: new_id(),
            from,
            cluster_id,
            reason: reason.trim().to_owned(),
            requester: requester.clone(),
            filed_at_ms: filed,
            expires_at_ms: filed + u64::try_from(ttl).unwrap_or(3600) * 1000,
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

    /// Pending requests, oldest first.
    pub async fn pending(&self) -> Result<Vec<AdvanceRequest>, ForceError> {
        let resp = self
            .etcd
            .kv()
            .get(
                ADVANCE_REQUEST_PREFIX,
                Some(GetOptions::new().with_prefix()),
            )
            .await?;
        let now = now_ms();
        let mut all: Vec<AdvanceRequest> = resp
            .kvs()
            .iter()
            .filter_map(|kv| decode(kv.value()))
            .filter(|r: &AdvanceRequest| r.expires_at_ms > now)
            .collect();
        all.sort_by_key(|r| r.filed_at_ms);
        Ok(all)
    }

    async fn request(&self, id: &str) -> Result<(AdvanceRequest, i64), ForceError> {
        // Ids are what `new_id` makes; anything else names no request (and no other key).
        if !is_request_id(id) {
            return Err(Refusal::NotFound.into());
        }
        let resp = self.etcd.get(&request_key(id)).await?;
        let kv = resp.kvs().first().ok_or(Refusal::NotFound)?;
        let req = decode::<AdvanceRequest>(kv.value()).ok_or(Refusal::NotFound)?;
        Ok((req, kv.mod_revision()))
    }

    /// A request the store has moved past can never be approved: deleted (if still the
    /// one read).
    async fn withdraw(&self, id: &str, rev: i64) {
        delete_if_unchanged(&self.etcd, &request_key(id), rev).await;
    }

    /// Approves and executes request `id` as `approver`: the new epoch record.
    pub async fn approve(&self, id: &str, approver: &Operator) -> Result<EpochRecord, ForceError> {
        let (req, req_rev) = self.request(id).await?;
        let now = self.now().await?;
        if let Err(refusal) = approve_verdict(&req, approver, now.as_ref(), now_ms()) {
            if is_dead(&refusal) {
                self.withdraw(id, req_rev).await;
            }
            return Err(refusal.into());
        }
        let plan =
            epoch::advance::plan(&self.etcd, req.from, None, Some(req.advanced_by(approver)))
                .await?;
        // The store answered from the filed cluster: the plan binds the new epoch to it.
        if plan.cluster_id != req.cluster_id {
            self.withdraw(id, req_rev).await;
            return Err(Refusal::ClusterChanged {
                filed: req.cluster_id,
                now: plan.cluster_id,
            }
            .into());
        }
        let compares = vec![Compare::mod_revision(
            request_key(id),
            CompareOp::Equal,
            req_rev,
        )];
        let ops = vec![TxnOp::delete(request_key(id), None)];
        match epoch::advance::run(&self.etcd, &plan, compares, ops).await {
            Ok(record) => Ok(record),
            Err(e @ lock_arbiter::ArbiterError::NoQuorum) => Err(e.into()),
            Err(e) => {
                // Lost to a concurrent writer: say which.
                match self.request(id).await {
                    Err(ForceError::Refused(Refusal::NotFound)) => Err(Refusal::NotFound.into()),
                    Err(other) => Err(other),
                    Ok(_) => {
                        let now = self.now().await?;
                        match approve_verdict(&req, approver, now.as_ref(), now_ms()) {
                            Err(refusal) => {
                                if is_dead(&refusal) {
                                    self.withdraw(id, req_rev).await;
                                }
                                Err(refusal.into())
                            }
                            Ok(()) => Err(e.into()),
                        }
                    }
                }
            }
        }
    }
}
