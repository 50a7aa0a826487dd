//! Semaphores in the history (issue 53): the keys of a `permits: N` class, which up to N
//! sessions hold at once, each on its own permit 0..N-1 with its own token. Pure: history
//! and store truth in, violations out.
//!
//! The per-key checks of `checker.rs` apply as to any key (token order and uniqueness
//! across the key, which covers each permit's; backing by the store; releases; fences,
//! per (key, permit)), except its exclusion, which this replaces for a semaphore's key:
//!
//! - **Permits** (`semaphore`): every acknowledged grant names a permit below N, and the
//!   store's record at the token's revision is that very permit.
//! - **One holder per permit** (`exclusion`): two holds of one permit never overlap in
//!   real time, unless one had been taken away by the store before the other was granted
//!   (the exclusive key's evidence, [`crate::checker::excused`]).
//! - **At most N** (`semaphore`): never more than N holds at once whose every pair is
//!   unexcused by that same evidence. Such a set of holds, all believed at one instant,
//!   was all live in the store at the latest of their grant revisions: each not taken
//!   away before any other's grant, and each release came after that instant, so after
//!   every grant acknowledged by then.
//! - **From the store log** (`semaphore-store`, [`check_store`]): at no revision more than
//!   N permit records of a key, none numbered N or above, and never two on one session's
//!   lease (a session holds at most one permit of a key). Checked from the store's side, so
//!   a grant nobody was told about counts too.
//!
//! The linearizability search has its own model for these keys (`linearize/permits.rs`).

use crate::checker::{Hold, excused, holds, overlaps, show};
use crate::history::Op;
use crate::store_log::StoreTruth;
use crate::violation::{Violation, revision};
use lock_integration::registry::{GATE_SEM_PERMITS, GATE_SEM_PREFIX};
use std::collections::{BTreeMap, BTreeSet};

/// Holds considered at one instant for the count: past this many, the search for more than
/// N pairwise-unexcused ones looks at the first this many only (a run has a few clients on a
/// key at once; this bounds a pathological history, it does not decide a normal one).
const MOST_AT_ONCE: usize = 16;

/// The permits of `key`'s class if it is the gate's semaphore class (the test registry's
/// [`GATE_SEM_PREFIX`]), else None: every other key is held to the exclusive rules.
pub fn permits(key: &str) -> Option<u32> {
    key.strip_prefix(GATE_SEM_PREFIX)
        .is_some_and(|rest| rest.starts_with('/'))
        .then_some(GATE_SEM_PERMITS)
}

/// The checks of one semaphore key of `n` permits: `ops` all its operations, `grants` its
/// acknowledged grants.
pub fn check_key(
    key: &str,
    n: u32,
    ops: &[&Op],
    grants: &[&Op],
    truth: &StoreTruth,
    out: &mut Vec<Violation>,
) {
    for g in grants {
        let t = g.token.unwrap_or(0);
        let problem = match g.permit {
            None => Some("no permit was named".to_owned()),
            Some(p) if p >= n => Some(format!(
                "permit {p}, but the class has {n}, numbered 0 to {}",
                n.saturating_sub(1)
            )),
            // No record at all is `backed`'s to report.
            Some(p) => truth
                .permit_at(key, revision(t))
                .filter(|record| *record != p)
                .map(|record| {
                    format!(
                        "permit {p}, but the record made at revision {} is permit {record}",
                        revision(t)
                    )
                }),
        };
        if let Some(problem) = problem {
            out.push(Violation {
                check: "semaphore",
                key: key.into(),
                detail: format!("client {} was granted {}: {problem}", g.client, show(t)),
            });
        }
    }
    let all = holds(ops);
    let mut by_permit: BTreeMap<Option<u32>, Vec<Hold>> = BTreeMap::new();
    for h in &all {
        by_permit.entry(h.permit).or_default().push(h.clone());
    }
    for (permit, hs) in by_permit {
        let whose = permit.map_or(" no permit".to_owned(), |p| format!(" permit {p}"));
        overlaps(key, hs, truth, &whose, out);
    }
    at_most(key, n, all, truth, out);
}

/// Never more than `n` holds at once that the store cannot excuse pairwise: at each hold's
/// start, the holds believed then, searched for `n + 1` of them (the new one among them)
/// with no pair excused.
fn at_most(key: &str, n: u32, mut hs: Vec<Hold>, truth: &StoreTruth, out: &mut Vec<Violation>) {
    let n = n as usize;
    hs.sort_by_key(|h| h.from);
    let mut reported: BTreeSet<Vec<u64>> = BTreeSet::new();
    for b in &hs {
        let believed: Vec<&Hold> = hs
            .iter()
            .filter(|a| a.token != b.token && a.from <= b.from && b.from < a.until)
            .filter(|a| !excused(key, a, b, truth))
            .take(MOST_AT_ONCE)
            .collect();
        if believed.len() < n {
            continue;
        }
        let Some(mut found) = clique(key, &believed, n, truth, &mut Vec::new()) else {
            continue;
        };
        found.push(b);
        let mut tokens: Vec<u64> = found.iter().map(|h| h.token).collect();
        tokens.sort_unstable();
        if !reported.insert(tokens) {
            continue;
        }
        let who: Vec<String> = found
            .iter()
            .map(|h| {
                format!(
                    "client {} on permit {} ({})",
                    h.client,
                    h.permit.map_or("?".to_owned(), |p| p.to_string()),
                    show(h.token)
                )
            })
            .collect();
        out.push(Violation {
            check: "semaphore",
            key: key.into(),
            detail: format!(
                "{} holders of {n} permits at once, none taken away by the store before another's grant: {}",
                found.len(),
                who.join(", ")
            ),
        });
    }
}

/// `need` holds of `from` with no pair excused (each also unexcused with those already
/// `chosen`), if there are.
fn clique<'a>(
    key: &str,
    from: &[&'a Hold],
    need: usize,
    truth: &StoreTruth,
    chosen: &mut Vec<&'a Hold>,
) -> Option<Vec<&'a Hold>> {
    if chosen.len() == need {
        return Some(chosen.clone());
    }
    for (i, h) in from.iter().enumerate() {
        if from.len() - i < need - chosen.len() {
            break;
        }
        let fits = chosen
            .iter()
            .all(|c| c.token != h.token && !excused(key, c, h, truth));
        if fits {
            chosen.push(h);
            if let Some(found) = clique(key, &from[i + 1..], need, truth, chosen) {
                return Some(found);
            }
            chosen.pop();
        }
    }
    None
}

/// One permit record of the store log: a grant or handoff of a permit.
struct Record<'a> {
    etcd_key: &'a str,
    permit: u32,
    made: i64,
    /// The revision that ended it (a delete, or a handoff written over it).
    ended: Option<i64>,
    lease: i64,
}

/// The store's own history of every semaphore key: at no revision more than N permit
/// records (N from [`permits`]; a key of another class is held to the lease rule only),
/// none numbered N or above, and no two on one lease.
pub fn check_store(truth: &StoreTruth, out: &mut Vec<Violation>) {
    let mut by_key: BTreeMap<&str, Vec<Record<'_>>> = BTreeMap::new();
    for ((key, made), (etcd_key, permit)) in &truth.permit_records {
        let id = (etcd_key.clone(), *made);
        by_key.entry(key.as_str()).or_default().push(Record {
            etcd_key,
            permit: *permit,
            made: *made,
            ended: truth.holds.get(&id).copied().flatten(),
            lease: truth.hold_lease.get(&id).copied().unwrap_or(0),
        });
    }
    for (key, mut records) in by_key {
        records.sort_by_key(|r| r.made);
        let n = permits(key);
        for r in &records {
            let live_at = |x: &Record<'_>| x.made <= r.made && x.ended.is_none_or(|e| e > r.made);
            let live: Vec<&Record<'_>> = records.iter().filter(|&x| live_at(x)).collect();
            let mut problems = Vec::new();
            if let Some(n) = n {
                if r.permit >= n {
                    problems.push(format!("permit {} of a class of {n}", r.permit));
                }
                if live.len() > n as usize {
                    let held: Vec<String> = live.iter().map(|x| x.permit.to_string()).collect();
                    problems.push(format!(
                        "{} permit records of {n} then (permits {})",
                        live.len(),
                        held.join(", ")
                    ));
                }
            }
            if let Some(other) = live
                .iter()
                .find(|x| x.etcd_key != r.etcd_key && x.lease == r.lease)
            {
                problems.push(format!(
                    "its session already held permit {} (made at revision {})",
                    other.permit, other.made
                ));
            }
            if !problems.is_empty() {
                out.push(Violation {
                    check: "semaphore-store",
                    key: key.to_owned(),
                    detail: format!(
                        "the permit record {} made at revision {}: {}",
                        r.etcd_key,
                        r.made,
                        problems.join("; ")
                    ),
                });
            }
        }
    }
}

/// The most permit records of one key the store held at once (the summary's: that the
/// load filled its semaphores).
pub fn most_at_once(truth: &StoreTruth) -> usize {
    let mut by_key: BTreeMap<&str, Vec<(i64, Option<i64>)>> = BTreeMap::new();
    for ((key, made), (etcd_key, _)) in &truth.permit_records {
        let ended = truth
            .holds
            .get(&(etcd_key.clone(), *made))
            .copied()
            .flatten();
        by_key.entry(key.as_str()).or_default().push((*made, ended));
    }
    by_key
        .values()
        .flat_map(|records| {
            records.iter().map(move |(at, _)| {
                records
                    .iter()
                    .filter(|(made, ended)| made <= at && ended.is_none_or(|e| e > *at))
                    .count()
            })
        })
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
