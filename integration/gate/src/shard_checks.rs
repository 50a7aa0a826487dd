//! The main gate's checks on the shard gate's history, per cluster (issue 34).
//!
//! One key lives on one cluster at a time, and each cluster has its own revisions, leases
//! and epoch; so the history is split by cluster and each part is checked against that
//! cluster's store log (a watch on it from its first revision), as the main gate checks
//! its one cluster:
//! - the per-key checks (`checker::check_keys`): tokens rise in real time and go to one
//!   session each; every granted token is backed by a holder record at its revision, on
//!   the grantee's session lease, in the cluster's epoch; no two holds overlap that the
//!   store had not ended; releases end live holds;
//! - the linearizability search against the fenced mutex (`linearize::check_all`).
//!
//! An operation belongs to the cluster its session lives on (a session id carries its
//! cluster's tag, `lock_config::shards::lease_tag`), and a release to the cluster whose
//! epoch its token carries (epochs come from the coord cluster's allocator: each cluster's
//! is its own). The cross-move rule, tokens rising across a move, is the shard gate's own
//! check over the whole history (`shards::check`).

use super::checker;
use super::history::{Kind, Op};
use super::linearize::{self, Verdict};
use super::store_log::{StoreEvent, StoreTruth};
use lock_config::FencingToken;
use lock_config::shards::{lease_tag, tag_of};
use std::collections::BTreeMap;

/// One cluster's name, its epoch and what its store did.
pub struct Cluster {
    pub name: String,
    pub epoch: u16,
    pub events: Vec<StoreEvent>,
}

#[derive(Debug, Default)]
pub struct PerCluster {
    pub violations: Vec<String>,
    /// Per cluster: operations checked, keys linearizable.
    pub checked: BTreeMap<String, (usize, usize)>,
    pub not_linearizable: Vec<String>,
    pub unchecked: Vec<String>,
    /// Operations on no known cluster (left out; none expected).
    pub unplaced: usize,
}

impl PerCluster {
    pub fn line(&self) -> String {
        let parts: Vec<String> = self
            .checked
            .iter()
            .map(|(c, (ops, keys))| format!("{c}: {ops} operations, {keys} keys linearizable"))
            .collect();
        format!(
            "per cluster (the main gate's checks on each cluster's store log): {}; {} not linearizable, {} unchecked, {} operations on no cluster",
            parts.join("; "),
            self.not_linearizable.len(),
            self.unchecked.len(),
            self.unplaced
        )
    }
}

/// The cluster an operation belongs to: its session's, or its token's epoch's.
fn place<'a>(op: &Op, clusters: &'a [Cluster]) -> Option<&'a Cluster> {
    if let Some(s) = op.session {
        return clusters.iter().find(|c| lease_tag(&c.name) == tag_of(s));
    }
    let epoch = FencingToken::from_u64(op.token?).ok()?.epoch();
    clusters.iter().find(|c| c.epoch == epoch)
}

/// Splits `ops` by cluster and checks each part against its cluster's store log.
/// `identity` names client `c`'s identity, as the holder records name it.
pub fn check(
    ops: &[Op],
    clusters: &[Cluster],
    identity: &dyn Fn(u32) -> String,
    steps: u64,
) -> PerCluster {
    let mut parts: BTreeMap<&str, Vec<Op>> = BTreeMap::new();
    let mut out = PerCluster::default();
    for op in ops
        .iter()
        .filter(|o| matches!(o.kind, Kind::Acquire | Kind::Release))
    {
        match place(op, clusters) {
            Some(c) => parts.entry(&c.name).or_default().push(op.clone()),
            None => out.unplaced += 1,
        }
    }
    for c in clusters {
        let part = parts.remove(c.name.as_str()).unwrap_or_default();
        let mut truth = StoreTruth::from_events(&c.events);
        // The log holds the cluster's own epoch writes (one, `epoch init`, on a cluster
        // no advance touched); the epoch it names came from the coord's allocator.
        let writes = u32::try_from(truth.epoch_writes.len()).unwrap_or(u32::MAX);
        truth.epochs_before = u32::from(c.epoch).saturating_sub(writes);
        for v in checker::check_keys(&part, &truth, identity) {
            out.violations.push(format!("{} on {}", v, c.name));
        }
        let verdicts = linearize::check_all(&part, &truth, steps);
        let mut linearizable = 0;
        for (key, (verdict, _)) in verdicts {
            match verdict {
                Verdict::Linearizable => linearizable += 1,
                Verdict::NotLinearizable => {
                    out.not_linearizable.push(format!("{key} on {}", c.name))
                }
                Verdict::Unchecked => out.unchecked.push(format!("{key} on {}", c.name)),
            }
        }
        out.checked
            .insert(c.name.clone(), (part.len(), linearizable));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Phase;
    use lock_config::shards::tagged_lease;

    const WHO: &str = "spiffe://t/w";

    fn put(revision: i64, lease: i64) -> StoreEvent {
        StoreEvent {
            revision,
            seen: revision as u64 * 10,
            key: "/l/k".into(),
            delete: false,
            create_revision: revision,
            lease,
            holder: Some(WHO.into()),
            hold: Some(revision),
        }
    }

    fn del(revision: i64, of: i64, lease: i64) -> StoreEvent {
        StoreEvent {
            delete: true,
            create_revision: of,
            hold: Some(of),
            holder: None,
            ..put(revision, lease)
        }
    }

    fn epoch_put(revision: i64) -> StoreEvent {
        StoreEvent {
            key: lock_arbiter::layout::EPOCH_KEY.into(),
            holder: None,
            ..put(revision, 0)
        }
    }

    fn op(kind: Kind, session: i64, token: u64, at: u64) -> Op {
        Op {
            client: 1,
            kind,
            key: Some("k".into()),
            session: Some(session),
            token: Some(token),
            invoked: at,
            done: Some((at + 5, Phase::Ok)),
            why: None,
            via: None,
            served: None,
            rev: None,
            set: None,
            shared: false,
        }
    }

    fn token(epoch: u16, revision: u64) -> u64 {
        FencingToken::pack(epoch, revision).unwrap().as_u64()
    }

    /// One hold on e1 (epoch 2), taken and released; `plant` changes one thing.
    fn verdict(plant: &dyn Fn(&mut Vec<Op>, &mut Vec<StoreEvent>)) -> PerCluster {
        let s = tagged_lease(lease_tag("e1"), 77);
        let mut ops = vec![
            op(Kind::Acquire, s, token(2, 10), 100),
            op(Kind::Release, s, token(2, 10), 200),
        ];
        let mut events = vec![epoch_put(1), put(10, s), del(11, 10, s)];
        plant(&mut ops, &mut events);
        let clusters = [
            Cluster {
                name: "e1".into(),
                epoch: 2,
                events,
            },
            Cluster {
                name: "e3".into(),
                epoch: 4,
                events: vec![epoch_put(1)],
            },
        ];
        check(&ops, &clusters, &|_| WHO.to_owned(), 10_000)
    }

    #[test]
    fn a_clean_hold_passes_and_each_planted_anomaly_is_caught() {
        let clean = verdict(&|_, _| {});
        assert!(clean.violations.is_empty(), "{:?}", clean.violations);
        assert_eq!(clean.checked["e1"], (2, 1));
        assert_eq!(clean.unplaced, 0);

        // A grant the store never made.
        let unbacked = verdict(&|_, events| events.retain(|e| e.key != "/l/k"));
        assert!(
            unbacked
                .violations
                .iter()
                .any(|v| v.contains("[backed]") && v.contains("on e1")),
            "{:?}",
            unbacked.violations
        );
        // A token of another epoch than the cluster's at that revision.
        let wrong_epoch = verdict(&|ops, _| {
            ops[0].token = Some(token(3, 10));
            ops[0].session = None;
        });
        assert_eq!(wrong_epoch.unplaced, 1, "epoch 3 is no cluster's");
        // A second client granted while the first still held (the store showing only one).
        let two = verdict(&|ops, _| {
            let mut other = op(
                Kind::Acquire,
                ops[0].session.unwrap_or(0),
                token(2, 12),
                150,
            );
            other.client = 2;
            ops.push(other);
        });
        assert!(
            !two.violations.is_empty() || !two.not_linearizable.is_empty(),
            "a grant inside another's hold went unseen"
        );
    }
}
