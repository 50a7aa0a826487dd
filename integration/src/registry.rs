//! Registries for tests: the dev registry plus a short-TTL fenced class and test identities.
//!
//! The fenced class `pay-fast` (TTL 5 s) lets expiry tests run in seconds. "Fenced" needs a
//! PauseTestResult (ADR-17); the one written here is a labelled test fixture dated today,
//! generated per run so it never expires, and never part of a deployable registry.

use crate::paths::dev_registry;
use std::path::{Path, PathBuf};

pub const FAST_PREFIX: &str = "pay/fast";
/// A fenced, short-TTL class with `fairness: durable`.
pub const FAIR_PREFIX: &str = "pay/fair";
pub const FAST_TTL: u32 = 5;
/// A fenced class with a 30 s TTL: hand-overs measured against it show a release was
/// explicit, not the lease running out.
pub const SLOW_PREFIX: &str = "pay/slow";
/// A `shared: true` class (reader–writer holds), TTL [`FAST_TTL`].
pub const SHARED_PREFIX: &str = "pay/shared";
/// A `shared: true` class with the bench class's TTL (60 s: a bench cell renews nothing).
pub const BENCH_SHARED_PREFIX: &str = "pay/bench-shared";
pub const SLOW_TTL: u32 = 30;
/// A fenced semaphore class of [`SEM_PERMITS`] permits, TTL [`FAST_TTL`].
pub const SEM_PREFIX: &str = "pay/sem";
pub const SEM_PERMITS: u32 = 3;
/// Advisory classes with a 30 s TTL (the advisory floor): `pay-delay` has a lock-delay of
/// [`DELAY_SECONDS`], `pay-nodelay` is the same class without one (the control).
pub const DELAY_PREFIX: &str = "pay/delay";
pub const NODELAY_PREFIX: &str = "pay/nodelay";
pub const DELAY_SECONDS: u32 = 10;

/// SPIFFE ID of test waiter `i` (granted `pay/fast`, `pay/fair`, `pay/slow`).
pub fn waiter_id(i: usize) -> String {
    format!("spiffe://dev.lock.local/ns/test/sa/w{i}")
}

pub const WAITERS: usize = 8;

/// The release gate's classes: short TTL so a frozen holder outlives its session.
pub const GATE_PREFIX: &str = "pay/gate";
pub const GATE_DURABLE_PREFIX: &str = "pay/gate-fair";
pub const GATE_TTL: u32 = 5;
/// The release gate's semaphore class (issue 53): [`GATE_SEM_PERMITS`] permits per key,
/// TTL [`GATE_TTL`], fenced; granted to the gate's clients.
pub const GATE_SEM_PREFIX: &str = "pay/gate-sem";
pub const GATE_SEM_PERMITS: u32 = 3;
/// Identities of gate (and benchmark) clients `1..=GATE_CLIENTS`.
pub const GATE_CLIENTS: usize = 64;
/// The benchmark's class: long TTL, so sessions outlive a cell without renewals.
pub const BENCH_PREFIX: &str = "pay/bench";
/// The scale benchmark's class: sessions renew every 5 s (TTL/3), as the design sizes them.
pub const SCALE_PREFIX: &str = "pay/scale";
pub const SCALE_TTL: u32 = 15;

/// SPIFFE ID of gate client `i`.
pub fn gate_id(i: usize) -> String {
    format!("spiffe://dev.lock.local/ns/gate/sa/c{i}")
}

/// The identity slot of the gate's client `c`: clients `2k-1` and `2k` are two replicas of
/// one Deployment (issue 32), sharing the identity of slot `2k-1`, each with its own
/// instance; ids from [`GATE_CLIENTS`] on (the attacker) keep their own.
pub fn gate_replica_slot(c: usize) -> usize {
    if c >= GATE_CLIENTS || c % 2 == 1 || c == 0 {
        c
    } else {
        c - 1
    }
}

/// The SPIFFE ID the gate's client `c` runs as (its replica slot's).
pub fn gate_client_identity(c: usize) -> String {
    gate_id(gate_replica_slot(c))
}

/// The `lock-instance` the gate's client `c` sends: one per logical process.
pub fn gate_instance(c: usize) -> String {
    format!("gate-c{c}")
}

/// An identity with a small rate budget: burst 3, then 1 request per second.
pub const LIMITED: &str = "spiffe://dev.lock.local/ns/test/sa/limited";
/// An identity with a deep bucket refilled slowly: burst [`DEEP_BURST`], then 1 per second.
/// A kept bucket and a fresh one differ by the burst for [`DEEP_BURST`] seconds after it is
/// emptied, so a test can tell them apart however long a reload takes within that.
pub const DEEP_LIMITED: &str = "spiffe://dev.lock.local/ns/test/sa/deep-limited";
pub const DEEP_BURST: u32 = 60;
/// An identity whose ValidateToken budget ([`VALIDATE_BURST`], then 1 per second) is far
/// smaller than its grant budget ([`VALIDATE_LIMITED_RATE_BURST`], then 1 per second).
pub const VALIDATE_LIMITED: &str = "spiffe://dev.lock.local/ns/test/sa/validate-limited";
pub const VALIDATE_BURST: u32 = 2;
pub const VALIDATE_LIMITED_RATE_BURST: u32 = 20;

/// Writes the test registry into `dir` and returns its path.
pub fn write_test_registry(dir: &Path) -> anyhow::Result<PathBuf> {
    let out = dir.join("registry");
    std::fs::create_dir_all(&out)?;
    for entry in std::fs::read_dir(dev_registry())? {
        let p = entry?.path();
        if let Some(name) = p.file_name() {
            std::fs::copy(&p, out.join(name))?;
        }
    }
    let today = lock_store::registry_files::today();
    // Valid for the year the records allow, not only today: a run that crosses midnight
    // (a long bench, a slow CI) restarts stacks on this registry after it (found when
    // `make bench`'s tmpfs stack, started at 00:07, refused the fixture dated the day before).
    let expires = today.plus_one_year();
    let mut text = format!(
        "apiVersion: lock.dev/v1alpha1
kind: LockClass
metadata: {{name: pay-fast}}
spec:
  namespace: pay
  prefixes: [{FAST_PREFIX}]
  purpose: correctness
  tier: entity
  enforcement: fenced
  resource: integration-test-fixture
  schemaVersion: \"0\"
  ttlSeconds: {FAST_TTL}
---
apiVersion: lock.dev/v1alpha1
kind: PauseTestResult
metadata: {{name: pay-fast-test-fixture}}
spec:
  class: pay-fast
  resource: integration-test-fixture
  schemaVersion: \"0\"
  passedAt: \"{today}\"
  expires: \"{expires}\"
---
apiVersion: lock.dev/v1alpha1
kind: LockClass
metadata: {{name: pay-fair}}
spec:
  namespace: pay
  prefixes: [{FAIR_PREFIX}]
  purpose: correctness
  tier: entity
  enforcement: fenced
  resource: integration-test-fixture
  schemaVersion: \"0\"
  ttlSeconds: {FAST_TTL}
  fairness: durable
---
apiVersion: lock.dev/v1alpha1
kind: PauseTestResult
metadata: {{name: pay-fair-test-fixture}}
spec:
  class: pay-fair
  resource: integration-test-fixture
  schemaVersion: \"0\"
  passedAt: \"{today}\"
  expires: \"{expires}\"
"
    );
    text.push_str(&format!(
        "---
apiVersion: lock.dev/v1alpha1
kind: LockClass
metadata: {{name: pay-sem}}
spec:
  namespace: pay
  prefixes: [{SEM_PREFIX}]
  purpose: correctness
  tier: entity
  enforcement: fenced
  resource: integration-test-fixture
  schemaVersion: \"0\"
  ttlSeconds: {FAST_TTL}
  permits: {SEM_PERMITS}
---
apiVersion: lock.dev/v1alpha1
kind: PauseTestResult
metadata: {{name: pay-sem-test-fixture}}
spec:
  class: pay-sem
  resource: integration-test-fixture
  schemaVersion: \"0\"
  passedAt: \"{today}\"
  expires: \"{expires}\"
"
    ));
    for (name, prefix, delay) in [
        ("pay-delay", DELAY_PREFIX, DELAY_SECONDS),
        ("pay-nodelay", NODELAY_PREFIX, 0),
    ] {
        text.push_str(&format!(
            "---
apiVersion: lock.dev/v1alpha1
kind: LockClass
metadata: {{name: {name}}}
spec:
  namespace: pay
  prefixes: [{prefix}]
  purpose: efficiency
  tier: entity
  enforcement: advisory
  ttlSeconds: {SLOW_TTL}
  lockDelaySeconds: {delay}
"
        ));
    }
    for i in 0..WAITERS {
        text.push_str(&format!(
            "---
apiVersion: lock.dev/v1alpha1
kind: LockGrant
metadata: {{name: test-w{i}}}
spec:
  spiffeId: {}
  prefixes: [{FAST_PREFIX}, {FAIR_PREFIX}, {SLOW_PREFIX}, {SHARED_PREFIX}, {DELAY_PREFIX}, {NODELAY_PREFIX}, {SEM_PREFIX}]
",
            waiter_id(i)
        ));
    }
    text.push_str(&format!(
        "---
apiVersion: lock.dev/v1alpha1
kind: LockGrant
metadata: {{name: test-limited}}
spec:
  spiffeId: {LIMITED}
  prefixes: [{FAST_PREFIX}]
  rate: {{perSecond: 1, burst: 3}}
---
apiVersion: lock.dev/v1alpha1
kind: LockGrant
metadata: {{name: test-deep-limited}}
spec:
  spiffeId: {DEEP_LIMITED}
  prefixes: [{FAST_PREFIX}]
  rate: {{perSecond: 1, burst: {DEEP_BURST}}}
"
    ));
    for (name, prefix, fairness, ttl, shared) in [
        ("pay-gate", GATE_PREFIX, "memory", GATE_TTL, false),
        (
            "pay-gate-fair",
            GATE_DURABLE_PREFIX,
            "durable",
            GATE_TTL,
            false,
        ),
        ("pay-bench", BENCH_PREFIX, "memory", 60, false),
        ("pay-scale", SCALE_PREFIX, "memory", SCALE_TTL, false),
        ("pay-slow", SLOW_PREFIX, "memory", SLOW_TTL, false),
        ("pay-shared", SHARED_PREFIX, "memory", FAST_TTL, true),
        ("pay-bench-shared", BENCH_SHARED_PREFIX, "memory", 60, true),
    ] {
        text.push_str(&format!(
            "---
apiVersion: lock.dev/v1alpha1
kind: LockClass
metadata: {{name: {name}}}
spec:
  namespace: pay
  prefixes: [{prefix}]
  purpose: correctness
  tier: entity
  enforcement: fenced
  resource: integration-test-fixture
  schemaVersion: \"0\"
  ttlSeconds: {ttl}
  fairness: {fairness}
  shared: {shared}
---
apiVersion: lock.dev/v1alpha1
kind: PauseTestResult
metadata: {{name: {name}-test-fixture}}
spec:
  class: {name}
  resource: integration-test-fixture
  schemaVersion: \"0\"
  passedAt: \"{today}\"
  expires: \"{expires}\"
"
        ));
    }
    text.push_str(&format!(
        "---
apiVersion: lock.dev/v1alpha1
kind: LockClass
metadata: {{name: pay-gate-sem}}
spec:
  namespace: pay
  prefixes: [{GATE_SEM_PREFIX}]
  purpose: correctness
  tier: entity
  enforcement: fenced
  resource: integration-test-fixture
  schemaVersion: \"0\"
  ttlSeconds: {GATE_TTL}
  permits: {GATE_SEM_PERMITS}
---
apiVersion: lock.dev/v1alpha1
kind: PauseTestResult
metadata: {{name: pay-gate-sem-test-fixture}}
spec:
  class: pay-gate-sem
  resource: integration-test-fixture
  schemaVersion: \"0\"
  passedAt: \"{today}\"
  expires: \"{expires}\"
"
    ));
    for i in 1..=GATE_CLIENTS {
        text.push_str(&format!(
            "---
apiVersion: lock.dev/v1alpha1
kind: LockGrant
metadata: {{name: gate-c{i}}}
spec:
  spiffeId: {}
  prefixes: [{GATE_PREFIX}, {GATE_DURABLE_PREFIX}, {BENCH_PREFIX}, {SCALE_PREFIX}, {SHARED_PREFIX}, {BENCH_SHARED_PREFIX}, {SEM_PREFIX}, {GATE_SEM_PREFIX}]
",
            gate_id(i)
        ));
    }
    text.push_str(&format!(
        "---
apiVersion: lock.dev/v1alpha1
kind: LockGrant
metadata: {{name: test-validate-limited}}
spec:
  spiffeId: {VALIDATE_LIMITED}
  prefixes: [{FAST_PREFIX}]
  rate: {{perSecond: 1, burst: {VALIDATE_LIMITED_RATE_BURST}}}
  validateRate: {{perSecond: 1, burst: {VALIDATE_BURST}}}
"
    ));
    std::fs::write(out.join("zz-test.yaml"), text)?;
    Ok(out)
}

/// The dev registry copied into `dir` with one more reviewed grant (`spiffe_id` may lock
/// under `prefix`): what security edits before a `lockctl grants push`.
pub fn dev_registry_with_grant(dir: &Path, spiffe_id: &str, prefix: &str) -> anyhow::Result<()> {
    for e in std::fs::read_dir(dev_registry())? {
        let p = e?.path();
        if let Some(name) = p.file_name() {
            std::fs::copy(&p, dir.join(name))?;
        }
    }
    std::fs::write(
        dir.join("extra.yaml"),
        format!(
            "apiVersion: lock.dev/v1alpha1\nkind: LockGrant\nmetadata: {{name: extra-grant}}\nspec:\n  spiffeId: {spiffe_id}\n  prefixes: [{prefix}]\n"
        ),
    )?;
    Ok(())
}

/// The environment a client's own stack suite reads (the Go and Java clients'): the
/// endpoint, two test identities' SVIDs (`me`, `other`), the edge's SPIFFE ID, the test
/// registry's prefixes and TTL. LOCK_INSTANCE is left to each test.
pub fn client_suite_env(
    endpoint: &str,
    me: &crate::pki::SvidFiles,
    other: &crate::pki::SvidFiles,
) -> Vec<(&'static str, std::ffi::OsString)> {
    vec![
        ("LOCK_ENDPOINT", endpoint.into()),
        ("LOCK_SVID", me.cert.clone().into()),
        ("LOCK_SVID_KEY", me.key.clone().into()),
        ("LOCK_CA", me.ca.clone().into()),
        ("LOCK_OTHER_SVID", other.cert.clone().into()),
        ("LOCK_OTHER_SVID_KEY", other.key.clone().into()),
        ("LOCK_SERVER_ID", crate::pki::ENVOY_ID.into()),
        ("LOCK_TEST_PREFIX", FAST_PREFIX.into()),
        ("LOCK_TEST_SLOW_PREFIX", SLOW_PREFIX.into()),
        ("LOCK_TEST_SHARED_PREFIX", SHARED_PREFIX.into()),
        ("LOCK_TEST_SEM_PREFIX", SEM_PREFIX.into()),
        ("LOCK_TEST_SEM_PERMITS", SEM_PERMITS.to_string().into()),
        ("LOCK_TEST_TTL", FAST_TTL.to_string().into()),
    ]
}
