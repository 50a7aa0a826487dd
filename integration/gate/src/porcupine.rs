//! Porcupine beside the gate's own search (issue 52, ADR-23). `gate-porcupine`
//! (integration/porcupine; install-deps.sh builds it into the tool cache and links it as
//! `.deps/bin/gate-porcupine`) reads the same history folder and store log as
//! [`crate::linearize`] and checks each key with Porcupine: the lock as a fenced
//! reader-writer mutex, and the fenced resources (the register, the PostgreSQL fence) as
//! objects of their own.
//!
//! Each key's verdicts are compared part by part: the lock against the gate's search, the
//! fences against the gate's fence check (its search has no writes). Both ok or both
//! illegal is agreement. One ok and the other illegal is a disagreement, which fails the
//! round: it is a finding about one of the two checkers. A search that ran out of budget
//! or time (unknown, unchecked) on either side is counted, not a disagreement.

use crate::linearize::Verdict as GateVerdict;
use crate::violation::Violation;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// A verdict, on either side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Ok,
    Illegal,
    /// The search ran out of time or budget: nothing is claimed.
    Unknown,
}

impl Verdict {
    fn name(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Illegal => "illegal",
            Verdict::Unknown => "unknown",
        }
    }
}

impl From<&GateVerdict> for Verdict {
    fn from(v: &GateVerdict) -> Self {
        match v {
            GateVerdict::Linearizable => Verdict::Ok,
            GateVerdict::NotLinearizable => Verdict::Illegal,
            GateVerdict::Unchecked => Verdict::Unknown,
        }
    }
}

/// One key's line of `gate-porcupine`'s output.
#[derive(Debug, Clone, Deserialize)]
pub struct KeyVerdict {
    pub key: String,
    pub verdict: Verdict,
    /// The lock object's verdict.
    pub lock: Verdict,
    /// The register's and the PostgreSQL fence's, together.
    pub fences: Verdict,
}

/// A part of a key on which the two checkers disagree (or a key only one of them saw).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disagreement {
    pub key: String,
    /// `lock` or `fences`.
    pub part: &'static str,
    /// None: the checker gave this key no verdict.
    pub gate: Option<Verdict>,
    pub porcupine: Option<Verdict>,
}

impl std::fmt::Display for Disagreement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: Option<Verdict>| v.map_or("no verdict", Verdict::name);
        let gate = if self.part == "lock" {
            "the gate's search"
        } else {
            "the gate's fence check"
        };
        write!(
            f,
            "[porcupine] {} ({}): {gate} says {}, Porcupine says {}",
            self.key,
            self.part,
            show(self.gate),
            show(self.porcupine)
        )
    }
}

/// How the two checkers' verdicts compare over a round.
#[derive(Debug, Clone, Default)]
pub struct Agreement {
    pub keys: usize,
    /// Keys whose every part both call ok, or both illegal.
    pub agreed: usize,
    /// Keys with a part unknown on either side (and no disagreement).
    pub unknown: usize,
    /// Keys Porcupine calls illegal.
    pub illegal: usize,
    pub disagreements: Vec<Disagreement>,
}

impl Agreement {
    /// The round's one-line summary.
    pub fn line(&self) -> String {
        format!(
            "porcupine (the same history, per key: the lock against the gate's search, the fences against its fence check): {} keys checked, {} agreed, {} unknown, {} illegal, {} disagreements",
            self.keys,
            self.agreed,
            self.unknown,
            self.illegal,
            self.disagreements.len()
        )
    }
}

/// Runs `gate-porcupine` on `history_dir` and compares its verdicts with the gate's.
pub fn check(
    history_dir: &Path,
    gate: &BTreeMap<String, (GateVerdict, std::time::Duration)>,
    violations: &[Violation],
) -> anyhow::Result<Agreement> {
    Ok(compare(gate, violations, &run(history_dir)?))
}

/// `gate-porcupine`'s verdicts on a history folder, by key.
pub fn run(history_dir: &Path) -> anyhow::Result<BTreeMap<String, KeyVerdict>> {
    let bin = lock_integration::paths::dep("gate-porcupine")?;
    let out = Command::new(&bin).arg("-dir").arg(history_dir).output()?;
    // 0: no key illegal; 1: some; anything else: it could not check.
    if !matches!(out.status.code(), Some(0 | 1)) {
        anyhow::bail!(
            "{} failed ({}): {}",
            bin.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let mut verdicts = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: KeyVerdict = serde_json::from_str(line)?;
        verdicts.insert(v.key.clone(), v);
    }
    Ok(verdicts)
}

/// Compares per key: the lock with the gate's search, the fences with the gate's fence
/// check. Pure, for the tests.
pub fn compare(
    gate: &BTreeMap<String, (GateVerdict, std::time::Duration)>,
    violations: &[Violation],
    porcupine: &BTreeMap<String, KeyVerdict>,
) -> Agreement {
    let fenced: std::collections::BTreeSet<&str> = violations
        .iter()
        .filter(|v| v.check == "fence")
        .map(|v| v.key.as_str())
        .collect();
    let mut keys: std::collections::BTreeSet<&str> = gate.keys().map(String::as_str).collect();
    keys.extend(porcupine.keys().map(String::as_str));
    let mut a = Agreement::default();
    for key in keys {
        a.keys += 1;
        let p = porcupine.get(key);
        if p.is_some_and(|p| p.verdict == Verdict::Illegal) {
            a.illegal += 1;
        }
        let lock = (gate.get(key).map(|(v, _)| v.into()), p.map(|p| p.lock));
        let fences = (
            gate.get(key).map(|_| {
                if fenced.contains(key) {
                    Verdict::Illegal
                } else {
                    Verdict::Ok
                }
            }),
            p.map(|p| p.fences),
        );
        let mut unknown = false;
        let mut disagreed = false;
        for (part, (g, p)) in [("lock", lock), ("fences", fences)] {
            match (g, p) {
                (Some(g), Some(p)) if g == p && g != Verdict::Unknown => {}
                (Some(Verdict::Unknown), Some(_)) | (Some(_), Some(Verdict::Unknown)) => {
                    unknown = true;
                }
                _ => {
                    disagreed = true;
                    a.disagreements.push(Disagreement {
                        key: key.to_owned(),
                        part,
                        gate: g,
                        porcupine: p,
                    });
                }
            }
        }
        if disagreed {
            continue;
        }
        if unknown {
            a.unknown += 1;
        } else {
            a.agreed += 1;
        }
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn gate(pairs: &[(&str, GateVerdict)]) -> BTreeMap<String, (GateVerdict, Duration)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (v.clone(), Duration::ZERO)))
            .collect()
    }

    fn porcupine(lines: &[(&str, Verdict, Verdict)]) -> BTreeMap<String, KeyVerdict> {
        lines
            .iter()
            .map(|(k, lock, fences)| {
                let verdict = if [lock, fences].contains(&&Verdict::Illegal) {
                    Verdict::Illegal
                } else if [lock, fences].contains(&&Verdict::Unknown) {
                    Verdict::Unknown
                } else {
                    Verdict::Ok
                };
                let v = KeyVerdict {
                    key: (*k).to_owned(),
                    verdict,
                    lock: *lock,
                    fences: *fences,
                };
                ((*k).to_owned(), v)
            })
            .collect()
    }

    fn fence(key: &str) -> Violation {
        Violation {
            check: "fence",
            key: key.into(),
            detail: String::new(),
        }
    }

    #[test]
    fn agreement_unknowns_and_disagreements() {
        use GateVerdict::*;
        use Verdict::{Illegal, Ok, Unknown};
        let g = gate(&[
            ("a", Linearizable),
            ("b", NotLinearizable),
            ("c", Unchecked),
            ("d", Linearizable),
            ("e", NotLinearizable),
            ("f", Linearizable),
            ("g", Linearizable),
        ]);
        let p = porcupine(&[
            ("a", Ok, Ok),
            ("b", Illegal, Ok),
            ("c", Ok, Ok),
            ("d", Unknown, Ok),
            ("e", Ok, Ok),
            ("f", Ok, Ok),
            ("h", Ok, Ok),
        ]);
        let a = compare(&g, &[fence("f")], &p);
        assert_eq!((a.keys, a.agreed, a.unknown, a.illegal), (8, 2, 2, 1));
        let found: Vec<(&str, &str, Option<Verdict>, Option<Verdict>)> = a
            .disagreements
            .iter()
            .map(|d| (d.key.as_str(), d.part, d.gate, d.porcupine))
            .collect();
        assert_eq!(
            found,
            vec![
                ("e", "lock", Some(Illegal), Some(Ok)),
                ("f", "fences", Some(Illegal), Some(Ok)),
                ("g", "lock", Some(Ok), None),
                ("g", "fences", Some(Ok), None),
                ("h", "lock", None, Some(Ok)),
                ("h", "fences", None, Some(Ok)),
            ]
        );
        assert_eq!(
            a.disagreements[0].to_string(),
            "[porcupine] e (lock): the gate's search says illegal, Porcupine says ok"
        );
    }
}
