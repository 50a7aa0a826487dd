//! Replicas in the history (issue 32): the gate's clients `2k-1` and `2k` share one SPIFFE
//! ID with their own instances (`lock_integration::registry::gate_replica_slot`), as two
//! pods of one Deployment do. Pure: the recorded operations in, counts and violations out.
//!
//! - A sibling handoff is a key granted next to the other replica of its holder's identity
//!   (consecutive grants by token): siblings waited for each other and took turns.
//! - LEAKED_HOLD names a leak: the refused client (its instance) must itself have asked for
//!   that key before (an acquire that was granted or whose outcome is unknown), so the hold
//!   could be its own earlier session's. A client told LEAKED_HOLD for a key it never asked
//!   for was refused because of its sibling's hold: replicas treated as one process.

use super::checker::Violation;
use super::history::{Kind, Op};
use lock_integration::registry::gate_replica_slot;
use std::collections::BTreeMap;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Siblings {
    /// Grants that followed a grant of the same key to the holder's sibling replica.
    pub handoffs: usize,
    /// LEAKED_HOLD answers that named a real (possible) leak of the client's own.
    pub leaks: usize,
    pub violations: Vec<Violation>,
}

fn siblings(a: u32, b: u32) -> bool {
    a != b && gate_replica_slot(a as usize) == gate_replica_slot(b as usize)
}

pub fn check(ops: &[Op]) -> Siblings {
    let mut out = Siblings::default();
    let mut by_key: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in ops.iter().filter(|o| o.kind == Kind::Acquire) {
        if let Some(k) = op.key.as_deref() {
            by_key.entry(k).or_default().push(op);
        }
    }
    for (key, acquires) in by_key {
        let mut grants: Vec<(u64, u32)> = acquires
            .iter()
            .filter(|o| o.ok())
            .filter_map(|o| Some((o.token?, o.client)))
            .collect();
        grants.sort_unstable();
        out.handoffs += grants
            .windows(2)
            .filter(|w| siblings(w[0].1, w[1].1))
            .count();
        for op in &acquires {
            let leaked = op.failed() && op.why.as_deref() == Some("LEAKED_HOLD");
            if !leaked {
                continue;
            }
            let asked_before = acquires.iter().any(|o| {
                o.client == op.client && o.invoked < op.invoked && (o.ok() || o.unknown())
            });
            if asked_before {
                out.leaks += 1;
            } else {
                out.violations.push(Violation {
                    check: "replicas",
                    key: key.to_owned(),
                    detail: format!(
                        "client {} was told LEAKED_HOLD but had never held the key: a sibling replica's hold was named its leak",
                        op.client
                    ),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Phase;

    fn acquire(client: u32, at: u64, token: Option<u64>, why: Option<&str>) -> Op {
        Op {
            client,
            kind: Kind::Acquire,
            key: Some("pay/gate/k".into()),
            session: Some(1),
            token,
            invoked: at,
            done: Some((
                at + 1,
                match (token, why) {
                    (Some(_), _) => Phase::Ok,
                    (None, Some(_)) => Phase::Fail,
                    (None, None) => Phase::Info,
                },
            )),
            why: why.map(str::to_owned),
            via: None,
            served: None,
            rev: None,
            set: None,
            shared: false,
            permit: None,
        }
    }

    #[test]
    fn table() {
        // (name, history, sibling handoffs, leaks, violations)
        let cases: Vec<(&str, Vec<Op>, usize, usize, usize)> = vec![
            (
                "siblings 1 and 2 take turns; 3 is another identity",
                vec![
                    acquire(1, 10, Some(100), None),
                    acquire(2, 11, Some(200), None),
                    acquire(3, 12, Some(300), None),
                    acquire(1, 13, Some(400), None),
                ],
                1,
                0,
                0,
            ),
            (
                "a leak of the client's own earlier hold",
                vec![
                    acquire(3, 10, Some(100), None),
                    acquire(3, 20, None, Some("LEAKED_HOLD")),
                ],
                0,
                1,
                0,
            ),
            (
                "a leak after an acquire whose answer was lost",
                vec![
                    acquire(3, 10, None, None),
                    acquire(3, 20, None, Some("LEAKED_HOLD")),
                ],
                0,
                1,
                0,
            ),
            (
                "a sibling refused LEAKED_HOLD for its sibling's hold",
                vec![
                    acquire(1, 10, Some(100), None),
                    acquire(2, 20, None, Some("LEAKED_HOLD")),
                ],
                0,
                0,
                1,
            ),
            (
                "HELD between siblings is what replicas should hear",
                vec![
                    acquire(1, 10, Some(100), None),
                    acquire(2, 20, None, Some("HELD")),
                ],
                0,
                0,
                0,
            ),
        ];
        for (name, ops, handoffs, leaks, violations) in cases {
            let got = check(&ops);
            assert_eq!(
                (got.handoffs, got.leaks, got.violations.len()),
                (handoffs, leaks, violations),
                "{name}"
            );
        }
    }
}
