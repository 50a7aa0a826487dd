//! Observe under faults (issue 35): an observer follows a key of each generation through
//! the edge while the load and the faults run (`observe`), and every answer it got is then
//! held to etcd's own history (`check`, pure):
//!
//! - **backed**: a GRANTED at revision R is a put of the key's holder record at R naming
//!   that identity; an ending at R is a delete of the record at R of the hold granted at
//!   its `grant_revision`; a CURRENT at R is the record's state at R;
//! - **cause**: an ending's cause is what else the store did at R (an epoch record put: an
//!   advance; a force record put: a force release; the holding session's record deleted:
//!   an expiry or close; else a release), read from the store log, not from the arbiter;
//! - **complete**: between two answers of one observation (no gap marked), the store
//!   changed the record at no revision the observer was not told of.
//!
//! A hint may arrive late, never wrong and never with a hole.

use super::checker::Violation;
use super::store_log::StoreEvent;
use lock_store::hold_end::{EndFacts, HoldEnd, SessionEnd, hold_end};
use lock_store::layout::{EPOCH_KEY, FORCE_PREFIX, HOLDER_PREFIX, SESSION_PREFIX, lease_hex};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};

/// One answer as the observer recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    /// Which observation (a stream, resumed across reconnects by lock-client).
    pub stream: u32,
    pub key: String,
    /// `current`, `granted`, `released`, `expired`, `closed`, `forced`, `revoked`.
    pub change: String,
    pub revision: i64,
    pub held: bool,
    #[serde(default)]
    pub holder: Option<String>,
    #[serde(default)]
    pub grant_revision: i64,
    #[serde(default)]
    pub gap: bool,
}

/// What the store did at each revision, beside the holder records.
struct Facts {
    epoch_puts: HashSet<i64>,
    force_puts: HashSet<i64>,
    /// Session records deleted, by revision: lease ids.
    session_ends: HashMap<i64, HashSet<i64>>,
}

impl Facts {
    fn of(events: &[StoreEvent]) -> Self {
        let mut f = Facts {
            epoch_puts: HashSet::new(),
            force_puts: HashSet::new(),
            session_ends: HashMap::new(),
        };
        for e in events {
            if e.key == EPOCH_KEY && !e.delete {
                f.epoch_puts.insert(e.revision);
            } else if e.key.starts_with(FORCE_PREFIX) && !e.delete {
                f.force_puts.insert(e.revision);
            } else if let Some(hex) = e.key.strip_prefix(SESSION_PREFIX)
                && e.delete
                && let Ok(lease) = i64::from_str_radix(hex, 16)
            {
                f.session_ends.entry(e.revision).or_default().insert(lease);
            }
        }
        f
    }

    /// The end of a hold on `lease` deleted at `revision`. The store log does not keep the
    /// session record's `closing` mark: an expiry and a close are one cause here.
    fn end(&self, revision: i64, lease: i64) -> HoldEnd {
        let ended = self
            .session_ends
            .get(&revision)
            .is_some_and(|s| s.contains(&lease));
        hold_end(EndFacts {
            advance: self.epoch_puts.contains(&revision),
            force: self.force_puts.contains(&revision),
            session: ended.then_some(SessionEnd::Expired),
        })
    }
}

/// The change an ending's cause is reported as (an expiry and a close alike).
fn change_of(end: HoldEnd) -> &'static str {
    match end {
        HoldEnd::Released => "released",
        HoldEnd::Expired | HoldEnd::ClosedWithSession => "session-ended",
        HoldEnd::Forced => "forced",
        HoldEnd::RevokedByAdvance => "revoked",
    }
}

fn reported(change: &str) -> &str {
    match change {
        "expired" | "closed" => "session-ended",
        c => c,
    }
}

/// Every answer checked against the store log (which must cover their revisions).
pub fn check(seen: &[Seen], events: &[StoreEvent]) -> Vec<Violation> {
    let facts = Facts::of(events);
    // Each observed key's holder record events, in revision order.
    let keys: HashSet<&str> = seen.iter().map(|s| s.key.as_str()).collect();
    let mut by_key: HashMap<&str, Vec<&StoreEvent>> = HashMap::new();
    for e in events {
        if let Some(k) = e.key.strip_prefix(HOLDER_PREFIX)
            && keys.contains(k)
        {
            by_key.entry(k).or_default().push(e);
        }
    }
    let last_revision = events.iter().map(|e| e.revision).max().unwrap_or(0);
    let mut out = Vec::new();
    let mut bad = |key: &str, detail: String| {
        out.push(Violation {
            check: "observe",
            key: key.to_owned(),
            detail,
        });
    };
    let mut streams: BTreeMap<u32, Vec<&Seen>> = BTreeMap::new();
    for s in seen {
        streams.entry(s.stream).or_default().push(s);
    }
    for answers in streams.values() {
        let mut previous: Option<&Seen> = None;
        for a in answers {
            if a.revision > last_revision {
                break; // past what the store log saw
            }
            let log = by_key.get(a.key.as_str()).map(Vec::as_slice).unwrap_or(&[]);
            let at = log.iter().find(|e| e.revision == a.revision);
            match a.change.as_str() {
                "current" => {
                    let last = log.iter().rev().find(|e| e.revision <= a.revision);
                    let held = last.is_some_and(|e| !e.delete);
                    if held != a.held
                        || (held && last.map(|e| e.hold_id()) != Some(a.grant_revision))
                    {
                        bad(
                            &a.key,
                            format!(
                                "CURRENT at {}: held {} (grant {}), the store's record then: {:?}",
                                a.revision,
                                a.held,
                                a.grant_revision,
                                last.map(|e| (!e.delete, e.hold_id()))
                            ),
                        );
                    }
                }
                "granted" => match at {
                    Some(e) if !e.delete && e.hold_id() == a.revision => {
                        if e.holder.is_some() && e.holder != a.holder {
                            bad(
                                &a.key,
                                format!(
                                    "GRANTED at {} to {:?}, the record names {:?}",
                                    a.revision, a.holder, e.holder
                                ),
                            );
                        }
                    }
                    other => bad(
                        &a.key,
                        format!(
                            "GRANTED at {}, the store's record at that revision: {other:?}",
                            a.revision
                        ),
                    ),
                },
                change => match at {
                    Some(e) if e.delete => {
                        if e.hold_id() != a.grant_revision {
                            bad(
                                &a.key,
                                format!(
                                    "{change} at {} of the hold granted at {}, the store deleted the hold of {}",
                                    a.revision,
                                    a.grant_revision,
                                    e.hold_id()
                                ),
                            );
                        }
                        let cause = change_of(facts.end(a.revision, e.lease));
                        if reported(change) != cause {
                            bad(
                                &a.key,
                                format!(
                                    "{change} at {}, the store's revision says {cause} (session {})",
                                    a.revision,
                                    lease_hex(e.lease)
                                ),
                            );
                        }
                    }
                    other => bad(
                        &a.key,
                        format!(
                            "{change} at {}, the store's record at that revision: {other:?}",
                            a.revision
                        ),
                    ),
                },
            }
            // Complete: nothing changed between this answer and the one before it.
            if let Some(p) = previous
                && !a.gap
            {
                let missed: Vec<i64> = log
                    .iter()
                    .map(|e| e.revision)
                    .filter(|r| *r > p.revision && *r < a.revision)
                    .collect();
                if !missed.is_empty() {
                    bad(
                        &a.key,
                        format!(
                            "the record changed at {missed:?}, between answers at {} and {}, untold",
                            p.revision, a.revision
                        ),
                    );
                }
            }
            previous = Some(a);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: &str = "pay/gate/r/g0/k0";

    fn ev(revision: i64, key: &str, delete: bool, hold: i64, lease: i64) -> StoreEvent {
        StoreEvent {
            revision,
            seen: 0,
            key: key.to_owned(),
            delete,
            create_revision: hold,
            lease,
            holder: (!delete && key.starts_with(HOLDER_PREFIX)).then(|| "a".to_owned()),
            hold: Some(hold),
            epoch: None,
        }
    }

    fn seen(change: &str, revision: i64, held: bool, grant: i64) -> Seen {
        Seen {
            stream: 1,
            key: K.into(),
            change: change.into(),
            revision,
            held,
            holder: held.then(|| "a".to_owned()),
            grant_revision: grant,
            gap: false,
        }
    }

    fn log() -> Vec<StoreEvent> {
        let l = format!("{HOLDER_PREFIX}{K}");
        vec![
            ev(10, &l, false, 10, 0x1f),
            ev(12, &l, true, 10, 0x1f),
            ev(14, &l, false, 14, 0x2a),
            // Session 2a expires: its record and its hold go at one revision.
            ev(20, &format!("{SESSION_PREFIX}2a"), true, 3, 0x2a),
            ev(20, &l, true, 14, 0x2a),
            ev(22, &l, false, 22, 0x1f),
            ev(25, EPOCH_KEY, false, 1, 0),
            ev(25, &l, true, 22, 0x1f),
        ]
    }

    #[test]
    fn a_true_story_passes_and_each_lie_is_caught() {
        let truth = vec![
            seen("current", 9, false, 0),
            seen("granted", 10, true, 10),
            seen("released", 12, false, 10),
            seen("granted", 14, true, 14),
            seen("expired", 20, false, 14),
            seen("granted", 22, true, 22),
            seen("revoked", 25, false, 22),
        ];
        assert_eq!(check(&truth, &log()), vec![]);
        // (what is changed, the answer index, the replacement)
        let lies: Vec<(&str, usize, Seen)> = vec![
            (
                "an expiry told as a release",
                4,
                seen("released", 20, false, 14),
            ),
            (
                "a release told as an expiry",
                2,
                seen("expired", 12, false, 10),
            ),
            (
                "an advance told as a release",
                6,
                seen("released", 25, false, 22),
            ),
            (
                "a grant at a revision that wrote nothing",
                1,
                seen("granted", 11, true, 11),
            ),
            ("the wrong hold ended", 2, seen("released", 12, false, 9)),
            ("a current that was held", 0, seen("current", 11, false, 0)),
        ];
        for (what, i, lie) in lies {
            let mut story = truth.clone();
            story[i] = lie;
            assert!(!check(&story, &log()).is_empty(), "{what} passed");
        }
        // A change left out is a hole.
        let mut holed = truth.clone();
        holed.remove(3);
        assert!(!check(&holed, &log()).is_empty(), "a hole passed");
        // Unless a gap was marked (the store compacted it away; a fresh CURRENT says so).
        let mut gapped = truth[..3].to_vec();
        gapped.push(Seen {
            gap: true,
            ..seen("current", 21, false, 0)
        });
        assert_eq!(check(&gapped, &log()), vec![]);
    }
}
