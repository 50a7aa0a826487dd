//! The faults the gate injects, each bounded in time and undone before the next:
//! processes killed and restarted, frozen and thawed, the etcd leader cut off from its
//! peers by blackhole routes in the members' network namespaces, Envoy restarted, and the
//! operator's epoch advance.

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
    /// `lockctl epoch advance`: every hold is deleted and tokens move to a new epoch.
    EpochAdvance,
    /// A rolling update: each arbiter in turn gets SIGTERM, drains (waiters answered
    /// DRAINING, retried by clients at the key's next owner) and exits by itself, then
    /// starts again on its port.
    RollingRestart,
}

pub const ALL: [Fault; 10] = [
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
];

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
    /// Records the epoch advance as an operation of the history.
    pub record: &'a dyn Fn(super::history::Phase, Option<String>) -> u64,
    pub pick: usize,
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
            let i = t.pick % t.stack.arbiters.len().max(1);
            if let Some(a) = t.stack.arbiters.get_mut(i) {
                a.proc.kill();
                tokio::time::sleep(Duration::from_secs(1)).await;
                tokio::task::block_in_place(|| a.restart())?;
            }
            format!("arbiter {i}")
        }
        Fault::RollingRestart => {
            let mut took = Vec::new();
            for a in t.stack.arbiters.iter_mut() {
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
        Fault::EpochAdvance => {
            let from = *t.epoch;
            (t.record)(super::history::Phase::Invoke, None);
            let out = tokio::task::block_in_place(|| t.stack.epoch_advance(from))?;
            if out.status.success() {
                *t.epoch += 1;
                (t.record)(super::history::Phase::Ok, None);
            } else {
                // Exit 3: unreachable, the advance may or may not have committed.
                let phase = if out.status.code() == Some(3) {
                    super::history::Phase::Info
                } else {
                    super::history::Phase::Fail
                };
                (t.record)(
                    phase,
                    Some(String::from_utf8_lossy(&out.stderr).trim().to_owned()),
                );
                if let Some(e) = current_epoch(t.stack).await {
                    *t.epoch = e;
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
    let r = c.get(lock_arbiter::layout::EPOCH_KEY, None).await.ok()?;
    let kv = r.kvs().first()?;
    lock_arbiter::layout::decode::<lock_arbiter::layout::EpochRecord>(kv.value()).map(|e| e.epoch)
}
