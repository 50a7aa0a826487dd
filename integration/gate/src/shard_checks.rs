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
//!
//! Across clusters ([`epochs_apart`]): no two clusters ever serve one epoch (ADR-03, 09).
//! A cluster serves every epoch its record ever named (its store log, the coord cluster's
//! too) and every epoch a grant on one of its sessions carried. Two clusters in one epoch
//! mint tokens that do not say which cluster made them, and a key moved between them can
//! see its token go back; an advance that takes E+1 on a sharded estate does exactly that.

use super::checker;
use super::history::{Kind, Op};
use super::linearize::{self, Verdict};
use super::store_log::{StoreEvent, StoreTruth};
use lock_config::FencingToken;
use lock_config::shards::{lease_tag, tag_of};
use std::collections::{BTreeMap, BTreeSet};

/// One cluster's name, its epoch (its record at the end) and what its store did.
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

/// Epoch -> the clusters that served it: each epoch a cluster's record named (its store
/// log, and the record at the end) and each epoch a granted token carried, by the cluster
/// its session lives on. Pure.
pub fn served_epochs(ops: &[Op], clusters: &[Cluster]) -> BTreeMap<u16, BTreeSet<String>> {
    let mut served: BTreeMap<u16, BTreeSet<String>> = BTreeMap::new();
    for c in clusters {
        let logged = c.events.iter().filter_map(|e| e.epoch);
        for epoch in logged.chain([c.epoch]) {
            served.entry(epoch).or_default().insert(c.name.clone());
        }
    }
    for op in ops.iter().filter(|o| o.kind == Kind::Acquire && o.ok()) {
        let Some(session) = op.session else { continue };
        let Some(c) = clusters
            .iter()
            .find(|c| lease_tag(&c.name) == tag_of(session))
        else {
            continue;
        };
        if let Some(token) = op.token.and_then(|t| FencingToken::from_u64(t).ok()) {
            served
                .entry(token.epoch())
                .or_default()
                .insert(c.name.clone());
        }
    }
    served
}

/// No two clusters ever serve one epoch: one violation per epoch served by more than one.
/// Pure.
pub fn epochs_apart(ops: &[Op], clusters: &[Cluster]) -> Vec<String> {
    served_epochs(ops, clusters)
        .into_iter()
        .filter(|(_, by)| by.len() > 1)
        .map(|(epoch, by)| {
            let by: Vec<String> = by.into_iter().collect();
            format!(
                "epoch {epoch} served by {}: no two clusters may serve one epoch",
                by.join(" and ")
            )
        })
        .collect()
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
            epoch: None,
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
            key: lock_store::layout::EPOCH_KEY.into(),
            holder: None,
            ..put(revision, 0)
        }
    }

    /// A put of the epoch record naming `epoch`, as the watcher logs it.
    fn epoch_named(revision: i64, epoch: u16) -> StoreEvent {
        StoreEvent {
            epoch: Some(epoch),
            ..epoch_put(revision)
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
            permit: None,
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

    /// Coord 1, e1 2, e2 3, e3 4 (as `gate shards` starts them), then each shard's epoch
    /// advanced: from the allocator (5, 6) or by the old rule (E+1: 3, 4).
    fn estate(e1_to: u16, e2_to: u16) -> Vec<Cluster> {
        let cluster = |name: &str, epochs: &[u16]| Cluster {
            name: name.into(),
            epoch: epochs.last().copied().unwrap_or(0),
            events: epochs
                .iter()
                .zip(1..)
                .map(|(e, rev)| epoch_named(rev * 10, *e))
                .collect(),
        };
        vec![
            cluster("coord", &[1]),
            cluster("e1", &[2, e1_to]),
            cluster("e2", &[3, e2_to]),
            cluster("e3", &[4]),
        ]
    }

    /// (name, the clusters, the operations, the violations' beginnings).
    type EpochCase = (&'static str, Vec<Cluster>, Vec<Op>, Vec<&'static str>);

    #[test]
    fn no_two_clusters_serve_one_epoch() {
        let e1 = tagged_lease(lease_tag("e1"), 5);
        let e2 = tagged_lease(lease_tag("e2"), 6);
        let grants = vec![
            op(Kind::Acquire, e1, token(2, 10), 100),
            op(Kind::Acquire, e2, token(3, 10), 100),
        ];
        let cases: Vec<EpochCase> = vec![
            (
                "epochs from the allocator",
                estate(5, 6),
                grants.clone(),
                vec![],
            ),
            (
                "the old rule: e1 2 -> 3 (e2's), e2 3 -> 4 (e3's)",
                estate(3, 4),
                grants.clone(),
                vec!["epoch 3 served by e1 and e2", "epoch 4 served by e2 and e3"],
            ),
            (
                "a grant on e1's session in e2's epoch, though no record says so",
                estate(5, 6),
                vec![op(Kind::Acquire, e1, token(6, 12), 100)],
                vec!["epoch 6 served by e1 and e2"],
            ),
            (
                "the coord's epoch given to a shard",
                estate(1, 6),
                vec![],
                vec!["epoch 1 served by coord and e1"],
            ),
        ];
        for (name, clusters, ops, want) in cases {
            let got = epochs_apart(&ops, &clusters);
            assert_eq!(got.len(), want.len(), "{name}: {got:?}");
            for (g, w) in got.iter().zip(&want) {
                assert!(g.starts_with(w), "{name}: {g} is not {w}");
            }
        }
    }

    #[test]
    fn the_epoch_at_a_revision_is_the_one_the_record_named() {
        // e1: init at 2 (revision 10), advanced to 5 (revision 20) by the allocator.
        let truth = StoreTruth::from_events(&[epoch_named(10, 2), epoch_named(20, 5)]);
        assert_eq!(truth.epoch_at(15), Some(2));
        assert_eq!(truth.epoch_at(25), Some(5), "not 2 + 1");
        // A log without the values (older) is counted, as before.
        let counted = StoreTruth::from_events(&[epoch_put(10), epoch_put(20)]);
        assert_eq!(counted.epoch_at(25), Some(2));
    }
}
