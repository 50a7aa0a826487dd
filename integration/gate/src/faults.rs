//! The faults the gate injects, each bounded in time and undone before the next:
//! processes killed and restarted, frozen and thawed, the etcd leader cut off from its
//! peers (or from one peer: a bridge) by blackhole routes in the members' network
//! namespaces, an arbiter's links to etcd or Envoy's link to an arbiter slowed or cut, one
//! way or both, by the harness's relays (`link.rs`), Envoy restarted, and the operators'
//! two-person epoch advance and force release (lock-admin's own code).

use super::history::{Kind, Phase};
use lock_integration::link::{Lane, Shape};
use lock_integration::process::Proc;
use lock_integration::stack::Stack;
use std::str::FromStr;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    /// kill -9 a follower etcd member, restart it on its data dir.
    KillMember,
    /// kill -9 the etcd leader, restart it.
    KillLeader,
    /// kill -9 an arbiter (its in-memory queues are lost), restart it on its port.
    KillArbiter,
    /// SIGSTOP the etcd leader past the election timeout, then SIGCONT.
    StopLeader,
    /// SIGSTOP an arbiter (its calls hang), then SIGCONT.
    StopArbiter,
    /// SIGSTOP a worker process (its holds' sessions expire), then SIGCONT: it writes and
    /// releases with tokens that are no longer current.
    StopHolder,
    /// Blackhole the leader's links to its peers, then heal.
    IsolateLeader,
    /// kill -9 Envoy and start it again on the same ports.
    RestartEnvoy,
    /// A two-person epoch advance (lock-admin's filing and approval): every hold is
    /// deleted and tokens move to a new epoch.
    EpochAdvance,
    /// A rolling update: each arbiter in turn gets SIGTERM, drains (waiters answered
    /// DRAINING, retried by clients at the key's next owner) and exits by itself, then
    /// starts again on its port.
    RollingRestart,
    /// A two-person force release of a held key (lock-force's approval transaction, as
    /// etcd's `force` user): the hold is deleted under its holder, who may still believe
    /// it holds; the next waiter is granted.
    ForceRelease,
    /// One arbiter's links to every etcd member slow (50–400 ms each way), lossy (20% of
    /// chunks a retransmission late) and narrow (256 KiB/s), for longer than a session's
    /// TTL.
    SlowLinks,
    /// One arbiter hears nothing from etcd, which still hears it: its writes commit and it
    /// never learns (every outcome unknown), its watches go quiet.
    ArbiterDeaf,
    /// etcd hears nothing from one arbiter, which still hears etcd: its writes and lease
    /// renewals never arrive while its watches keep reporting.
    ArbiterMute,
    /// One arbiter cut from etcd both ways while Envoy and the direct clients still reach
    /// it.
    CutArbiterEtcd,
    /// Envoy cut from one arbiter both ways while that arbiter keeps etcd.
    CutEdgeArbiter,
    /// The etcd leader cut from one follower only: two halves that share the third member.
    BridgePartition,
}

/// How long each link fault lasts: longer than a session's TTL (`GATE_TTL`, 5 s), so the
/// sessions renewed over the faulty link can expire.
const LINK_FAULT: Duration = Duration::from_secs(6);

/// Every fault the gate knows (`--faults` takes any of them).
pub const ALL: [Fault; 17] = [
    Fault::KillMember,
    Fault::KillLeader,
    Fault::KillArbiter,
    Fault::StopLeader,
    Fault::StopArbiter,
    Fault::StopHolder,
    Fault::IsolateLeader,
    Fault::RestartEnvoy,
    Fault::EpochAdvance,
    Fault::RollingRestart,
    Fault::ForceRelease,
    Fault::SlowLinks,
    Fault::ArbiterDeaf,
    Fault::ArbiterMute,
    Fault::CutArbiterEtcd,
    Fault::CutEdgeArbiter,
    Fault::BridgePartition,
];

/// The faults `make gate` and `make test` cycle through: every kind. (`bridge-partition`
/// was left out while the late grant it found was open: a FIFO grant proposal held in a
/// follower cut from the leader, applied after its waiter had been answered by a handoff.
/// Grant attempts are settled now, `grant.rs`; `tests/link_faults.rs` stages the case.)
pub fn default_cycle() -> Vec<Fault> {
    ALL.to_vec()
}

impl Fault {
    pub fn name(self) -> &'static str {
        match self {
            Fault::KillMember => "kill-member",
            Fault::KillLeader => "kill-leader",
            Fault::KillArbiter => "kill-arbiter",
            Fault::StopLeader => "stop-leader",
            Fault::StopArbiter => "stop-arbiter",
            Fault::StopHolder => "stop-holder",
            Fault::IsolateLeader => "isolate-leader",
            Fault::RestartEnvoy => "restart-envoy",
            Fault::EpochAdvance => "epoch-advance",
            Fault::RollingRestart => "rolling-restart",
            Fault::ForceRelease => "force-release",
            Fault::SlowLinks => "slow-links",
            Fault::ArbiterDeaf => "arbiter-deaf",
            Fault::ArbiterMute => "arbiter-mute",
            Fault::CutArbiterEtcd => "cut-arbiter-etcd",
            Fault::CutEdgeArbiter => "cut-edge-arbiter",
            Fault::BridgePartition => "bridge-partition",
        }
    }
}

impl FromStr for Fault {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        ALL.into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| format!("unknown fault {s:?}"))
    }
}

/// What the fault did, for the summary.
pub struct Injected {
    pub fault: Fault,
    pub target: String,
    /// CLOCK_MONOTONIC ns when the fault began (the history's clock).
    pub started_at: u64,
    pub took: Duration,
}

/// The state the faults act on.
pub struct Target<'a> {
    pub stack: &'a mut Stack,
    pub workers: &'a mut [Proc],
    pub holder_pause: Duration,
    pub epoch: &'a mut u16,
    /// Records the driver's own operations (an epoch advance, a force release) in the
    /// history: kind, phase, key, why.
    pub record: &'a dyn Fn(Kind, Phase, Option<String>, Option<String>) -> u64,
    pub pick: usize,
    /// An arbiter never restarted (see `GateOptions::spare_arbiter`).
    pub spare_arbiter: Option<usize>,
}

/// Injects `fault` and undoes it; returns what was hit.
pub async fn inject(fault: Fault, t: Target<'_>) -> anyhow::Result<Injected> {
    let start = std::time::Instant::now();
    let started_at = super::history::mono_ns();
    let target = match fault {
        Fault::KillMember | Fault::KillLeader => {
            let i = member(t.stack, fault == Fault::KillLeader, t.pick).await;
            if let Some(m) = t.stack.member_mut(i) {
                m.kill();
                tokio::time::sleep(Duration::from_secs(2)).await;
                tokio::task::block_in_place(|| m.restart())?;
            }
            format!("etcd member {i}")
        }
        Fault::StopLeader => {
            let i = member(t.stack, true, t.pick).await;
            if let Some(m) = t.stack.member_mut(i) {
                m.proc.signal("STOP")?;
                tokio::time::sleep(Duration::from_secs(3)).await;
                m.proc.signal("CONT")?;
            }
            format!("etcd member {i}")
        }
        Fault::IsolateLeader => {
            let i = member(t.stack, true, t.pick).await;
            if let Some(lab) = &t.stack.lab {
                lab.isolate(i)?;
                tokio::time::sleep(Duration::from_secs(4)).await;
                lab.heal(i)?;
            } else {
                anyhow::bail!("isolate-leader needs the members in network namespaces");
            }
            format!("etcd member {i}")
        }
        Fault::KillArbiter => {
            let n = t.stack.arbiters.len().max(1);
            let mut i = t.pick % n;
            if t.spare_arbiter == Some(i) {
                i = (i + 1) % n;
            }
            if let Some(a) = t.stack.arbiters.get_mut(i) {
                a.proc.kill();
                tokio::time::sleep(Duration::from_secs(1)).await;
                tokio::task::block_in_place(|| a.restart())?;
            }
            format!("arbiter {i}")
        }
        Fault::RollingRestart => {
            let mut took = Vec::new();
            for (i, a) in t.stack.arbiters.iter_mut().enumerate() {
                if t.spare_arbiter == Some(i) {
                    continue;
                }
                let drained = tokio::task::block_in_place(|| a.drain_and_restart())?;
                took.push(format!("{} drained in {} ms", a.id, drained.as_millis()));
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            took.join(", ")
        }
        Fault::StopArbiter => {
            let i = t.pick % t.stack.arbiters.len().max(1);
            if let Some(a) = t.stack.arbiters.get_mut(i) {
                a.proc.signal("STOP")?;
                tokio::time::sleep(Duration::from_secs(3)).await;
                a.proc.signal("CONT")?;
            }
            format!("arbiter {i}")
        }
        Fault::StopHolder => {
            let i = t.pick % t.workers.len().max(1);
            if let Some(w) = t.workers.get(i) {
                w.signal("STOP")?;
                tokio::time::sleep(t.holder_pause).await;
                w.signal("CONT")?;
            }
            format!("worker {i}")
        }
        Fault::RestartEnvoy => {
            tokio::task::block_in_place(|| t.stack.restart_envoy())?;
            "envoy".into()
        }
        Fault::ForceRelease => force_release(t.stack, t.record, t.pick).await?,
        Fault::SlowLinks => {
            let lane = Lane::slow(
                Duration::from_millis(50),
                Duration::from_millis(350),
                20,
                256 * 1024,
            );
            arbiter_links(t.stack, t.pick, Shape::both(lane)).await?
        }
        Fault::ArbiterDeaf => {
            let shape = Shape {
                up: Lane::default(),
                down: Lane::cut(),
            };
            arbiter_links(t.stack, t.pick, shape).await?
        }
        Fault::ArbiterMute => {
            let shape = Shape {
                up: Lane::cut(),
                down: Lane::default(),
            };
            arbiter_links(t.stack, t.pick, shape).await?
        }
        Fault::CutArbiterEtcd => arbiter_links(t.stack, t.pick, Shape::both(Lane::cut())).await?,
        Fault::CutEdgeArbiter => {
            let i = t.pick % t.stack.edge_links.len().max(1);
            let Some(link) = t.stack.edge_links.get(i) else {
                anyhow::bail!("cut-edge-arbiter needs the stack's relayed links");
            };
            link.set(Shape::both(Lane::cut()));
            tokio::time::sleep(LINK_FAULT).await;
            link.heal();
            format!("envoy -> arbiter {i}")
        }
        Fault::BridgePartition => {
            let leader = member(t.stack, true, t.pick).await;
            let n = t.stack.members().count();
            let Some(lab) = &t.stack.lab else {
                anyhow::bail!("bridge-partition needs the members in network namespaces");
            };
            // The leader and one follower lose each other; both still reach the third.
            let other = (leader + 1 + t.pick % (n - 1).max(1)) % n.max(1);
            lab.cut(leader, other)?;
            tokio::time::sleep(LINK_FAULT).await;
            lab.mend(leader, other)?;
            format!("etcd members {leader} x {other}")
        }
        Fault::EpochAdvance => {
            // Two operators through lock-admin's own filing and approval code (ADR-03).
            let from = *t.epoch;
            (t.record)(Kind::Advance, Phase::Invoke, None, None);
            match lock_integration::admin::advance_epoch(
                &t.stack.etcd_access(),
                from,
                "release gate fault",
            )
            .await?
            {
                Ok(record) => {
                    *t.epoch = record.epoch;
                    (t.record)(Kind::Advance, Phase::Ok, None, None);
                }
                Err(e) => {
                    // A definite refusal wrote nothing; a store error may have committed.
                    let phase = match e {
                        lock_force::store::ForceError::Refused(_) => Phase::Fail,
                        lock_force::store::ForceError::Store(_) => Phase::Info,
                    };
                    (t.record)(Kind::Advance, phase, None, Some(e.to_string()));
                    if let Some(e) = current_epoch(t.stack).await {
                        *t.epoch = e;
                    }
                }
            }
            format!("epoch {from} -> {}", t.epoch)
        }
    };
    Ok(Injected {
        fault,
        target,
        started_at,
        took: start.elapsed(),
    })
}

/// Shapes arbiter `pick`'s links to every etcd member for [`LINK_FAULT`], then heals them.
async fn arbiter_links(stack: &Stack, pick: usize, shape: Shape) -> anyhow::Result<String> {
    let i = pick % stack.etcd_links.len().max(1);
    let Some(links) = stack.etcd_links.get(i) else {
        anyhow::bail!("link faults need the stack's relayed links");
    };
    for l in links {
        l.set(shape);
    }
    tokio::time::sleep(LINK_FAULT).await;
    for l in links {
        l.heal();
    }
    Ok(format!("arbiter {i} <-> etcd"))
}

/// The leader (waiting up to 5 s for one), or a follower.
async fn member(stack: &Stack, leader: bool, pick: usize) -> usize {
    let n = stack.members().count().max(1);
    let mut found = None;
    for _ in 0..25 {
        found = stack.leader().await;
        if found.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    match (leader, found) {
        (true, Some(l)) => l,
        (false, Some(l)) => (l + 1 + pick % (n - 1).max(1)) % n,
        (_, None) => pick % n,
    }
}

/// The epoch number in the store, if it can be read.
async fn current_epoch(stack: &Stack) -> Option<u16> {
    let mut c = stack.etcd_client().await.ok()?;
    let r = c.get(lock_store::layout::EPOCH_KEY, None).await.ok()?;
    let kv = r.kvs().first()?;
    lock_store::layout::decode::<lock_store::layout::EpochRecord>(kv.value()).map(|e| e.epoch)
}

/// Files and approves a force release of one held key (the `pick`-th, in key order), with
/// lock-force's own store code as etcd's `force` user; recorded as a `force` operation.
async fn force_release(
    stack: &Stack,
    record: &dyn Fn(Kind, Phase, Option<String>, Option<String>) -> u64,
    pick: usize,
) -> anyhow::Result<String> {
    let mut root = stack.etcd_client().await?;
    let held = root
        .get(
            lock_store::layout::HOLDER_PREFIX,
            Some(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_keys_only(),
            ),
        )
        .await?;
    let keys: Vec<String> = held
        .kvs()
        .iter()
        .filter_map(|kv| kv.key_str().ok())
        .filter_map(|k| k.strip_prefix(lock_store::layout::HOLDER_PREFIX))
        .map(str::to_owned)
        .collect();
    let Some(key) = keys.get(pick % keys.len().max(1)).cloned() else {
        return Ok("no key was held".into());
    };
    let etcd = lock_integration::admin::force_etcd(&stack.etcd_access()).await?;
    let store = lock_force::store::ForceStore::new(etcd, None, Duration::from_secs(600));
    let operator = lock_integration::admin::operator;
    record(Kind::Force, Phase::Invoke, Some(key.clone()), None);
    let outcome = async {
        let req = store
            .file(
                &key,
                "release gate fault",
                false,
                &operator("gate-requester"),
            )
            .await?;
        store.approve(&req.id, &operator("gate-approver")).await
    }
    .await;
    let said = match outcome {
        Ok(done) => {
            record(Kind::Force, Phase::Ok, Some(key.clone()), None);
            format!("{key} (hold revision {})", done.record.hold_revision)
        }
        // A definite refusal: the hold ended or changed first, nothing was deleted.
        Err(lock_force::store::ForceError::Refused(r)) => {
            record(
                Kind::Force,
                Phase::Fail,
                Some(key.clone()),
                Some(r.to_string()),
            );
            format!("{key}: {r}")
        }
        Err(e) => {
            record(
                Kind::Force,
                Phase::Info,
                Some(key.clone()),
                Some(e.to_string()),
            );
            format!("{key}: outcome unknown ({e})")
        }
    };
    Ok(said)
}
