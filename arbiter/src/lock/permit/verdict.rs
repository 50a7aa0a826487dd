//! A semaphore grant's verdict, on plain data: what the permits read back mean for who
//! asks ([`choose`]), and what a permit transaction's answer means ([`verdict`]). Pure; the
//! transaction is `permit.rs`'s.

use crate::lock::grant::{Claimant, HolderSeen};

/// One permit's holder record as read from `/p/<key>//<i>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermitSeen {
    pub permit: u32,
    pub holder: HolderSeen,
}

/// What a permit transaction returned, reduced to what the verdict needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PermitTxnSeen {
    /// The compares held: permit `permit` was written at `revision`.
    Committed { permit: u32, revision: i64 },
    /// The compares failed; the else branch read these back at `read_at`.
    Refused {
        epoch_mod_revision: Option<i64>,
        session_create_revision: Option<i64>,
        /// Every permit of the key held now.
        permits: Vec<PermitSeen>,
        read_at: Option<i64>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PermitVerdict {
    /// This session holds `permit`, granted at `revision` (just now, or earlier: a retried
    /// Acquire gets its permit back; a session holds at most one permit of a key).
    Granted {
        permit: u32,
        revision: i64,
    },
    /// Permit `permit` was seen free: try it.
    Try {
        permit: u32,
    },
    /// All N permits are held by other sessions, seen so at revision `at`.
    Full {
        at: i64,
    },
    /// This process holds a permit under another session (ADR-13, as for one key).
    LeakedHold,
    SessionGone,
    EpochMoved,
}

/// What the permits held now mean for `claimant`, with `n` permits: its own permit (a
/// session holds at most one), a leak, the lowest free permit, or full. Permits numbered
/// `n` or above (a class whose N was lowered under them) count as held until they end.
pub fn choose(
    claimant: &Claimant<'_>,
    permits: &[PermitSeen],
    n: u32,
    read_at: i64,
) -> PermitVerdict {
    if let Some(own) = permits
        .iter()
        .find(|p| p.holder.session.as_deref() == Some(claimant.lease_hex))
    {
        return PermitVerdict::Granted {
            permit: own.permit,
            revision: own.holder.mod_revision,
        };
    }
    if permits.iter().any(|p| {
        p.holder.spiffe_id.as_deref() == Some(claimant.spiffe_id)
            && p.holder.instance.as_deref() == claimant.instance
    }) {
        return PermitVerdict::LeakedHold;
    }
    if permits.len() >= usize::try_from(n).unwrap_or(usize::MAX) {
        return PermitVerdict::Full { at: read_at };
    }
    match (0..n).find(|i| permits.iter().all(|p| p.permit != *i)) {
        Some(permit) => PermitVerdict::Try { permit },
        None => PermitVerdict::Full { at: read_at },
    }
}

/// What a permit transaction's answer means: as for one key (`grant::verdict`), a moved
/// epoch explains every failed compare and a session that is gone holds nothing; then
/// [`choose`] on the permits read back.
pub fn verdict(claimant: &Claimant<'_>, seen: &PermitTxnSeen, n: u32) -> PermitVerdict {
    match seen {
        PermitTxnSeen::Committed { permit, revision } => PermitVerdict::Granted {
            permit: *permit,
            revision: *revision,
        },
        PermitTxnSeen::Refused {
            epoch_mod_revision,
            session_create_revision,
            permits,
            read_at,
        } => {
            if *epoch_mod_revision != Some(claimant.epoch_mod_revision) {
                return PermitVerdict::EpochMoved;
            }
            if *session_create_revision != Some(claimant.session_create_revision) {
                return PermitVerdict::SessionGone;
            }
            choose(claimant, permits, n, read_at.unwrap_or(0))
        }
    }
}

#[cfg(test)]
mod tests;
