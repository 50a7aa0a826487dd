//! What each fault did: the sessions the store ended, the outcomes left unknown and the
//! refusals given while it lasted and for one session TTL after (a renewal missed at the
//! end of a fault expires the session up to a TTL later), against the same counts outside
//! every fault's window. The attacker's calls are left out (refused by design). A fault kind whose window looks like the quiet time is not yet a
//! fault (issue 34); `gate run --faults KIND` shows one kind alone.

use super::history::{Kind, Op, Phase};
use super::store_log::StoreTruth;
use std::collections::BTreeMap;
use std::time::Duration;

/// A fault's window on the history's clock (CLOCK_MONOTONIC ns).
#[derive(Debug, Clone)]
pub struct Window {
    pub kind: String,
    pub from: u64,
    pub to: u64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Effect {
    /// Windows of this kind (or quiet stretches), and their total length.
    pub windows: usize,
    pub seconds: f64,
    pub sessions_ended: usize,
    /// Operations invoked in the window whose outcome the client could not know.
    pub unknown: usize,
    /// Refusals answered in the window, by reason, except a held key's (HELD,
    /// HELD_QUEUED, HELD_DEADLINE: the load's own contention).
    pub refusals: BTreeMap<String, usize>,
}

impl Effect {
    fn per_second(&self, n: usize) -> f64 {
        if self.seconds > 0.0 {
            n as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// One line: counts, and rates so that kinds of different lengths compare.
    pub fn line(&self) -> String {
        let refused: usize = self.refusals.values().sum();
        let reasons: Vec<String> = self
            .refusals
            .iter()
            .map(|(r, n)| format!("{r} {n}"))
            .collect();
        format!(
            "{} x, {:.0} s: sessions ended {} ({:.2}/s), unknown {} ({:.2}/s), refused {} ({:.2}/s){}",
            self.windows,
            self.seconds,
            self.sessions_ended,
            self.per_second(self.sessions_ended),
            self.unknown,
            self.per_second(self.unknown),
            refused,
            self.per_second(refused),
            if reasons.is_empty() {
                String::new()
            } else {
                format!(" [{}]", reasons.join(", "))
            }
        )
    }
}

/// Key of the stretches outside every window.
pub const QUIET: &str = "(no fault)";

fn contention(why: &str) -> bool {
    why.starts_with("HELD")
}

/// Effects per fault kind, plus [`QUIET`] for the time in `[start, end]` outside every
/// window (each window stretched by `after`).
pub fn measure(
    ops: &[Op],
    truth: &StoreTruth,
    windows: &[Window],
    after: Duration,
    (start, end): (u64, u64),
) -> BTreeMap<String, Effect> {
    let after = u64::try_from(after.as_nanos()).unwrap_or(u64::MAX);
    let stretched: Vec<(String, u64, u64)> = windows
        .iter()
        .map(|w| (w.kind.clone(), w.from, w.to.saturating_add(after)))
        .collect();
    let kinds_at = |t: u64| -> Vec<&str> {
        stretched
            .iter()
            .filter(|(_, a, b)| *a <= t && t <= *b)
            .map(|(k, _, _)| k.as_str())
            .collect()
    };
    let mut out: BTreeMap<String, Effect> = BTreeMap::new();
    for (kind, a, b) in &stretched {
        let e = out.entry(kind.clone()).or_default();
        e.windows += 1;
        e.seconds += (b.min(&end).saturating_sub(*a)) as f64 / 1e9;
    }
    // The quiet time: [start, end] minus the union of the stretched windows.
    let mut spans: Vec<(u64, u64)> = stretched.iter().map(|(_, a, b)| (*a, *b)).collect();
    spans.sort_unstable();
    let (mut quiet, mut cursor, mut stretches) = (0u64, start, 0usize);
    for (a, b) in spans {
        if a > cursor && cursor < end {
            quiet += a.min(end) - cursor;
            stretches += 1;
        }
        cursor = cursor.max(b);
    }
    if cursor < end {
        quiet += end - cursor;
        stretches += 1;
    }
    let q = out.entry(QUIET.to_owned()).or_default();
    q.windows = stretches;
    q.seconds = quiet as f64 / 1e9;
    let mut count = |t: u64, what: &dyn Fn(&mut Effect)| {
        if t < start || t > end {
            return;
        }
        let kinds = kinds_at(t);
        if kinds.is_empty() {
            what(out.entry(QUIET.to_owned()).or_default());
        }
        for k in kinds {
            what(out.entry(k.to_owned()).or_default());
        }
    };
    for seen in truth.session_end_seen.values() {
        count(*seen, &|e| e.sessions_ended += 1);
    }
    // The attacker's calls are refused by design, faults or not: not a fault's effect. A
    // force release is the gate's own fault, refused when the hold moved first: not a
    // client's refusal either.
    for op in ops.iter().filter(|o| {
        !o.via.as_deref().is_some_and(|v| v.starts_with("attack:")) && o.kind != Kind::Force
    }) {
        if op.unknown() {
            count(op.invoked, &|e| e.unknown += 1);
        } else if let (Some((t, Phase::Fail)), Some(why)) = (op.done, op.why.as_deref()) {
            if contention(why) {
                continue;
            }
            let reason = why.split([' ', ':']).next().unwrap_or(why).to_owned();
            count(t, &|e| *e.refusals.entry(reason.clone()).or_default() += 1);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(invoked: u64, done: Option<(u64, Phase)>, why: Option<&str>) -> Op {
        Op {
            client: 1,
            kind: Kind::Acquire,
            key: Some("k".into()),
            session: Some(1),
            token: None,
            invoked,
            done,
            why: why.map(str::to_owned),
            via: None,
            served: None,
            rev: None,
            set: None,
            shared: false,
            permit: None,
        }
    }

    const S: u64 = 1_000_000_000;

    #[test]
    fn counts_fall_in_the_window_stretched_by_a_ttl_or_in_the_quiet() {
        let mut truth = StoreTruth::default();
        truth.session_end_seen.insert(7, 14 * S); // in the stretch after the fault
        truth.session_end_seen.insert(8, 30 * S); // quiet
        let ops = vec![
            op(
                11 * S,
                Some((12 * S, Phase::Fail)),
                Some("STORE_UNAVAILABLE"),
            ),
            op(11 * S, None, None),
            op(12 * S, Some((12 * S, Phase::Fail)), Some("HELD")), // contention: not counted
            op(25 * S, Some((26 * S, Phase::Fail)), Some("SESSION_EXPIRED")),
            op(50 * S, None, None), // past the end
            // The gate's own force release, refused because the hold moved: not counted.
            Op {
                kind: Kind::Force,
                ..op(
                    11 * S,
                    Some((11 * S, Phase::Fail)),
                    Some("the key is not held"),
                )
            },
        ];
        let w = [Window {
            kind: "cut".into(),
            from: 10 * S,
            to: 12 * S,
        }];
        let m = measure(&ops, &truth, &w, Duration::from_secs(5), (0, 40 * S));
        let cut = &m["cut"];
        assert_eq!((cut.windows, cut.seconds), (1, 7.0));
        assert_eq!((cut.sessions_ended, cut.unknown), (1, 1));
        assert_eq!(cut.refusals.get("STORE_UNAVAILABLE"), Some(&1));
        assert_eq!(cut.refusals.len(), 1);
        let quiet = &m[QUIET];
        assert_eq!((quiet.windows, quiet.seconds), (2, 33.0));
        assert_eq!((quiet.sessions_ended, quiet.unknown), (1, 0));
        assert_eq!(quiet.refusals.get("SESSION_EXPIRED"), Some(&1));
    }

    #[test]
    fn overlapping_windows_count_for_each_kind() {
        let mut truth = StoreTruth::default();
        truth.session_end_seen.insert(1, 5 * S);
        let w = [
            Window {
                kind: "a".into(),
                from: 0,
                to: 6 * S,
            },
            Window {
                kind: "b".into(),
                from: 4 * S,
                to: 8 * S,
            },
        ];
        let m = measure(&[], &truth, &w, Duration::ZERO, (0, 10 * S));
        assert_eq!(m["a"].sessions_ended, 1);
        assert_eq!(m["b"].sessions_ended, 1);
        assert_eq!(m[QUIET].sessions_ended, 0);
        assert_eq!(m[QUIET].seconds, 2.0);
    }
}
