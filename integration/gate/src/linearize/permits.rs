//! The sequential specification of a semaphore's key (a `permits: N` class, issue 53) for
//! the WGL search: up to N sessions hold at once, each on its own permit below N, a permit
//! held by one session at a time; every new grant's token above every earlier grant's of
//! the key (a grant is a commit at a new revision, whichever permit it takes) and committed
//! after every commit placed so far. The operations are the exclusive key's ([`MutexOp`]:
//! the store log's session ends, advances and lost answers read the same way); a grant's
//! answer names its permit ([`MutexRet::GrantedPermit`]).

use super::{MutexOp, MutexRet, Placed, wgl};
use crate::history::revision_bits;
use std::collections::BTreeMap;

/// A semaphore's state: plain and hashable (the search's memo key).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PermitsState {
    n: u32,
    /// Holders by session: (permit, token). A token of None is a grant whose answer was
    /// lost; its permit is then None too where the store log cannot say which it was (the
    /// search runs without one): it counts toward N, and holds no particular permit.
    holders: BTreeMap<i64, (Option<u32>, Option<u64>)>,
    last: u64,
    /// The highest commit revision placed so far.
    rev: i64,
}

impl PermitsState {
    /// A free semaphore of `n` permits.
    pub fn new(n: u32) -> Self {
        Self {
            n,
            ..Self::default()
        }
    }

    fn full(&self) -> bool {
        self.holders.len() >= self.n as usize
    }

    /// `permit` is held by a session other than `session`.
    fn taken(&self, permit: u32, session: i64) -> bool {
        self.holders
            .iter()
            .any(|(s, (p, _))| *s != session && *p == Some(permit))
    }

    /// `session` holds under `token` (or under a token never seen).
    fn ours(&self, session: i64, token: u64) -> bool {
        self.holders
            .get(&session)
            .is_some_and(|(_, t)| t.is_none_or(|t| t == token))
    }
}

impl wgl::Model for PermitsState {
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
            // No answer seen: it took a permit if one was free (which one, unknown).
            (MutexOp::Acquire { session }, None) => {
                if !s.holders.contains_key(session) && !s.full() {
                    s.holders.insert(*session, (None, None));
                }
            }
            (MutexOp::Acquire { session }, Some(MutexRet::GrantedPermit(t, permit))) => {
                if *permit >= s.n || s.taken(*permit, *session) {
                    return None;
                }
                match s.holders.get(session).copied() {
                    // A retried acquire answered with the permit the session already has.
                    Some((held, Some(token))) => {
                        if token != *t || held != Some(*permit) {
                            return None;
                        }
                    }
                    Some((held, None)) => {
                        if held.is_some_and(|h| h != *permit) {
                            return None;
                        }
                        s.holders.insert(*session, (Some(*permit), Some(*t)));
                        s.last = s.last.max(*t);
                    }
                    None if !s.full() && *t > s.last && revision_bits(*t) > s.rev => {
                        s.holders.insert(*session, (Some(*permit), Some(*t)));
                        s.last = *t;
                        s.rev = revision_bits(*t);
                    }
                    None => return None,
                }
            }
            // HELD: every permit held, none by the caller (its own would be given back).
            (MutexOp::Acquire { session }, Some(MutexRet::Refused)) => {
                if s.holders.contains_key(session) || !s.full() {
                    return None;
                }
            }
            // LEAKED_HOLD: another session holds a permit (its identity and instance, which
            // the model does not know, are the caller's).
            (MutexOp::Acquire { session }, Some(MutexRet::Leaked)) => {
                if !s.holders.keys().any(|h| h != session) {
                    return None;
                }
            }
            (MutexOp::Release { session, token }, None) => {
                if s.ours(*session, *token) {
                    s.holders.remove(session);
                }
            }
            (MutexOp::Release { session, token }, Some(MutexRet::Released)) => {
                if !s.ours(*session, *token) {
                    return None;
                }
                s.holders.remove(session);
            }
            (MutexOp::Release { session, token }, Some(MutexRet::Stale)) => {
                if s.holders
                    .get(session)
                    .is_some_and(|(_, t)| *t == Some(*token))
                {
                    return None;
                }
            }
            (MutexOp::Expire { session }, _) => {
                s.holders.remove(session);
            }
            (MutexOp::Revoke, _) => s.holders.clear(),
            _ => return None,
        }
        Some(s)
    }
}
