//! What a release's transactions answered, on plain data: a plain release's outcome
//! ([`Released`]), a token's epoch against the cached one, and what a refused handoff means
//! for the releaser and its head. Pure; the transactions are `release.rs`'s.

use crate::error::ArbiterError;

/// One release transaction's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Released {
    /// Deleted at this store revision.
    Done(i64),
    /// Handed on to the queue head at this store revision (the key stays held).
    HandedOn(i64),
    /// The epoch record moved since it was cached: re-read it and retry.
    EpochMoved,
    /// The token is from an earlier epoch (or from none this store made), or its grant is
    /// not the holder.
    Stale,
    /// Try again as a plain release (a handoff whose head had gone).
    Retry,
}

/// What a release transaction's answer means: committed (at that revision), or (its compares failed) the
/// epoch record moved — every compare may have failed for that, so retry — or, with the
/// epoch unchanged, the holder is not this token's grant (released, expired, re-granted).
pub(super) fn release_verdict(
    committed: Option<i64>,
    epoch_seen: Option<i64>,
    epoch_compared: i64,
) -> Result<Released, ArbiterError> {
    if let Some(revision) = committed {
        Ok(Released::Done(revision))
    } else if epoch_seen == Some(epoch_compared) {
        Err(ArbiterError::StaleToken)
    } else {
        Ok(Released::EpochMoved)
    }
}

/// A token's epoch against the epoch this arbiter has cached. A token from a later epoch
/// than the cache means the cache is behind (another arbiter granted it after an advance
/// this one has not re-read yet): re-read before judging, never refuse a live hold for it.
/// Only once the epoch was re-read (`fresh`) is a token from a later epoch not ours.
pub(super) fn token_epoch_verdict(token: u16, cached: u16, fresh: bool) -> Result<(), Released> {
    match token.cmp(&cached) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Greater if !fresh => Err(Released::EpochMoved),
        _ => Err(Released::Stale),
    }
}

/// What a handoff transaction's refusal means, and what its head is told. The epoch that
/// moved explains every failed compare (retry the release); with the epoch unchanged, the
/// head's session gone is enough to fail (the plain release follows, and decides for the
/// releaser); a semaphore's head that already holds a permit of the key (its own attempt
/// got one meanwhile) may not be given a second: it is told not now (its own look finds
/// its permit) and the plain release follows; otherwise the releaser's grant is not the
/// holder (stale).
pub(super) fn handoff_verdict(
    epoch_unchanged: bool,
    head_bound: bool,
    head_holds_permit: bool,
) -> (HeadTold, Released) {
    match (epoch_unchanged, head_bound, head_holds_permit) {
        (false, _, _) => (HeadTold::NotNow, Released::EpochMoved),
        (true, false, _) => (HeadTold::SessionGone, Released::Retry),
        (true, true, true) => (HeadTold::NotNow, Released::Retry),
        (true, true, false) => (HeadTold::NotNow, Released::Stale),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HeadTold {
    SessionGone,
    NotNow,
}

#[cfg(test)]
mod tests;
