//! The shared-class verdicts, on plain data: what a refused grant transaction of a shared
//! class read back ([`Seen`]), and what that means for a shared ask ([`shared_verdict`]) or
//! an exclusive one ([`exclusive_verdict`]). Pure; the transactions are `shared.rs`'s.

use crate::lock::grant::{Claimant, HolderSeen, Verdict};
use crate::store::layout::lease_hex;

/// What a refused grant transaction of a shared class read back.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Seen {
    pub epoch_mod_revision: Option<i64>,
    pub session_create_revision: Option<i64>,
    /// The exclusive holder, `/l/<key>`.
    pub holder: Option<HolderSeen>,
    /// A shared hold: the caller's own (a shared grant), else the first of the key's (an
    /// exclusive grant): its etcd key, and its record.
    pub shared: Option<(String, HolderSeen)>,
    /// The first exclusive waiter's mark (a shared grant): its etcd key and lease.
    pub writer_waiting: Option<(String, i64)>,
    pub read_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SharedVerdict {
    /// Granted at `revision` (a retried acquire whose answer was lost gets it back).
    Granted {
        revision: i64,
    },
    /// Wait for the record `watch` (None: the exclusive holder, `/l/<key>`) to be deleted,
    /// from revision `at`.
    Wait {
        watch: Option<String>,
        at: i64,
    },
    LeakedHold,
    /// This session's own exclusive-waiter mark stands while it asks SHARED: left by an
    /// exclusive wait of its that ended while the store could not take the mark's delete
    /// (found by `make soak`: the session was then told LEAKED_HOLD for a key it never
    /// held, and every new reader waited on the mark until the session ended). Delete it
    /// and try again.
    DropOwnMark {
        mark: String,
    },
    SessionGone,
    EpochMoved,
    /// What was in the way was gone by the read: try again.
    Again,
}

/// A refused shared grant: its own shared record means it was granted; then the exclusive
/// holder (this session's own: told LEAKED_HOLD), then a writer's mark, is what it waits
/// for.
pub fn shared_verdict(claimant: &Claimant<'_>, seen: &Seen) -> SharedVerdict {
    if let Some(v) = common(claimant, seen) {
        return v;
    }
    if let Some((_, own)) = &seen.shared
        && own.session.as_deref() == Some(claimant.lease_hex)
    {
        return SharedVerdict::Granted {
            revision: own.mod_revision,
        };
    }
    match exclusive_holder(claimant, seen) {
        // This session holds the key exclusive: a shared answer with that hold's token
        // would be released SHARED and refused, leaving the exclusive hold behind. It is
        // told LEAKED_HOLD, as a shared holder asking exclusive is: release it first.
        Some(SharedVerdict::Granted { .. }) => return SharedVerdict::LeakedHold,
        Some(v) => return v,
        None => {}
    }
    match &seen.writer_waiting {
        Some((mark, lease)) if lease_hex(*lease) == claimant.lease_hex => {
            SharedVerdict::DropOwnMark { mark: mark.clone() }
        }
        Some((mark, _)) => SharedVerdict::Wait {
            watch: Some(mark.clone()),
            at: seen.read_at,
        },
        None => SharedVerdict::Again,
    }
}

/// A refused exclusive grant of a shared class: the exclusive holder (this session's: the
/// grant exists), then any shared hold, is what it waits for.
pub fn exclusive_verdict(claimant: &Claimant<'_>, seen: &Seen) -> SharedVerdict {
    if let Some(v) = common(claimant, seen) {
        return v;
    }
    if let Some(v) = exclusive_holder(claimant, seen) {
        return v;
    }
    match &seen.shared {
        Some((_, h))
            if h.session.as_deref() == Some(claimant.lease_hex) || same_process(claimant, h) =>
        {
            SharedVerdict::LeakedHold
        }
        Some((record, _)) => SharedVerdict::Wait {
            watch: Some(record.clone()),
            at: seen.read_at,
        },
        None => SharedVerdict::Again,
    }
}

fn common(claimant: &Claimant<'_>, seen: &Seen) -> Option<SharedVerdict> {
    if seen.epoch_mod_revision != Some(claimant.epoch_mod_revision) {
        return Some(SharedVerdict::EpochMoved);
    }
    if seen.session_create_revision != Some(claimant.session_create_revision) {
        return Some(SharedVerdict::SessionGone);
    }
    None
}

fn same_process(claimant: &Claimant<'_>, h: &HolderSeen) -> bool {
    h.spiffe_id.as_deref() == Some(claimant.spiffe_id) && h.instance.as_deref() == claimant.instance
}

fn exclusive_holder(claimant: &Claimant<'_>, seen: &Seen) -> Option<SharedVerdict> {
    let h = seen.holder.as_ref()?;
    Some(
        match crate::lock::grant::holder_verdict(claimant, h, seen.read_at) {
            Verdict::Granted { revision } => SharedVerdict::Granted { revision },
            Verdict::LeakedHold => SharedVerdict::LeakedHold,
            _ => SharedVerdict::Wait {
                watch: None,
                at: seen.read_at,
            },
        },
    )
}

#[cfg(test)]
mod tests;
