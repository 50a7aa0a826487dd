//! The etcd side of the two-person epoch advance: file the request, and execute the
//! approval as the compare-and-advance transaction with the request's own compare and
//! delete inside it (`lock_store::epoch::advance`):
//!
//! ```text
//! if   mod_revision(/sys/epoch)                  == as read (still epoch E)
//!  and mod_revision(/sys/advance-request/<id>)   == as read (still pending: one approval wins)
//! then put /sys/epoch = {N, cluster ID, advanced_by}; delete /l/*, /q/*, /r/*, /p/*;
//!      delete /sys/advance-request/<id>
//! ```
//!
//! N is E+1 on a lone cluster. Once there are shards it is allocated first, by the coord
//! cluster's allocator's own compare-and-put (`lock_store::shard_map`), as break-glass
//! and shard moves allocate: two clusters, so two transactions, the allocation first. An
//! advance that then fails leaves a gap in the numbers, never one number on two clusters.
//! Which source is `lock_store::epoch::next`'s decision, on what [`AdvanceStore`] reads:
//! the cluster's shard fence, and the coord cluster's map and allocator (`--coord`, or the
//! cluster itself when it is the coord).
//!
//! With etcd roles this runs as the `force` user, whose role may write `/sys/epoch*` (the
//! record and, on the coord cluster, the allocator) and `/sys/advance-request/`, and read
//! `/sys/shard*`; the operator's may not write the first two.

use crate::advance::{AdvanceRequest, StoreNow, approve_verdict, file_verdict, is_dead};
use crate::oidc::Operator;
use crate::request::Refusal;
use crate::store::{ForceError, delete_if_unchanged, is_request_id, new_id, now_ms};
use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, TxnOp};
use lock_store::bugs::{Bug, Bugs};
use lock_store::epoch::next::{self, Source};
use lock_store::layout::{ADVANCE_REQUEST_PREFIX, EPOCH_KEY, EpochRecord, decode, encode};
use lock_store::{Etcd, epoch, shard_map};
use std::time::Duration;

fn request_key(id: &str) -> String {
    format!("{ADVANCE_REQUEST_PREFIX}{id}")
}

pub struct AdvanceStore {
    /// The cluster whose epoch this lock-admin advances.
    etcd: Etcd,
    /// The coord cluster, whose allocator gives a shard's epochs (None: not given; the
    /// cluster itself when it is the coord).
    coord: Option<Etcd>,
    request_ttl: Duration,
    /// Deliberate bugs (debug builds only): `advance-without-coord`.
    bugs: Bugs,
}

impl AdvanceStore {
    pub fn new(etcd: Etcd, request_ttl: Duration) -> Self {
        AdvanceStore {
            etcd,
            coord: None,
            request_ttl,
            bugs: Bugs::default(),
        }
    }

    /// With the coord cluster (an entity shard's lock-admin): new epochs come from its
    /// allocator.
    pub fn with_coord(self, coord: Etcd) -> Self {
        AdvanceStore {
            coord: Some(coord),
            ..self
        }
    }

    /// Debug builds: deliberate bugs, for the gate to show its checks catch them.
    pub fn with_bugs(self, bugs: Bugs) -> Self {
        AdvanceStore { bugs, ..self }
    }

    /// Where an advance from `from` takes its epoch, decided on what the stores hold now
    /// (`epoch::next::source`). Refuses an entity shard this lock-admin has no coord
    /// cluster for, rather than take E+1.
    async fn source(&self, from: u16) -> Result<Source, ForceError> {
        let estate = shard_map::read_estate(&self.etcd, self.coord.as_ref()).await?;
        Ok(next::source(from, &estate).map_err(Refusal::from)?)
    }

    /// The epoch an approved advance from `from` moves to: E+1 on a lone cluster, else
    /// allocated now by the coord cluster (written there before the advance runs).
    async fn next_epoch(&self, from: u16) -> Result<u16, ForceError> {
        let source = if self.bugs.has(Bug::AdvanceWithoutCoord) {
            // The old rule, on purpose: E+1 on this cluster whatever the estate.
            next::above(from, from)
                .map(Source::OnCluster)
                .ok_or(Refusal::EpochSpaceExhausted)?
        } else {
            self.source(from).await?
        };
        match source {
            Source::OnCluster(n) => Ok(n),
            Source::Coord => {
                // No coord given and yet a coord's facts: the cluster is the coord itself.
                let coord = self.coord.as_ref().unwrap_or(&self.etcd);
                Ok(shard_map::allocate_for_advance(coord, from)
                    .await?
                    .map_err(Refusal::from)?)
            }
        }
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
        // A shard this lock-admin cannot allocate for is refused now, not at approval.
        self.source(from).await?;
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
        let next = self.next_epoch(req.from).await?;
        let plan = epoch::advance::plan(
            &self.etcd,
            req.from,
            Some(next),
            Some(req.advanced_by(approver)),
        )
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
            Err(e @ lock_store::StoreError::NoQuorum) => Err(e.into()),
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
