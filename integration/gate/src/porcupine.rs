//! Porcupine beside the gate's own search (issue 52, ADR-23). `gate-porcupine`
//! (integration/porcupine; install-deps.sh builds it into the tool cache and links it as
//! `.deps/bin/gate-porcupine`) reads the same history folder and store log as
//! [`crate::linearize`] and checks each key with Porcupine: the lock as a fenced
//! reader-writer mutex, a semaphore's key (`permits: N`, told by `-semaphores`) as a
//! fenced semaphore, and the fenced resources (the register, the PostgreSQL fence; a
//! semaphore's per permit) as objects of their own.
//!
//! Each key's verdicts are compared part by part: the lock against the gate's search, the
//! fences against the gate's fence check (its search has no writes). Both ok or both
//! illegal is agreement. One ok and the other illegal is a disagreement, which fails the
//! round: it is a finding about one of the two checkers. A search that ran out of budget
//! or time (unknown, unchecked) on either side is counted, not a disagreement. A key the two
//! model differently (a semaphore of N permits on one side, of another N or none on the
//! other) is a disagreement of its own (`model`): their verdicts would not be on one
//! question.

use crate::linearize::Verdict as GateVerdict;
use crate::semaphore;
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
    /// The permits Porcupine's model gave the key: N for a semaphore's key, absent (0)
    /// for every other.
    #[serde(default)]
    pub permits: u32,
}

/// A part of a key on which the two checkers disagree (or a key only one of them saw).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disagreement {
    pub key: String,
    /// `lock`, `fences`, or `model` (the two gave the key different permits).
    pub part: &'static str,
    /// None: the checker gave this key no verdict.
    pub gate: Option<Verdict>,
    pub porcupine: Option<Verdict>,
    /// The permits each side modelled the key with (0: not a semaphore's); told for a
    /// `model` disagreement.
    pub permits: (u32, u32),
}

impl std::fmt::Display for Disagreement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.part == "model" {
            return write!(
                f,
                "[porcupine] {} (model): the gate checks it as {}, Porcupine as {}",
                self.key,
                permits_name(self.permits.0),
                permits_name(self.permits.1)
            );
        }
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

fn permits_name(n: u32) -> String {
    if n == 0 {
        "a mutex (no permits)".to_owned()
    } else {
        format!("a semaphore of {n} permits")
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
    // The semaphore class and its permits, as the gate's own checks read them.
    let semaphores = format!(
        "{}={}",
        lock_integration::registry::GATE_SEM_PREFIX,
        lock_integration::registry::GATE_SEM_PERMITS
    );
    let out = Command::new(&bin)
        .arg("-dir")
        .arg(history_dir)
        .arg("-semaphores")
        .arg(semaphores)
        .output()?;
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
        let permits = (
            semaphore::permits(key).unwrap_or(0),
            p.map_or(0, |p| p.permits),
        );
        if p.is_some() && permits.0 != permits.1 {
            disagreed = true;
            a.disagreements.push(Disagreement {
                key: key.to_owned(),
                part: "model",
                gate: None,
                porcupine: None,
                permits,
            });
        }
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
                        permits,
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
                    permits: semaphore::permits(k).unwrap_or(0),
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

    /// A semaphore's key is compared as any other when both model it with its permits; a
    /// side that took it for a mutex (or another N) is a disagreement on the model.
    #[test]
    fn semaphore_keys_need_one_model() {
        use GateVerdict::*;
        use Verdict::{Illegal, Ok};
        let sem = format!("{}/r1/g0/k0", lock_integration::registry::GATE_SEM_PREFIX);
        let g = gate(&[(sem.as_str(), NotLinearizable)]);
        let p = porcupine(&[(sem.as_str(), Illegal, Ok)]);
        let a = compare(&g, &[], &p);
        assert_eq!((a.agreed, a.illegal, a.disagreements.len()), (1, 1, 0));
        let mut p = p;
        if let Some(v) = p.get_mut(&sem) {
            v.permits = 0;
        }
        let a = compare(&g, &[], &p);
        assert_eq!(a.agreed, 0);
        assert_eq!(a.disagreements.len(), 1);
        assert_eq!(
            a.disagreements[0].to_string(),
            format!(
                "[porcupine] {sem} (model): the gate checks it as a semaphore of {} permits, Porcupine as a mutex (no permits)",
                lock_integration::registry::GATE_SEM_PERMITS
            )
        );
    }
}
