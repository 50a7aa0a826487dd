//! The rules of one LockClass (ADR-01, 04, 11, 17): its namespace and prefixes, its TTL,
//! what advisory and fenced each require.

use super::Validator;
use crate::key::KeyPrefix;
use crate::registry::date::Date;
use crate::registry::documents::*;
use crate::registry::{ADVISORY_TTL_FLOOR, MAX_PERMITS, TTL_RANGE};
use std::collections::BTreeMap;

impl Validator {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn check_class(
        &mut self,
        source: &str,
        id: &str,
        name: &str,
        spec: &LockClassSpec,
        namespaces: &BTreeMap<String, NamespaceSpec>,
        results: &[(String, String, PauseTestResultSpec)],
        today: Date,
    ) {
        if !namespaces.contains_key(&spec.namespace) {
            self.err(
                source,
                id,
                "spec.namespace",
                format!("no Namespace named {}", spec.namespace),
            );
        }
        if spec.prefixes.is_empty() {
            self.err(
                source,
                id,
                "spec.prefixes",
                "at least one prefix is required",
            );
        }
        for (i, p) in spec.prefixes.iter().enumerate() {
            let field = format!("spec.prefixes[{i}]");
            match KeyPrefix::parse(p) {
                Ok(prefix) if prefix.namespace() != spec.namespace => self.err(
                    source,
                    id,
                    &field,
                    format!("prefix {p} is outside namespace {}", spec.namespace),
                ),
                Ok(_) => {}
                Err(e) => self.err(source, id, &field, format!("invalid prefix {p:?}: {e}")),
            }
        }
        let ttl = super::effective_ttl(spec);
        if !TTL_RANGE.contains(&ttl) {
            self.err(
                source,
                id,
                "spec.ttlSeconds",
                format!("{ttl} is outside 5..=300"),
            );
        }
        if let Some(bound) = spec.max_hold_seconds
            && bound < ttl
        {
            self.err(
                source,
                id,
                "spec.maxHoldSeconds",
                format!("{bound} is below the class's TTL ({ttl} s): every hold would be over it"),
            );
        }
        let advisory = spec.enforcement == Enforcement::Advisory;
        if advisory && ttl < ADVISORY_TTL_FLOOR {
            self.err(
                source,
                id,
                "spec.ttlSeconds",
                format!("advisory classes need at least {ADVISORY_TTL_FLOOR} s (got {ttl})"),
            );
        }
        if advisory && spec.purpose == Purpose::Correctness {
            if spec
                .risk_owner
                .as_deref()
                .is_none_or(|o| o.trim().is_empty())
            {
                self.err(
                    source,
                    id,
                    "spec.riskOwner",
                    "advisory correctness class needs a risk owner",
                );
            }
            match spec.waiver_expires.as_deref().map(Date::parse) {
                None => self.err(
                    source,
                    id,
                    "spec.waiverExpires",
                    "advisory correctness class needs a waiver expiry date",
                ),
                Some(None) => self.err(source, id, "spec.waiverExpires", "must be YYYY-MM-DD"),
                Some(Some(_)) => {}
            }
        }
        // ADR-04 allows `open` (keep granting from a local spool while etcd has no quorum)
        // for efficiency, advisory classes only. That mode and its spool are not built: a
        // class declaring it would run closed without saying so, so it is refused until it
        // exists rather than accepted with no effect.
        if spec.on_quorum_loss == QuorumPosture::Open {
            let why = if spec.purpose == Purpose::Correctness
                || spec.enforcement == Enforcement::Fenced
            {
                "open is allowed only for efficiency, advisory classes (ADR-04), and is not built: remove the field (closed is the default)"
            } else {
                "open is not built (ADR-04's open mode and its spool do not exist): this class would run closed without saying so; remove the field (closed is the default)"
            };
            self.err(source, id, "spec.onQuorumLoss", why);
        }
        // Shared holds live beside the holder record, not in a durable queue: a durable
        // class's waiters would be overtaken by every shared grant.
        if spec.shared && spec.fairness == Fairness::Durable {
            self.err(
                source,
                id,
                "spec.shared",
                "shared holds need fairness: memory (a durable queue would be overtaken by every shared grant)",
            );
        }
        if let Some(n) = spec.permits {
            self.permits(source, id, spec, n);
        }
        if let Some(delay) = spec.lock_delay_seconds {
            self.lock_delay(source, id, spec, ttl, delay);
        }
        if spec.enforcement == Enforcement::Fenced {
            self.fenced_by_its_result(source, id, name, spec, results, today);
        }
    }

    /// Semaphores (issue 53): N permits of one key, each held by one session. Their waiters
    /// queue in the key's arbiter's memory (a durable queue is not built for them), a
    /// shared hold has no permit, and a lock-delay's marker covers one holder, not N.
    fn permits(&mut self, source: &str, id: &str, spec: &LockClassSpec, n: u32) {
        let field = "spec.permits";
        if !(2..=MAX_PERMITS).contains(&n) {
            self.err(
                source,
                id,
                field,
                format!(
                    "{n} is outside 2..={MAX_PERMITS} (1 is an exclusive lock: leave it unset)"
                ),
            );
        }
        if spec.fairness == Fairness::Durable {
            self.err(source, id, field, "a semaphore needs fairness: memory");
        }
        if spec.shared {
            self.err(
                source,
                id,
                field,
                "a class is shared or a semaphore, not both",
            );
        }
        if spec.lock_delay_seconds.is_some_and(|d| d > 0) {
            self.err(
                source,
                id,
                field,
                "lock-delay is not built for semaphores yet",
            );
        }
    }

    /// Lock-delay (issue 53): a mitigation for resources that cannot refuse a stale write,
    /// so advisory classes only (a fenced resource refuses the late write itself, and a
    /// delay would only cost availability). At most the TTL: a longer delay than the time a
    /// holder is given to notice its loss buys nothing more. Durable and shared classes
    /// keep their waiters and holds in records the delay's marker does not cover yet.
    fn lock_delay(&mut self, source: &str, id: &str, spec: &LockClassSpec, ttl: u32, delay: u32) {
        let field = "spec.lockDelaySeconds";
        if spec.enforcement == Enforcement::Fenced && delay > 0 {
            self.err(
                source,
                id,
                field,
                "lock-delay is for advisory classes: a fenced class's resource refuses the late write itself",
            );
        }
        if delay > ttl {
            self.err(
                source,
                id,
                field,
                format!("{delay} is above the class's TTL ({ttl} s): 0 to the TTL"),
            );
        }
        if delay > 0 && spec.fairness == Fairness::Durable {
            self.err(
                source,
                id,
                field,
                "lock-delay needs fairness: memory (durable queues are not delayed yet)",
            );
        }
        if delay > 0 && spec.shared {
            self.err(
                source,
                id,
                field,
                "lock-delay is not built for shared classes yet",
            );
        }
    }

    /// ADR-01, 17: a class is fenced only by an unexpired PauseTestResult for this class,
    /// this resource and this schema version; a result for another resource, or for the
    /// version before a change of the write path, is evidence about something else.
    fn fenced_by_its_result(
        &mut self,
        source: &str,
        id: &str,
        name: &str,
        spec: &LockClassSpec,
        results: &[(String, String, PauseTestResultSpec)],
        today: Date,
    ) {
        let (Some(resource), Some(version)) = (&spec.resource, &spec.schema_version) else {
            let (field, what) = match spec.resource {
                None => ("spec.resource", "the resource its tokens are checked by"),
                Some(_) => ("spec.schemaVersion", "that resource's schema version"),
            };
            self.err(
                source,
                id,
                field,
                format!(
                    "class {name} is fenced: it must name {what}, as its PauseTestResult does (ADR-17)"
                ),
            );
            return;
        };
        let current = |r: &PauseTestResultSpec| {
            Date::parse(&r.passed_at).is_some_and(|p| {
                Date::parse(&r.expires)
                    .is_some_and(|e| e >= today && p <= today && e <= p.plus_one_year())
            })
        };
        let mine = || {
            results
                .iter()
                .map(|(_, _, r)| r)
                .filter(|r| r.class == name)
        };
        if mine().any(|r| current(r) && &r.resource == resource && &r.schema_version == version) {
            return;
        }
        // Say what there is instead, so the owner sees a stale or foreign result for what it is.
        let instead = mine()
            .find(|r| current(r))
            .map(|r| {
                format!(
                    " (the unexpired one for this class is for {} at schema version {})",
                    r.resource, r.schema_version
                )
            })
            .unwrap_or_default();
        self.err(
            source,
            id,
            "spec.enforcement",
            format!(
                "class {name} is fenced but has no unexpired PauseTestResult for {resource} at schema version {version}{instead}"
            ),
        );
    }
}
