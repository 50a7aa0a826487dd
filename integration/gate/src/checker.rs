//! The per-key safety checks on a recorded history (pure: history and store truth in,
//! violations out). What counts as a violation, per key:
//!
//! 1. Token order: a grant acknowledged before another grant was requested carries a
//!    smaller token. Uniqueness: two sessions never get the same token, whenever they ask.
//! 2. Backed: every acknowledged token's revision is the create revision of that key's
//!    holder record in etcd (a grant is a committed transaction, never a notification),
//!    written on the grantee's own session lease, naming the identity of the grantee's
//!    certificate, and the token's epoch is the epoch the store was in at that revision.
//! 3. Exclusion: two acknowledged holds of one key never overlap in real time, unless one
//!    of them had been taken away by the service first (its session ended or an epoch
//!    advance deleted it, per etcd's own history) before the other was granted.
//! 4. Fences: a fenced resource (the in-test register, the PostgreSQL reference fence)
//!    never accepts a write with a lower token than a write it accepted earlier; the
//!    PostgreSQL fence is strict (`fence < $token`), so it never accepts one token twice.
//! 5. Releases: an acknowledged release ended a hold that was live (its holder record was
//!    deleted, and not by the store revoking it first), at the revision the arbiter names
//!    (`released_at_revision`); a release of a hold that was never deleted is not refused
//!    STALE_TOKEN.
//! 6. Attacks: no call of the attacker on another client's key, session or token, or around
//!    the edge, succeeds.
//! 7. Shared holds (a `shared: true` class): the exclusion of 3 holds an exclusive hold
//!    against every other, and shared holds overlap freely; `shared_rules.rs` adds the
//!    reader–writer rules the store shows (no shared hold made while a writer waits) and
//!    the register's reads.
//! 8. Semaphores (a `permits: N` class, `semaphore.rs`): the exclusion of 3 per permit
//!    (one holder per permit), at most N holders at once, every permit numbered below N
//!    and backed by that permit's record; from the store log, never more than N permit
//!    records of a key, nor two on one session. The fences of 4 per (key, permit). Tokens
//!    are held to 1 across the key, which covers each permit's.
//! 9. Store identity: every holder record in etcd's history names the identity of the
//!    certificate that acquired it: the identity that opened the session (lease) it is
//!    written on, and one that asked for that key. Checked from the store's side, so a grant
//!    nobody was told about (an attack whose answer was lost) counts too.
//!
//! Operations with unknown outcome constrain nothing: an unacknowledged grant is no hold.

use super::history::{Kind, Op};
use super::store_log::StoreTruth;
use crate::store_log::lock_key_of;
pub use crate::violation::{Violation, revision};
use lock_config::FencingToken;
use lock_integration::registry::gate_client_identity;
use lock_store::layout::HOLDER_PREFIX;
use std::collections::BTreeMap;

/// Every check, over every key.
pub fn check(ops: &[Op], truth: &StoreTruth) -> Vec<Violation> {
    let mut out = check_keys(ops, truth, &|c| gate_client_identity(c as usize));
    attacks(ops, &mut out);
    sets(ops, &mut out);
    crate::shared_rules::check(ops, truth, &mut out);
    crate::semaphore::check_store(truth, &mut out);
    store_identity(ops, truth, &mut out);
    renewals(ops, truth, &mut out);
    out
}

/// A set (AcquireAll) is one grant: every key of it acknowledged with one token. Each
/// key's part is checked as its own hold by the per-key checks (order, backing by the
/// store, exclusion, linearizability); this adds that they were one transaction.
fn sets(ops: &[Op], out: &mut Vec<Violation>) {
    let mut tokens: BTreeMap<(u32, u64), Vec<(&str, u64)>> = BTreeMap::new();
    for op in ops.iter().filter(|o| o.kind == Kind::Acquire && o.ok()) {
        if let (Some(set), Some(key), Some(token)) = (op.set, op.key.as_deref(), op.token) {
            tokens
                .entry((op.client, set))
                .or_default()
                .push((key, token));
        }
    }
    for ((client, _), parts) in tokens {
        if parts.windows(2).any(|w| w[0].1 != w[1].1) {
            out.push(Violation {
                check: "set",
                key: parts.first().map(|p| p.0.to_owned()).unwrap_or_default(),
                detail: format!(
                    "client {client}'s set was granted with more than one token: {:?}",
                    parts
                        .iter()
                        .map(|(k, t)| format!("{k} {}", show(*t)))
                        .collect::<Vec<_>>()
                ),
            });
        }
    }
}

/// A renewal answered "renewed" must have found the session alive: one asked after the
/// store was seen to end the session (its record deleted) is a client told its session,
/// and every hold on it, lives on when they are gone. The watcher sees a delete after it
/// happened, so "asked after it was seen" is after it happened.
fn renewals(ops: &[Op], truth: &StoreTruth, out: &mut Vec<Violation>) {
    for op in ops.iter().filter(|o| o.kind == Kind::KeepAlive && o.ok()) {
        let Some(session) = op.session else { continue };
        if let Some(&ended) = truth.session_end_seen.get(&session)
            && op.invoked > ended
        {
            out.push(Violation {
                check: "renewal",
                key: String::new(),
                detail: format!(
                    "client {}'s session {session:x} was renewed {} ms after the store ended it",
                    op.client,
                    (op.invoked - ended) / 1_000_000
                ),
            });
        }
    }
}

/// The per-key checks alone (tokens, store backing, exclusion, releases, fences): what
/// the shard gate runs per cluster. `identity` names client `c`'s certificate identity
/// (the shard gate's clients are not the main gate's).
pub fn check_keys(
    ops: &[Op],
    truth: &StoreTruth,
    identity: &dyn Fn(u32) -> String,
) -> Vec<Violation> {
    let mut by_key: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in ops {
        if let Some(k) = op.key.as_deref() {
            by_key.entry(k).or_default().push(op);
        }
    }
    let mut out = Vec::new();
    for (key, ops) in by_key {
        let grants: Vec<&Op> = ops
            .iter()
            .copied()
            .filter(|o| o.kind == Kind::Acquire && o.ok() && o.token.is_some())
            .collect();
        token_order(key, &grants, &ops, truth, &mut out);
        token_unique(key, &grants, &mut out);
        backed(key, &grants, truth, identity, &mut out);
        match crate::semaphore::permits(key) {
            Some(n) => crate::semaphore::check_key(key, n, &ops, &grants, truth, &mut out),
            None => exclusion(key, &ops, truth, &mut out),
        }
        releases(key, &ops, truth, &mut out);
        for kind in [Kind::Write, Kind::PgWrite] {
            // A semaphore's resource fences per (key, permit); every other key's writes
            // carry no permit and are one fence.
            let mut accepted: BTreeMap<Option<u32>, Vec<&Op>> = BTreeMap::new();
            for o in ops.iter().copied().filter(|o| o.kind == kind && o.ok()) {
                accepted.entry(o.permit).or_default().push(o);
            }
            for (permit, accepted) in accepted {
                fence_order(key, kind, permit, &accepted, &mut out);
                if kind == Kind::PgWrite {
                    fence_strict(key, permit, &accepted, &mut out);
                }
            }
        }
    }
    out
}

fn attacks(ops: &[Op], out: &mut Vec<Violation>) {
    for a in ops.iter().filter(|o| o.kind == Kind::Attack && o.ok()) {
        out.push(Violation {
            check: "attack",
            key: a.key.clone().unwrap_or_default(),
            detail: format!(
                "client {}'s {} succeeded",
                a.client,
                a.via.as_deref().unwrap_or("attack")
            ),
        });
    }
}

fn store_identity(ops: &[Op], truth: &StoreTruth, out: &mut Vec<Violation>) {
    let mut owner: BTreeMap<i64, u32> = BTreeMap::new();
    let mut asked = std::collections::BTreeSet::new();
    for op in ops {
        match op.kind {
            Kind::Open if op.ok() => {
                if let Some(s) = op.session {
                    owner.insert(s, op.client);
                }
            }
            Kind::Acquire if !op.failed() => {
                if let Some(k) = &op.key {
                    asked.insert((k.as_str(), gate_client_identity(op.client as usize)));
                }
            }
            _ => {}
        }
    }
    let mut holds: Vec<_> = truth.hold_identity.iter().collect();
    holds.sort();
    for ((hkey, rev), who) in holds {
        let key = lock_key_of(hkey).unwrap_or(hkey.as_str());
        let lease = truth.hold_lease.get(&(hkey.clone(), *rev));
        let problem = match lease.and_then(|l| owner.get(l)) {
            Some(c) if gate_client_identity(*c as usize) != *who => Some(format!(
                "is on the session of client {c} ({}), but names {who}",
                gate_client_identity(*c as usize)
            )),
            _ if !asked.contains(&(key, who.clone())) => {
                Some(format!("names {who}, who never asked for this key"))
            }
            _ => None,
        };
        if let Some(problem) = problem {
            out.push(Violation {
                check: "store-identity",
                key: key.to_owned(),
                detail: format!("the holder record created at revision {rev} {problem}"),
            });
        }
    }
}

/// Sweeps `later` in invocation order against the largest token among `earlier` already
/// acknowledged; calls `judge(max_earlier_op, later_op)` for each.
fn sweep<'a>(ops: &[&'a Op], mut judge: impl FnMut(&'a Op, &'a Op)) {
    let mut by_return: Vec<&Op> = ops.to_vec();
    by_return.sort_by_key(|o| o.returned());
    let mut by_invoke: Vec<&Op> = ops.to_vec();
    by_invoke.sort_by_key(|o| o.invoked);
    let mut i = 0;
    let mut best: Option<&Op> = None;
    for y in by_invoke {
        while let Some(x) = by_return.get(i) {
            match x.returned() {
                Some(r) if r < y.invoked => {
                    if best.is_none_or(|b| x.token > b.token) {
                        best = Some(*x);
                    }
                    i += 1;
                }
                _ => break,
            }
        }
        if let Some(b) = best {
            judge(b, y);
        }
    }
}

/// A grant's answer may be a re-answer: a session that asks again for a key it still
/// holds (its release failed, or the answer of its grant was lost) is given that grant
/// back. Such an answer is not a new grant, and token order does not apply to it; with
/// shared holds others may have been granted since. It is known by an earlier answer of
/// the same token to the same session, or by an earlier call of the session with no
/// answer and the store having made the record before this call was made.
fn token_order(
    key: &str,
    grants: &[&Op],
    asked: &[&Op],
    truth: &StoreTruth,
    out: &mut Vec<Violation>,
) {
    let reanswer = |y: &Op| {
        let t = y.token.unwrap_or(0);
        let answered_before = grants.iter().any(|g| {
            g.session == y.session && g.token == y.token && g.returned() < Some(y.invoked)
        });
        // Or an earlier call of this session whose answer was lost made it.
        let made_before = truth
            .made_seen(key, revision(t))
            .is_some_and(|made| made < y.invoked)
            && asked.iter().any(|a| {
                a.kind == Kind::Acquire
                    && a.session == y.session
                    && a.invoked < y.invoked
                    && a.unknown()
            });
        answered_before || made_before
    };
    sweep(grants, |x, y| {
        let (tx, ty) = (x.token.unwrap_or(0), y.token.unwrap_or(0));
        if tx > ty && !reanswer(y) {
            out.push(Violation {
                check: "token-order",
                key: key.into(),
                detail: format!(
                    "client {} was granted {} after client {} had been granted {} (tokens must grow)",
                    y.client,
                    show(ty),
                    x.client,
                    show(tx)
                ),
            });
        }
    });
}

/// One token, one session: whatever the timing (concurrent grants included).
fn token_unique(key: &str, grants: &[&Op], out: &mut Vec<Violation>) {
    let mut first: BTreeMap<u64, &Op> = BTreeMap::new();
    let mut reported = std::collections::BTreeSet::new();
    for g in grants {
        let t = g.token.unwrap_or(0);
        match first.get(&t) {
            Some(f) if f.session != g.session && reported.insert(t) => out.push(Violation {
                check: "token-unique",
                key: key.into(),
                detail: format!(
                    "token {} granted to two sessions (clients {} and {})",
                    show(t),
                    f.client,
                    g.client
                ),
            }),
            Some(_) => {}
            None => {
                first.insert(t, g);
            }
        }
    }
}

fn backed(
    key: &str,
    grants: &[&Op],
    truth: &StoreTruth,
    identity: &dyn Fn(u32) -> String,
    out: &mut Vec<Violation>,
) {
    for g in grants {
        let t = g.token.unwrap_or(0);
        let rev = revision(t);
        let problem = if !truth.backed(key, rev) {
            Some(format!("no holder record was created at revision {rev}"))
        } else if let Some(lease) = truth.lease_of(key, rev)
            && Some(lease) != g.session
        {
            Some(format!(
                "the holder record at revision {rev} is on lease {lease:x}, not the grantee's session"
            ))
        } else if let Some(who) = truth.identity_of(key, rev)
            && who != identity(g.client)
        {
            Some(format!(
                "the holder record at revision {rev} names {who}, not the identity of the certificate that asked"
            ))
        } else if let Some(epoch) = truth.epoch_at(rev)
            && FencingToken::from_u64(t).ok().map(|t| u32::from(t.epoch())) != Some(epoch)
        {
            Some(format!(
                "the store was in epoch {epoch} at revision {rev}, not the token's"
            ))
        } else {
            None
        };
        if let Some(problem) = problem {
            out.push(Violation {
                check: "backed",
                key: key.into(),
                detail: format!("client {} was granted {}, but {problem}", g.client, show(t)),
            });
        }
    }
}

/// What a release's answer says about the hold it names, against the store's history;
/// and every handoff (the next holder's record written over a hold) was a release of that
/// hold that was not refused, made before the store showed it.
fn releases(key: &str, ops: &[&Op], truth: &StoreTruth, out: &mut Vec<Violation>) {
    // The key's holder record, or (a semaphore) each of its permits' records: a release
    // hands a permit on by writing over it.
    let mut handed: Vec<&(String, i64)> = truth
        .handed_off
        .iter()
        .filter(|(k, _)| k.starts_with(HOLDER_PREFIX) || crate::store_log::permit_of(k).is_some())
        .filter(|(k, _)| lock_key_of(k) == Some(key))
        .collect();
    handed.sort();
    for (hkey, rev) in handed {
        let by = truth
            .hold_seen
            .get(&(hkey.clone(), *rev))
            .and_then(|(_, gone)| *gone)
            .unwrap_or(u64::MAX);
        let released = ops.iter().any(|r| {
            r.kind == Kind::Release
                && !r.failed()
                && r.invoked <= by
                && r.token.map(revision) == Some(*rev)
        });
        if !released {
            out.push(Violation {
                check: "release",
                key: key.into(),
                detail: format!(
                    "the hold made at revision {rev} was handed on to the next holder, but no release of it was made (or it was refused)"
                ),
            });
        }
    }
    for r in ops.iter().filter(|o| o.kind == Kind::Release) {
        let Some(t) = r.token else { continue };
        let rev = revision(t);
        let Some(deleted) = truth.deleted_at(key, rev) else {
            // Not a hold the store ever had: the grant checks speak for it.
            continue;
        };
        let problem = if r.ok() {
            match (deleted, truth.revoked_at(key, rev)) {
                (None, _) => {
                    Some("acknowledged, but the holder record was never deleted".to_owned())
                }
                (Some(_), Some(at)) => Some(format!(
                    "acknowledged, but the store had already revoked the hold at revision {at}"
                )),
                // The arbiter names the revision of its delete: it must be the one that
                // ended this hold.
                (Some(d), None) => r.rev.filter(|said| *said != d).map(|said| {
                    format!(
                        "acknowledged as the delete at revision {said}, but the hold was deleted at {d}"
                    )
                }),
            }
        } else if r.why.as_deref() == Some("STALE_TOKEN") && deleted.is_none() {
            Some("refused STALE_TOKEN, though the hold was never deleted (still live)".to_owned())
        } else {
            None
        };
        if let Some(problem) = problem {
            out.push(Violation {
                check: "release",
                key: key.into(),
                detail: format!("client {}'s release of {}: {problem}", r.client, show(t)),
            });
        }
    }
}

/// A hold as its client saw it: from the grant's acknowledgement until it invoked the
/// release (or the end of the run).
#[derive(Debug, Clone)]
pub(crate) struct Hold {
    pub(crate) client: u32,
    pub(crate) token: u64,
    pub(crate) from: u64,
    pub(crate) until: u64,
    /// Given back to a client whose release of this very grant had no answer: that
    /// release may commit later (a frozen leader's proposal applied after it resumed) and
    /// end this hold then, with no call of the client's to mark it.
    pending_release: bool,
    /// A shared hold: it may overlap other shared holds.
    shared: bool,
    /// A semaphore's hold: the permit it was granted.
    pub(crate) permit: Option<u32>,
}

pub(crate) fn holds(ops: &[&Op]) -> Vec<Hold> {
    let mut per_client: BTreeMap<u32, Vec<&Op>> = BTreeMap::new();
    for op in ops {
        per_client.entry(op.client).or_default().push(op);
    }
    let mut out = Vec::new();
    for (client, mut ops) in per_client {
        ops.sort_by_key(|o| o.invoked);
        let mut open: Option<Hold> = None;
        // Tokens this client sent a release for and heard nothing back.
        let mut unanswered: Vec<u64> = Vec::new();
        for op in ops {
            match op.kind {
                Kind::Acquire if op.ok() => {
                    let token = op.token.unwrap_or(0);
                    match &open {
                        // A retried acquire that returned the grant already held.
                        Some(h) if h.token == token => {}
                        _ => {
                            if let Some(h) = open.take() {
                                out.push(h);
                            }
                            open = Some(Hold {
                                client,
                                token,
                                from: op.returned().unwrap_or(op.invoked),
                                until: u64::MAX,
                                pending_release: unanswered.contains(&token),
                                shared: op.shared,
                                permit: op.permit,
                            });
                        }
                    }
                }
                Kind::Release if open.as_ref().is_some_and(|h| Some(h.token) == op.token) => {
                    if op.unknown()
                        && let Some(t) = op.token
                    {
                        unanswered.push(t);
                    }
                    if let Some(mut h) = open.take() {
                        h.until = op.invoked;
                        out.push(h);
                    }
                }
                _ => {}
            }
        }
        out.extend(open);
    }
    out
}

fn exclusion(key: &str, ops: &[&Op], truth: &StoreTruth, out: &mut Vec<Violation>) {
    overlaps(key, holds(ops), truth, "", out);
}

/// Two holds that may not overlap (of one key, or of one permit of a semaphore's key, as
/// `whose` says) never did in real time, unless one had been taken away first (see
/// [`excused`]). Shared holds overlap one another freely.
pub(crate) fn overlaps(
    key: &str,
    mut hs: Vec<Hold>,
    truth: &StoreTruth,
    whose: &str,
    out: &mut Vec<Violation>,
) {
    hs.sort_by_key(|h| h.from);
    for (i, a) in hs.iter().enumerate() {
        for b in hs.iter().skip(i + 1) {
            if b.from >= a.until {
                continue;
            }
            if a.token == b.token || (a.shared && b.shared) {
                continue;
            }
            if !excused(key, a, b, truth) {
                out.push(Violation {
                    check: "exclusion",
                    key: key.into(),
                    detail: format!(
                        "clients {} ({}) and {} ({}) held{whose} at once for {:.1} ms and neither hold had been revoked by the store first",
                        a.client,
                        show(a.token),
                        b.client,
                        show(b.token),
                        (a.until.min(b.until) - b.from) as f64 / 1e6
                    ),
                });
            }
        }
    }
}

/// Whether holds `a` and `b` of `key`, overlapping in real time, are explained by the
/// store: one of them had been taken away (its session ended, an epoch advance or a force
/// release deleted it) before the other was granted, per etcd's own history.
pub(crate) fn excused(key: &str, a: &Hold, b: &Hold, truth: &StoreTruth) -> bool {
    let (ra, rb) = (revision(a.token), revision(b.token));
    // A hold given back while its own release was unanswered ended when the store says
    // it did, if that release committed late (the store's end, at or before the other
    // grant's revision, is the proof).
    let released_late = |h: &Hold, r: i64, other: i64| {
        h.pending_release
            && truth
                .deleted_at(key, r)
                .flatten()
                .is_some_and(|d| d <= other)
    };
    let a_gone_first =
        truth.revoked_at(key, ra).is_some_and(|d| d < rb) || released_late(a, ra, rb);
    let b_gone_first =
        truth.revoked_at(key, rb).is_some_and(|d| d < ra) || released_late(b, rb, ra);
    a_gone_first || b_gone_first
}

/// `permit`: the semaphore permit whose fence this is (None: the key's one fence).
fn fence_order(
    key: &str,
    kind: Kind,
    permit: Option<u32>,
    accepted: &[&Op],
    out: &mut Vec<Violation>,
) {
    let on = permit.map_or(String::new(), |p| format!(" on permit {p}"));
    sweep(accepted, |x, y| {
        let (tx, ty) = (x.token.unwrap_or(0), y.token.unwrap_or(0));
        if tx > ty {
            out.push(Violation {
                check: "fence",
                key: key.into(),
                detail: format!(
                    "{kind:?}{on} accepted {} from client {} after accepting {} from client {}",
                    show(ty),
                    y.client,
                    show(tx),
                    x.client
                ),
            });
        }
    });
}

/// The PostgreSQL reference fence is `fence < $token`: one token is accepted at most once.
fn fence_strict(key: &str, permit: Option<u32>, accepted: &[&Op], out: &mut Vec<Violation>) {
    let on = permit.map_or(String::new(), |p| format!(" on permit {p}"));
    let mut seen: BTreeMap<u64, u32> = BTreeMap::new();
    for w in accepted {
        let t = w.token.unwrap_or(0);
        if let Some(first) = seen.insert(t, w.client) {
            out.push(Violation {
                check: "fence",
                key: key.into(),
                detail: format!(
                    "PgWrite{on} accepted {} twice (clients {first} and {}): the reference fence is strict",
                    show(t),
                    w.client
                ),
            });
        }
    }
}

pub(crate) fn show(token: u64) -> String {
    match FencingToken::from_u64(token) {
        Ok(t) => format!("epoch {} revision {}", t.epoch(), t.revision()),
        Err(_) => format!("malformed token {token:#x}"),
    }
}

#[cfg(test)]
mod tests;
