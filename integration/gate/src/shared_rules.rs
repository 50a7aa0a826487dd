//! The reader–writer rules of a `shared: true` class (issue 35), checked on the store's
//! history and on the recorded reads. Pure: events and operations in, conflicts and
//! violations out. The per-key checks (`checker.rs`) hold shared keys to everything else
//! (tokens, backing, releases, exclusion of an exclusive hold against any other).
//!
//! From the store (every holder record and writer's mark, at its revision):
//! - no exclusive hold (`/l/<key>`) is made while a shared hold of the key stands;
//! - no shared hold (`/r/<key>//s/<lease>`) is made while the exclusive hold stands;
//! - **no shared hold is made while a writer is marked waiting** (`/r/<key>//w/<lease>`):
//!   what keeps a stream of readers from starving a writer.
//!
//! From the register (the fenced resource readers read):
//! - a read it served carried a token at least that of every write it had accepted
//!   before the read was asked;
//! - a read it refused was a reader's whose hold the store had ended before the writer
//!   that wrote past it was granted: a live reader is never refused.

use crate::history::{Kind, Op};
use crate::store_log::{StoreEvent, StoreTruth, hold_of, writer_mark_of};
use crate::violation::{Violation, revision};
use std::collections::{BTreeMap, HashMap};

/// A reader–writer rule the store's own history breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub key: String,
    /// The revision of the grant that should not have been made.
    pub revision: i64,
    pub detail: String,
}

/// What the store's history shows of shared classes: the conflicts, and counts for the
/// summary (that readers did overlap, and writers did wait).
#[derive(Debug, Clone, Default)]
pub struct Replay {
    pub conflicts: Vec<Conflict>,
    /// Shared holds made, and those made while another shared hold of the key stood.
    pub shared_made: usize,
    pub shared_overlapping: usize,
    /// Writers' waiting marks made.
    pub marks_made: usize,
}

/// What stands on one key as the store's history is replayed: etcd key -> the revision
/// that made it.
#[derive(Default)]
struct Standing {
    exclusive: Option<i64>,
    shared: BTreeMap<String, i64>,
    marks: BTreeMap<String, i64>,
}

/// Replays the store's events revision by revision: a revision's deletes first (one
/// transaction may end a record and make another), then each of its puts is judged against
/// what still stands.
pub fn replay(events: &[StoreEvent]) -> Replay {
    let mut by_rev: BTreeMap<i64, Vec<&StoreEvent>> = BTreeMap::new();
    for e in events {
        if hold_of(&e.key).is_some() || writer_mark_of(&e.key).is_some() {
            by_rev.entry(e.revision).or_default().push(e);
        }
    }
    let mut keys: HashMap<String, Standing> = HashMap::new();
    let mut out = Replay::default();
    for (rev, group) in by_rev {
        for e in group.iter().filter(|e| e.delete) {
            if let Some((key, shared)) = hold_of(&e.key) {
                let s = keys.entry(key.to_owned()).or_default();
                if shared {
                    s.shared.remove(&e.key);
                } else {
                    s.exclusive = None;
                }
            } else if let Some(key) = writer_mark_of(&e.key) {
                keys.entry(key.to_owned()).or_default().marks.remove(&e.key);
            }
        }
        for e in group.iter().filter(|e| !e.delete) {
            if let Some((key, shared)) = hold_of(&e.key) {
                let s = keys.entry(key.to_owned()).or_default();
                let problem = if shared {
                    if let Some(x) = s.exclusive {
                        Some(format!(
                            "a shared hold was made while the exclusive hold made at revision {x} stood"
                        ))
                    } else {
                        s.marks.values().next().map(|m| {
                            format!(
                                "a shared hold was made while a writer waited (its mark made at revision {m})"
                            )
                        })
                    }
                } else {
                    s.shared.values().next().map(|r| {
                        format!(
                            "an exclusive hold was made while the shared hold made at revision {r} stood"
                        )
                    })
                };
                if shared {
                    out.shared_made += 1;
                    out.shared_overlapping += usize::from(!s.shared.is_empty());
                }
                if let Some(detail) = problem {
                    out.conflicts.push(Conflict {
                        key: key.to_owned(),
                        revision: rev,
                        detail,
                    });
                }
                if shared {
                    s.shared.insert(e.key.clone(), rev);
                } else {
                    s.exclusive = Some(rev);
                }
            } else if let Some(key) = writer_mark_of(&e.key) {
                let s = keys.entry(key.to_owned()).or_default();
                if !s.marks.contains_key(&e.key) {
                    out.marks_made += 1;
                    s.marks.insert(e.key.clone(), rev);
                }
            }
        }
    }
    out
}

/// The store's conflicts, and the register's reads, as violations.
pub fn check(ops: &[Op], truth: &StoreTruth, out: &mut Vec<Violation>) {
    for c in &replay(&truth.rw_events).conflicts {
        out.push(Violation {
            check: "shared-store",
            key: c.key.clone(),
            detail: format!("at revision {}: {}", c.revision, c.detail),
        });
    }
    let mut by_key: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in ops
        .iter()
        .filter(|o| matches!(o.kind, Kind::Read | Kind::Write))
    {
        if let Some(k) = op.key.as_deref() {
            by_key.entry(k).or_default().push(op);
        }
    }
    for (key, ops) in by_key {
        if ops.iter().any(|o| o.kind == Kind::Read) {
            reads(key, &ops, truth, out);
        }
    }
}

fn reads(key: &str, ops: &[&Op], truth: &StoreTruth, out: &mut Vec<Violation>) {
    let writes: Vec<(u64, u64, u64)> = ops
        .iter()
        .filter(|o| o.kind == Kind::Write && o.ok())
        .filter_map(|o| Some((o.token?, o.invoked, o.returned()?)))
        .collect();
    for r in ops.iter().filter(|o| o.kind == Kind::Read) {
        let (Some(t), Some(done)) = (r.token, r.returned()) else {
            continue;
        };
        if r.ok() {
            // Served: no write under a higher token had been accepted before it was asked.
            if let Some((w, _, _)) = writes
                .iter()
                .filter(|(w, _, returned)| *w > t && *returned < r.invoked)
                .min()
            {
                out.push(Violation {
                    check: "read-fence",
                    key: key.into(),
                    detail: format!(
                        "client {}'s read under revision {} was served after a write under revision {} was accepted",
                        r.client,
                        revision(t),
                        revision(*w)
                    ),
                });
            }
            continue;
        }
        if r.why.as_deref() != Some("STALE") {
            continue;
        }
        // Refused: the first write past this reader's token that could have been in the
        // register by then; its grant must have come after the store ended this hold.
        let Some((w, _, _)) = writes
            .iter()
            .filter(|(w, invoked, _)| *w > t && *invoked < done)
            .min()
        else {
            continue;
        };
        let writer = revision(*w);
        let ended = match truth.deleted_at(key, revision(t)) {
            // The store never logged this hold: the grant checks speak for it.
            None => continue,
            Some(ended) => ended,
        };
        if ended.is_none_or(|d| d > writer) {
            out.push(Violation {
                check: "read-fence",
                key: key.into(),
                detail: format!(
                    "client {}'s read under revision {} was refused, but the writer past it was granted at revision {writer} while that reader's hold still stood{}",
                    r.client,
                    revision(t),
                    ended.map_or(String::new(), |d| format!(" (it ended at {d})"))
                ),
            });
        }
    }
}

#[cfg(test)]
mod tests;
