//! Linearizability of each key's history against a sequential fenced mutex, and for a
//! `shared: true` class's keys a fenced reader–writer lock (shared holds beside the
//! exclusive one; `MutexState::readers`), and for a semaphore's keys (`permits: N`) a fenced
//! semaphore (`permits.rs`): the same operations and evidence, another sequential spec.
//!
//! The gate decides each key with the Wing–Gong–Lowe search with memoisation (`wgl.rs`):
//! stateright's `LinearizabilityTester` (kept below as the reference, and checked to agree
//! with it on thousands of random small histories) has no memo of explored configurations,
//! so past a handful of operations of unknown outcome it ran out of budget and left a fifth
//! of the keys unchecked. Per-key histories are independent (P-compositionality), and each
//! is checked whole from a known free state. The store log adds what the clients cannot
//! see: an epoch advance and a session's end are placed at their commit revisions, so they
//! fall between the grants committed before and after them. A step budget still bounds the
//! search; a key that exhausts it is reported as unchecked, never as passed.

pub mod permits;
pub mod wgl;

use super::history::{Kind, Op, revision_bits};
use super::store_log::StoreTruth;
use stateright::semantics::{ConsistencyTester, LinearizabilityTester, SequentialSpec};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The sequential specification: one holder at a time, tokens that only grow.
#[derive(Clone, Debug)]
pub struct FencedMutex {
    /// (session, token); a token of None is a grant whose acknowledgement was lost.
    holder: Option<(i64, Option<u64>)>,
    last: u64,
    /// Steps left in the search budget (shared by every clone).
    budget: Arc<AtomicU64>,
    /// Set once an operation was placed after the budget ran out: no later step is valid,
    /// so the search unwinds instead of trying every order of the remaining operations.
    spent: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MutexOp {
    Acquire {
        session: i64,
    },
    Release {
        session: i64,
        token: u64,
    },
    /// The session ended (expiry or close): its hold is gone.
    Expire {
        session: i64,
    },
    /// An epoch advance deleted every hold.
    Revoke,
    /// A shared hold's acquire (a `shared: true` class): granted while no exclusive hold
    /// stands, beside other shared holds. Its refusals are left out of the model (a
    /// waiting writer's mark, which the model does not hold, refuses it too).
    AcquireShared {
        session: i64,
    },
    ReleaseShared {
        session: i64,
        token: u64,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MutexRet {
    Granted(u64),
    /// A semaphore's grant: the token and the permit (`AcquireResponse.permit`).
    GrantedPermit(u64, u32),
    /// HELD: someone else's session held it.
    Refused,
    /// LEAKED_HOLD: another session held it (a sibling of the caller's identity, which
    /// the model does not know apart from any other session) or the caller's own
    /// session held it in the other mode (a shared hold asked for exclusively).
    Leaked,
    Released,
    /// STALE_TOKEN: not the current grant.
    Stale,
    Done,
}

impl FencedMutex {
    fn new(budget: Arc<AtomicU64>) -> Self {
        Self {
            holder: None,
            last: 0,
            budget,
            spent: false,
        }
    }

    fn spend(&self) -> bool {
        self.budget
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1))
            .is_ok()
    }
}

impl SequentialSpec for FencedMutex {
    type Op = MutexOp;
    type Ret = MutexRet;

    /// Operations whose return was never seen: apply whatever effect they may have had.
    fn invoke(&mut self, op: &MutexOp) -> MutexRet {
        // Placements of unanswered operations count too: they are most of the search.
        if !self.spend() {
            self.spent = true;
        }
        match op {
            MutexOp::Acquire { session } => {
                if self.holder.is_none() {
                    self.holder = Some((*session, None));
                }
            }
            MutexOp::Release { session, token } => {
                if matches!(self.holder, Some((s, t)) if s == *session && t.is_none_or(|t| t == *token))
                {
                    self.holder = None;
                }
            }
            MutexOp::Expire { session } => {
                if matches!(self.holder, Some((s, _)) if s == *session) {
                    self.holder = None;
                }
            }
            MutexOp::Revoke => self.holder = None,
            // The reference knows the exclusive mutex only (the WGL model below is the
            // one that checks shared keys).
            MutexOp::AcquireShared { .. } | MutexOp::ReleaseShared { .. } => {}
        }
        MutexRet::Done
    }

    fn is_valid_step(&mut self, op: &MutexOp, ret: &MutexRet) -> bool {
        if self.spent || !self.spend() {
            return false;
        }
        match (op, ret) {
            (MutexOp::Acquire { session }, MutexRet::Granted(t)) => match self.holder {
                Some((s, Some(held))) if s == *session => held == *t,
                Some((s, None)) if s == *session => {
                    self.holder = Some((s, Some(*t)));
                    self.last = self.last.max(*t);
                    true
                }
                None if *t > self.last => {
                    self.holder = Some((*session, Some(*t)));
                    self.last = *t;
                    true
                }
                _ => false,
            },
            (MutexOp::Acquire { session }, MutexRet::Refused | MutexRet::Leaked) => {
                matches!(self.holder, Some((s, _)) if s != *session)
            }
            (MutexOp::Release { session, token }, MutexRet::Released) => {
                let ours = matches!(self.holder, Some((s, t)) if s == *session && t.is_none_or(|t| t == *token));
                if ours {
                    self.holder = None;
                }
                ours
            }
            (MutexOp::Release { session, token }, MutexRet::Stale) => {
                !matches!(self.holder, Some((s, Some(t))) if s == *session && t == *token)
            }
            (MutexOp::Expire { .. } | MutexOp::Revoke, MutexRet::Done) => {
                self.invoke(op);
                true
            }
            _ => false,
        }
    }
}

/// Most operations of unknown outcome the stateright search takes on.
pub const MAX_IN_FLIGHT: usize = 6;

/// A model operation with the store revision it committed at, where the store log says.
#[derive(Clone, Debug)]
pub struct Placed {
    pub op: MutexOp,
    pub at: Option<i64>,
}

/// The fenced mutex as the WGL search's model: plain, hashable state (the memo's key).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct MutexState {
    /// (session, token); a token of None is a grant whose acknowledgement was lost.
    holder: Option<(i64, Option<u64>)>,
    /// Shared holds: session -> token (None: the acknowledgement was lost). Empty for
    /// every key of an exclusive class.
    readers: BTreeMap<i64, Option<u64>>,
    last: u64,
    /// The highest commit revision placed so far: what commits later must come after it.
    rev: i64,
}

impl MutexState {
    fn ours(&self, session: i64, token: u64) -> bool {
        matches!(self.holder, Some((s, t)) if s == session && t.is_none_or(|t| t == token))
    }

    fn ours_shared(&self, session: i64, token: u64) -> bool {
        self.readers
            .get(&session)
            .is_some_and(|t| t.is_none_or(|t| t == token))
    }

    /// Another session holds, exclusively or shared: what refuses an exclusive acquire.
    fn held_by_other(&self, session: i64) -> bool {
        matches!(self.holder, Some((h, _)) if h != session)
            || self.readers.keys().any(|r| *r != session)
    }
}

impl wgl::Model for MutexState {
    type Op = Placed;
    type Ret = MutexRet;

    fn step(&self, p: &Placed, ret: Option<&MutexRet>) -> Option<Self> {
        let mut s = self.clone();
        if let Some(at) = p.at {
            if at < s.rev {
                return None;
            }
            s.rev = at;
        }
        match (&p.op, ret) {
            // No answer seen: apply whatever the operation may have done.
            (MutexOp::Acquire { session }, None) => {
                if s.holder.is_none() && s.readers.is_empty() {
                    s.holder = Some((*session, None));
                }
            }
            (MutexOp::AcquireShared { session }, None) => {
                if s.holder.is_none() {
                    s.readers.entry(*session).or_insert(None);
                }
            }
            (MutexOp::ReleaseShared { session, token }, None) => {
                if s.ours_shared(*session, *token) {
                    s.readers.remove(session);
                }
            }
            (MutexOp::AcquireShared { session }, Some(MutexRet::Granted(t))) => {
                match s.readers.get(session).copied() {
                    // A retried acquire answered with the grant the session already has.
                    Some(Some(held)) => {
                        if held != *t {
                            return None;
                        }
                    }
                    Some(None) => {
                        s.readers.insert(*session, Some(*t));
                        s.last = s.last.max(*t);
                    }
                    None if s.holder.is_none() && *t > s.last && revision_bits(*t) > s.rev => {
                        s.readers.insert(*session, Some(*t));
                        s.last = *t;
                        s.rev = revision_bits(*t);
                    }
                    None => return None,
                }
            }
            (MutexOp::ReleaseShared { session, token }, Some(MutexRet::Released)) => {
                if !s.ours_shared(*session, *token) {
                    return None;
                }
                s.readers.remove(session);
            }
            (MutexOp::ReleaseShared { session, token }, Some(MutexRet::Stale)) => {
                if s.readers.get(session) == Some(&Some(*token)) {
                    return None;
                }
            }
            (MutexOp::Release { session, token }, None) => {
                if s.ours(*session, *token) {
                    s.holder = None;
                }
            }
            (MutexOp::Acquire { session }, Some(MutexRet::Granted(t))) => match s.holder {
                // A retried acquire answered with the grant the session already has.
                Some((h, Some(held))) if h == *session => {
                    if held != *t {
                        return None;
                    }
                }
                Some((h, None)) if h == *session => {
                    s.holder = Some((h, Some(*t)));
                    s.last = s.last.max(*t);
                }
                None if s.readers.is_empty() && *t > s.last && revision_bits(*t) > s.rev => {
                    s.holder = Some((*session, Some(*t)));
                    s.last = *t;
                    s.rev = revision_bits(*t);
                }
                _ => return None,
            },
            (MutexOp::Acquire { session }, Some(MutexRet::Refused)) => {
                if !s.held_by_other(*session) {
                    return None;
                }
            }
            (MutexOp::Acquire { session }, Some(MutexRet::Leaked)) => {
                if !s.held_by_other(*session) && !s.readers.contains_key(session) {
                    return None;
                }
            }
            (MutexOp::Release { session, token }, Some(MutexRet::Released)) => {
                if !s.ours(*session, *token) {
                    return None;
                }
                s.holder = None;
            }
            (MutexOp::Release { session, token }, Some(MutexRet::Stale)) => {
                if matches!(s.holder, Some((h, Some(t))) if h == *session && t == *token) {
                    return None;
                }
            }
            (MutexOp::Expire { session }, _) => {
                if matches!(s.holder, Some((h, _)) if h == *session) {
                    s.holder = None;
                }
                s.readers.remove(session);
            }
            (MutexOp::Revoke, _) => {
                s.holder = None;
                s.readers.clear();
            }
            _ => return None,
        }
        Some(s)
    }
}

/// One key's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Linearizable,
    NotLinearizable,
    /// The search budget ran out: nothing is claimed.
    Unchecked,
}

/// An operation of the model with its thread and times.
struct ModelOp {
    thread: u64,
    op: MutexOp,
    /// The commit revision, where the store log says (session ends, epoch advances).
    at: Option<i64>,
    invoked: u64,
    /// None: never returned (may or may not have taken effect).
    ret: Option<(u64, MutexRet)>,
}

/// The model operations of one key: client operations with their outcomes, session ends
/// seen by the store watch, and epoch advances. Operations with no possible effect on the
/// mutex (other refusals) are left out: they fit anywhere.
fn model_ops(key: &str, ops: &[&Op], advances: &[&Op], truth: &StoreTruth) -> Vec<ModelOp> {
    let mut out = Vec::new();
    let mut pseudo = 1u64 << 40;
    let mut sessions: BTreeMap<i64, u64> = BTreeMap::new();
    let ops: Vec<&Op> = ops
        .iter()
        .copied()
        .filter(|o| o.key.as_deref() == Some(key))
        .collect();
    let effects = store_effects(key, &ops, truth);
    // The latest invocation of a grant to each session: the grant's transaction compared
    // the session's record, so the session had not ended when it committed, nor when it
    // was invoked; its end falls after. (Releases are not counted: a retried release may
    // be answered after its hold ended.) Without this bound a session that lives long and
    // takes the key many times (the shard gate's, replaced every 15 s) ends "somewhere in"
    // its whole life, and the search drowns in the places it could go.
    let mut alive_at: BTreeMap<i64, u64> = BTreeMap::new();
    for op in ops.iter().filter(|o| o.kind == Kind::Acquire && o.ok()) {
        if let Some(s) = op.session {
            let t = alive_at.entry(s).or_insert(op.invoked);
            *t = (*t).max(op.invoked);
        }
    }
    // Each acknowledged grant's commit revision (its token's) with its invocation: a
    // session end committed at a later revision happened after that invocation. This pins
    // an end near its place in the store's order, not only after its own session's calls.
    let mut committed: Vec<(i64, u64)> = ops
        .iter()
        .filter(|o| o.kind == Kind::Acquire && o.ok())
        .filter_map(|o| Some((revision_bits(o.token?), o.invoked)))
        .collect();
    committed.sort_unstable();
    let after_commits_below = |rev: i64| -> u64 {
        committed
            .iter()
            .take_while(|(r, _)| *r < rev)
            .map(|(_, t)| *t)
            .max()
            .unwrap_or(0)
    };
    for op in &ops {
        let Some(session) = op.session else { continue };
        // Only a session that may have held the key (a grant acknowledged or of unknown
        // outcome) has a hold for its end to take away; the others' ends change nothing
        // and would only multiply the orders the search tries.
        if op.kind == Kind::Acquire && !op.failed() {
            let first = sessions.entry(session).or_insert(op.invoked);
            *first = (*first).min(op.invoked);
        }
        let m = match (op.kind, op.shared) {
            (Kind::Acquire, false) => MutexOp::Acquire { session },
            (Kind::Release, false) => MutexOp::Release {
                session,
                token: op.token.unwrap_or(0),
            },
            // A shared acquire refused fits anywhere: a writer's mark (not in the model)
            // refuses it as well as an exclusive hold.
            (Kind::Acquire, true) if op.failed() => continue,
            (Kind::Acquire, true) => MutexOp::AcquireShared { session },
            (Kind::Release, true) => MutexOp::ReleaseShared {
                session,
                token: op.token.unwrap_or(0),
            },
            _ => continue,
        };
        let ret = match (op.kind, op.done, op.why.as_deref()) {
            // Its effect, if it had one, is among the store's (below).
            (_, None, _) | (_, Some((_, super::history::Phase::Info)), _) if effects.is_some() => {
                continue;
            }
            (_, None, _) | (_, Some((_, super::history::Phase::Info)), _) => None,
            (Kind::Acquire, Some((t, super::history::Phase::Ok)), _) => {
                let token = op.token.unwrap_or(0);
                Some((
                    t,
                    match op.permit {
                        Some(permit) => MutexRet::GrantedPermit(token, permit),
                        None => MutexRet::Granted(token),
                    },
                ))
            }
            (Kind::Acquire, Some((t, _)), Some("HELD")) => Some((t, MutexRet::Refused)),
            (Kind::Acquire, Some((t, _)), Some("LEAKED_HOLD")) => Some((t, MutexRet::Leaked)),
            (Kind::Release, Some((t, super::history::Phase::Ok)), _) => {
                Some((t, MutexRet::Released))
            }
            (Kind::Release, Some((t, _)), Some("STALE_TOKEN")) => Some((t, MutexRet::Stale)),
            _ => continue,
        };
        let thread = if ret.is_some() {
            u64::from(op.client)
        } else {
            pseudo += 1;
            pseudo
        };
        out.push(ModelOp {
            thread,
            op: m,
            at: None,
            invoked: op.invoked,
            ret,
        });
    }
    for (op, invoked, ret) in effects.unwrap_or_default() {
        pseudo += 1;
        out.push(ModelOp {
            thread: pseudo,
            op,
            at: None,
            invoked,
            ret: Some(ret),
        });
    }
    let key_logged = truth.logged(key);
    for (session, first) in sessions {
        if let Some(seen) = truth.session_end_seen.get(&session) {
            // Ended before its first acquire that may have held was even invoked (that
            // acquire's answer was lost, e.g. NO_QUORUM from a slow store): it never held
            // the key, and an end before the call would be a window that closes before it
            // opens.
            if *seen < first {
                continue;
            }
            let at = truth.session_end.get(&session).copied();
            // An end that took no hold of this key away (every hold the store ever had on
            // the session's lease for it was released or handed on first) changes nothing
            // in the model: left out, it cannot change the verdict, and each end kept is
            // one more operation the search must place (a session that lives long and
            // releases everything, the shard gate's, ends holding nothing).
            // (Only where the store log has this key's records at all: without them there
            // is no evidence either way, and the end stays.)
            let took_a_hold = truth.holds_on(key, session).iter().any(|(rev, _, _)| {
                match truth.deleted_at(key, *rev) {
                    Some(None) => true,
                    Some(Some(deleted)) => Some(deleted) == at,
                    None => false,
                }
            });
            if key_logged && !took_a_hold {
                continue;
            }
            pseudo += 1;
            out.push(ModelOp {
                thread: pseudo,
                op: MutexOp::Expire { session },
                at,
                // From the session's first acquire that may have held the key: a hold's
                // session ends after it was granted. (A session that ended before it ever
                // held this key — a client answered SESSION_EXPIRED — is not here at all:
                // its end happened before its first call, which once made this window lie.)
                invoked: alive_at
                    .get(&session)
                    .map_or(first, |t| first.max(*t))
                    .max(at.map_or(0, after_commits_below))
                    .min(*seen),
                ret: Some((*seen, MutexRet::Done)),
            });
        }
    }
    // Force releases: the forced hold's session loses this key at the force revision,
    // some time after the gate invoked the release (or the hold was seen made, if the
    // history lacks the call) and before the watcher saw the delete.
    for (_rev, lease, at, made, gone) in truth.forced_holds(key) {
        let invoked = ops
            .iter()
            .filter(|o| o.kind == Kind::Force && o.invoked <= gone.unwrap_or(u64::MAX))
            .map(|o| o.invoked)
            .max()
            .unwrap_or(made)
            .max(made);
        pseudo += 1;
        out.push(ModelOp {
            thread: pseudo,
            op: MutexOp::Expire { session: lease },
            at: Some(at),
            invoked,
            ret: gone.map(|g| (g.max(invoked), MutexRet::Done)),
        });
    }
    // The epoch record's writes after the first (epoch init) are the advances, in order.
    let advanced = truth.advances();
    let mut in_order: Vec<&&Op> = advances.iter().collect();
    in_order.sort_by_key(|a| a.invoked);
    let known = advanced.len() == in_order.len();
    for (i, a) in in_order.into_iter().enumerate() {
        pseudo += 1;
        out.push(ModelOp {
            thread: pseudo,
            op: MutexOp::Revoke,
            at: if known {
                advanced.get(i).copied()
            } else {
                None
            },
            invoked: a.invoked,
            ret: if a.ok() {
                a.returned().map(|t| (t, MutexRet::Done))
            } else {
                None
            },
        });
    }
    out
}

/// What the operations whose answers were lost did, from the store's own history
/// (None without a store log: they are searched as operations of unknown outcome).
///
/// An acquire has an effect only by creating a holder record on its session's lease, a
/// release only by deleting the hold its token names. So every unknown operation is left
/// out, and each such store change that an unknown operation may have made becomes an
/// operation of its own: "session L was granted T", from the earliest call of L that may
/// have made it until the store showed it (or an acknowledgement came back, if earlier);
/// "T was released", likewise. A change an acknowledged operation also claims is added
/// anyway for a grant: a grant the session already has is answered again (a retry), so the
/// extra operation changes nothing when the acknowledged one made it, and gives the
/// earlier start when the lost one did. A delete an acknowledged release claims is that
/// release's (the checks hold it to the revision it names); deletes made by a session end
/// or an epoch advance are theirs, not a release's.
///
/// Without this, each lost answer may be placed anywhere after its call, and a key with a
/// dozen NO_QUORUM answers exhausts the search.
type Effect = (MutexOp, u64, (u64, MutexRet));

fn store_effects(key: &str, ops: &[&Op], truth: &StoreTruth) -> Option<Vec<Effect>> {
    if truth.hold_seen.is_empty() {
        return None;
    }
    let mut out = Vec::new();
    let sessions: BTreeSet<i64> = ops
        .iter()
        .filter(|o| o.unknown() && matches!(o.kind, Kind::Acquire | Kind::Release))
        .filter_map(|o| o.session)
        .collect();
    for session in sessions {
        for (rev, made, gone) in truth.holds_on(key, session) {
            let Some(token) = truth.epoch_at(rev).and_then(|e| {
                let e = u16::try_from(e).ok()?;
                lock_config::FencingToken::pack(e, u64::try_from(rev).ok()?).ok()
            }) else {
                continue;
            };
            let token = token.as_u64();
            let mine = |o: &&&Op, kind: Kind| o.kind == kind && o.session == Some(session);
            // The grant: calls of this session that may have made it.
            let granting: Vec<&&Op> = ops
                .iter()
                .filter(|o| mine(o, Kind::Acquire) && o.invoked <= made)
                .filter(|o| o.unknown() || o.token == Some(token))
                .collect();
            let shared = truth.is_shared(key, rev);
            if granting.iter().any(|o| o.unknown()) {
                let from = granting.iter().map(|o| o.invoked).min().unwrap_or(made);
                let by = granting
                    .iter()
                    .filter(|o| o.ok())
                    .filter_map(|o| o.returned())
                    .fold(made, u64::min);
                let acquire = if shared {
                    MutexOp::AcquireShared { session }
                } else {
                    MutexOp::Acquire { session }
                };
                // A semaphore's record is a permit's: the grant names it.
                let granted = match truth.permit_at(key, rev) {
                    Some(permit) => MutexRet::GrantedPermit(token, permit),
                    None => MutexRet::Granted(token),
                };
                out.push((acquire, from, (by.max(from), granted)));
            }
            // The release: only a delete no session end or advance made.
            let Some(gone) = gone else { continue };
            if truth.revoked_at(key, rev).is_some() {
                continue;
            }
            let releasing: Vec<&&Op> = ops
                .iter()
                .filter(|o| mine(o, Kind::Release) && o.token == Some(token))
                .filter(|o| o.invoked <= gone && !o.failed())
                .collect();
            if !releasing.iter().any(|o| o.ok()) && !releasing.is_empty() {
                let from = releasing.iter().map(|o| o.invoked).min().unwrap_or(gone);
                let release = if shared {
                    MutexOp::ReleaseShared { session, token }
                } else {
                    MutexOp::Release { session, token }
                };
                out.push((release, from, (gone.max(from), MutexRet::Released)));
            }
        }
    }
    Some(out)
}

/// Checks one key with the WGL search and a budget of `steps` search steps.
pub fn check_key(
    key: &str,
    ops: &[&Op],
    advances: &[&Op],
    truth: &StoreTruth,
    steps: u64,
) -> Verdict {
    let calls: Vec<wgl::Call<Placed, MutexRet>> = model_ops(key, ops, advances, truth)
        .into_iter()
        .map(|m| wgl::Call {
            op: Placed { op: m.op, at: m.at },
            invoked: m.invoked,
            ret: m.ret,
        })
        .collect();
    let outcome = match crate::semaphore::permits(key) {
        Some(n) => wgl::check(permits::PermitsState::new(n), &calls, steps),
        None => wgl::check(MutexState::default(), &calls, steps),
    };
    match outcome {
        wgl::Outcome::Linearizable => Verdict::Linearizable,
        wgl::Outcome::NotLinearizable => Verdict::NotLinearizable,
        wgl::Outcome::Exhausted => Verdict::Unchecked,
    }
}

/// The same question with stateright's tester (no memo, no revisions): the reference the
/// WGL search is checked against.
pub fn check_key_stateright(
    key: &str,
    ops: &[&Op],
    advances: &[&Op],
    truth: &StoreTruth,
    steps: u64,
) -> Verdict {
    let mops = model_ops(key, ops, advances, truth);
    // Each operation without a return may be placed anywhere after its call, and the
    // search tries their orders: past a handful it is the budget, not the history, that
    // decides. Such keys are left to the per-key checks.
    if mops.iter().filter(|m| m.ret.is_none()).count() > MAX_IN_FLIGHT {
        return Verdict::Unchecked;
    }
    // Replay in time order; at equal times invocations first (the permissive reading).
    let mut timeline: Vec<(u64, u8, usize)> = Vec::new();
    for (i, m) in mops.iter().enumerate() {
        timeline.push((m.invoked, 0, i));
        if let Some((t, _)) = &m.ret {
            timeline.push(((*t).max(m.invoked), 1, i));
        }
    }
    timeline.sort();
    let budget = Arc::new(AtomicU64::new(steps));
    let mut tester = LinearizabilityTester::new(FencedMutex::new(budget.clone()));
    for (_, phase, i) in timeline {
        let m = &mops[i];
        let r = if phase == 0 {
            tester.on_invoke(m.thread, m.op.clone()).map(drop)
        } else {
            let ret = m.ret.as_ref().map_or(MutexRet::Done, |(_, r)| r.clone());
            tester.on_return(m.thread, ret).map(drop)
        };
        if r.is_err() {
            // Two overlapping operations on one client: a recording bug, not a verdict.
            return Verdict::Unchecked;
        }
    }
    let ok = tester.serialized_history().is_some();
    if ok {
        Verdict::Linearizable
    } else if budget.load(Ordering::Relaxed) == 0 {
        Verdict::Unchecked
    } else {
        Verdict::NotLinearizable
    }
}

/// Per-key verdicts for every key in the history, with the time each check took.
pub fn check_all(
    ops: &[Op],
    truth: &StoreTruth,
    steps: u64,
) -> BTreeMap<String, (Verdict, std::time::Duration)> {
    let advances: Vec<&Op> = ops.iter().filter(|o| o.kind == Kind::Advance).collect();
    let keys: BTreeSet<&str> = ops.iter().filter_map(|o| o.key.as_deref()).collect();
    let mut by_key: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in ops {
        if let Some(k) = op.key.as_deref() {
            by_key.entry(k).or_default().push(op);
        }
    }
    keys.into_iter()
        .map(|k| {
            let ops = by_key.get(k).map(Vec::as_slice).unwrap_or_default();
            let started = std::time::Instant::now();
            let verdict = check_key(k, ops, &advances, truth, steps);
            (k.to_owned(), (verdict, started.elapsed()))
        })
        .collect()
}

#[cfg(test)]
mod tests;
