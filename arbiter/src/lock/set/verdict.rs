//! A set's verdicts, on plain data: what its grant transaction's answer means ([`verdict`]),
//! and which keys its release ends ([`releasable`]). Pure; the transactions are `set.rs`'s.

use crate::lock::grant::{Claimant, HolderSeen};

/// What a set's grant transaction returned, reduced to what the verdict needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetSeen {
    Committed {
        revision: i64,
    },
    Refused {
        epoch_mod_revision: Option<i64>,
        session_create_revision: Option<i64>,
        /// Each key's holder, in the set's (sorted) order.
        holders: Vec<Option<HolderSeen>>,
        read_at: Option<i64>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetVerdict {
    /// Every key is this session's, from one transaction at `revision`: just now, or a
    /// retried AcquireAll whose first answer was lost.
    Granted {
        revision: i64,
    },
    /// The key at `index` is held by another session, seen so at revision `at`.
    Held {
        index: usize,
        at: i64,
    },
    /// A key is held by this process under another session (ADR-13, as for one key).
    LeakedHold,
    /// The session itself holds a key of the set, but not as this set: waiting would wait
    /// on itself.
    OwnHold,
    SessionGone,
    EpochMoved,
    /// Every key was free by the time of the read: try again.
    ReleasedMeanwhile,
}

/// What a set's transaction answer means. As for one key (`grant::verdict`), a moved epoch
/// explains every failed compare and a session that is gone holds nothing; then this
/// session's own holds, then leaks, then the first key another session holds.
pub fn verdict(claimant: &Claimant<'_>, seen: &SetSeen) -> SetVerdict {
    let (holders, read_at) = match seen {
        SetSeen::Committed { revision } => {
            return SetVerdict::Granted {
                revision: *revision,
            };
        }
        SetSeen::Refused {
            epoch_mod_revision,
            session_create_revision,
            holders,
            read_at,
        } => {
            if *epoch_mod_revision != Some(claimant.epoch_mod_revision) {
                return SetVerdict::EpochMoved;
            }
            if *session_create_revision != Some(claimant.session_create_revision) {
                return SetVerdict::SessionGone;
            }
            (holders, read_at)
        }
    };
    let mine = |h: &HolderSeen| h.session.as_deref() == Some(claimant.lease_hex);
    let first_rev = holders
        .first()
        .and_then(|h| h.as_ref().map(|h| h.mod_revision));
    let all_one_grant = holders.iter().all(|h| {
        h.as_ref()
            .is_some_and(|h| mine(h) && Some(h.mod_revision) == first_rev)
    });
    if let (true, Some(revision)) = (all_one_grant, first_rev) {
        return SetVerdict::Granted { revision };
    }
    let held: Vec<(usize, &HolderSeen)> = holders
        .iter()
        .enumerate()
        .filter_map(|(i, h)| h.as_ref().map(|h| (i, h)))
        .collect();
    if held.iter().any(|(_, h)| mine(h)) {
        return SetVerdict::OwnHold;
    }
    let leaked = |h: &HolderSeen| {
        h.spiffe_id.as_deref() == Some(claimant.spiffe_id)
            && h.instance.as_deref() == claimant.instance
    };
    if held.iter().any(|(_, h)| leaked(h)) {
        return SetVerdict::LeakedHold;
    }
    match held.first() {
        Some((index, h)) => SetVerdict::Held {
            index: *index,
            at: read_at.unwrap_or(h.mod_revision),
        },
        None => SetVerdict::ReleasedMeanwhile,
    }
}

/// Which keys of a set a release ends: those still the grant `revision` names and the
/// caller's (its lease when it names a session, else its identity). Indexes, in order.
pub fn releasable(
    holders: &[Option<(HolderSeen, Option<i64>)>],
    revision: i64,
    lease: Option<i64>,
    identity: &str,
) -> Vec<usize> {
    holders
        .iter()
        .enumerate()
        .filter_map(|(i, h)| {
            let (h, on_lease) = h.as_ref()?;
            let ours = match lease {
                Some(l) => *on_lease == Some(l),
                None => h.spiffe_id.as_deref() == Some(identity),
            };
            (ours && h.mod_revision == revision).then_some(i)
        })
        .collect()
}

#[cfg(test)]
mod tests;
