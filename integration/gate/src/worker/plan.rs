//! What a worker process is told to do, written by the gate as JSON.

use crate::history::mono_ns;
use rand::Rng as _;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClientPlan {
    pub id: u32,
    pub spiffe_id: String,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

/// What one worker process does, written by the gate as JSON.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerPlan {
    pub clients: Vec<ClientPlan>,
    /// Envoy's listener (https).
    pub endpoint: String,
    /// Arbiters' own addresses, for the share of calls sent straight to a chosen arbiter
    /// (keys then meet more than one arbiter, as when the ring changes).
    pub arbiters: Vec<SocketAddr>,
    /// Envoy's SVID: the direct calls play the edge, which the arbiters admit.
    pub edge_cert: PathBuf,
    pub edge_key: PathBuf,
    pub direct_percent: u32,
    pub keys: KeyPlan,
    /// CLOCK_MONOTONIC ns: the run's origin (key generations count from it) and its end.
    pub origin: u64,
    pub until: u64,
    /// Created by the gate when the run is over (it may end before `until`).
    pub stop_file: PathBuf,
    pub max_ops_per_client: u64,
    pub register: SocketAddr,
    pub postgres: Option<String>,
    pub history: PathBuf,
    pub seed: u64,
    /// Share of releases followed by a re-grant and a replay of the old release.
    pub replay_percent: u32,
    /// Share of holds that stall past the session's TTL before writing, as a holder paused
    /// by GC or a stalled VM would (renewals stop too); the worker's other clients then
    /// wait for that key, so a new holder is granted and writes before the stalled one
    /// resumes and writes with its old token.
    #[serde(default)]
    pub stall_percent: u32,
    /// How long a stall lasts (past the session's TTL).
    #[serde(default)]
    pub stall_ms: u64,
    /// Share of holds whose session the client loses while holding (renewals stop, the
    /// hold stays until the TTL), as a process that dropped its session handle would; it
    /// then asks again for the key under a new session with the same instance: its own
    /// leak (ADR-13), which must be answered LEAKED_HOLD, never queued or granted.
    #[serde(default)]
    pub leak_percent: u32,
    /// Share of rounds that take two or three keys of one generation as one set
    /// (AcquireAll), write to each under the set's token and release them with ReleaseAll.
    #[serde(default)]
    pub set_percent: u32,
    /// Share of rounds that campaign for the generation's leader key (a long wait in its
    /// queue), then lead: several guarded writes to the register under the one term, then
    /// resign.
    #[serde(default)]
    pub election_percent: u32,
    /// Share of rounds on a key of the shared class (reader–writer): most take it
    /// `SHARED` and read the register under the reader's token, the rest take it
    /// `EXCLUSIVE` and write to it.
    #[serde(default)]
    pub shared_percent: u32,
    /// Share of rounds on a key of the semaphore class (`permits: N`): a permit taken, held
    /// (longer than other rounds' holds, so that more than N clients meet on a key), written
    /// under on its own fence, and released (`worker/permits.rs`).
    #[serde(default)]
    pub sem_percent: u32,
    /// This worker also runs the attacker.
    #[serde(default)]
    pub attacker: Option<super::attacker::AttackerPlan>,
}

/// Keys rotate: generation `g` (every `generation_ms`) uses `<prefix>/<run>/g<g>/k<i>`, so
/// every key's history is short and starts from a free key. A share of picks looks back a
/// few generations: a holder frozen past its TTL then finds its key wanted and granted to
/// someone else before it resumes — the case fencing exists for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KeyPlan {
    pub fifo_prefix: String,
    pub durable_prefix: String,
    /// The `shared: true` class's prefix (empty: no shared rounds).
    #[serde(default)]
    pub shared_prefix: String,
    /// The semaphore class's prefix (empty: no semaphore rounds).
    #[serde(default)]
    pub sem_prefix: String,
    pub run: String,
    pub per_generation: u32,
    pub generation_ms: u64,
    pub durable_percent: u32,
    /// Share of picks (percent) from up to `lookback` generations back.
    pub lookback_percent: u32,
    pub lookback: u32,
}

impl KeyPlan {
    fn generation(&self, rng: &mut StdRng, origin: u64) -> u64 {
        let mut g = mono_ns().saturating_sub(origin) / (self.generation_ms.max(1) * 1_000_000);
        if self.lookback > 0 && g > 0 && rng.random_range(0..100) < self.lookback_percent {
            g -= rng.random_range(1..=u64::from(self.lookback).min(g));
        }
        g
    }

    /// Two or three distinct FIFO keys of one generation (a set needs memory fairness),
    /// in a random order: the arbiter sorts them.
    pub(super) fn pick_set(&self, rng: &mut StdRng, origin: u64) -> Vec<String> {
        let g = self.generation(rng, origin);
        let per = self.per_generation.max(2);
        let want = rng.random_range(2..=3u32).min(per);
        let mut picked: Vec<u32> = Vec::new();
        while picked.len() < want as usize {
            let i = rng.random_range(0..per);
            if !picked.contains(&i) {
                picked.push(i);
            }
        }
        picked
            .into_iter()
            .map(|i| format!("{}/{}/g{g}/k{i}", self.fifo_prefix, self.run))
            .collect()
    }

    /// The leader key of the current generation (one election per generation keeps each
    /// key's history short, as for every other key).
    pub(super) fn leader(&self, origin: u64) -> String {
        let g = mono_ns().saturating_sub(origin) / (self.generation_ms.max(1) * 1_000_000);
        format!("{}/{}/g{g}/leader", self.fifo_prefix, self.run)
    }

    /// The shared class's key of a generation (one, so that readers meet each other and
    /// writers meet readers).
    pub(super) fn pick_shared(&self, rng: &mut StdRng, origin: u64) -> String {
        let g = self.generation(rng, origin);
        format!("{}/{}/g{g}/k0", self.shared_prefix, self.run)
    }

    /// The semaphore class's key of a generation (one, so that more clients meet on it than
    /// it has permits).
    pub(super) fn pick_sem(&self, rng: &mut StdRng, origin: u64) -> String {
        let g = self.generation(rng, origin);
        format!("{}/{}/g{g}/k0", self.sem_prefix, self.run)
    }

    /// Whether `key` is the semaphore class's.
    pub(super) fn is_sem(&self, key: &str) -> bool {
        !self.sem_prefix.is_empty()
            && key
                .strip_prefix(self.sem_prefix.as_str())
                .is_some_and(|rest| rest.starts_with('/'))
    }

    pub(super) fn pick(&self, rng: &mut StdRng, origin: u64) -> String {
        let g = self.generation(rng, origin);
        let i = rng.random_range(0..self.per_generation.max(1));
        let durable = rng.random_range(0..100) < self.durable_percent;
        let prefix = if durable {
            &self.durable_prefix
        } else {
            &self.fifo_prefix
        };
        // A quarter of durable picks take a key under another (`k0/inner` under `k0`): each
        // key's queue must hold its own waiters only.
        let inner = if durable && rng.random_range(0..100) < 25 {
            "/inner"
        } else {
            ""
        };
        format!("{prefix}/{}/g{g}/k{i}{inner}", self.run)
    }
}
