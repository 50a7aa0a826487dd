//! The grant's verdict, on plain data: who asks ([`Claimant`]), what the transaction read
//! back ([`TxnSeen`]), what that means ([`verdict`]), and the token a grant is minted with
//! ([`mint`]). Pure; the transaction is `grant.rs`'s.

use super::Grant;
use crate::error::{ArbiterError, Internal};
use crate::store::epoch::Epoch;
use crate::store::layout::{DelayMarker, Holder, decode};
use etcd_client::KeyValue;
use lock_config::FencingToken;
use lock_config::registry::ResolvedClass;
use lock_store::{Malformed, StoreError};

/// Who asks: the session the grant would be attached to, and the epoch it compared.
#[derive(Debug, Clone)]
pub struct Claimant<'a> {
    pub lease_hex: &'a str,
    pub spiffe_id: &'a str,
    /// The session's process instance (None: its client sent none).
    pub instance: Option<&'a str>,
    pub session_create_revision: i64,
    pub epoch_mod_revision: i64,
}

/// A holder record as read from `/l/<key>` (None fields: not decodable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderSeen {
    pub session: Option<String>,
    pub spiffe_id: Option<String>,
    /// The holder's process instance (None: not recorded, or not decodable).
    pub instance: Option<String>,
    pub create_revision: i64,
    pub mod_revision: i64,
}

/// A lock-delay marker as read from `/d/<key>` (a class with `lockDelaySeconds`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelaySeen {
    /// The session the marker names (None: not decodable).
    pub session: Option<String>,
    pub mod_revision: i64,
    /// On a lease: the key is in its delay. Without one: it marks a hold.
    pub leased: bool,
}

/// What the transaction returned, reduced to what the verdict needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnSeen {
    /// The compares held: the holder was written at `revision`.
    Committed { revision: i64 },
    /// The compares failed; the else branch read these back at revision `read_at`.
    Refused {
        epoch_mod_revision: Option<i64>,
        session_create_revision: Option<i64>,
        holder: Option<HolderSeen>,
        read_at: Option<i64>,
        /// The lock-delay marker (read only for a class with a delay).
        delay: Option<DelaySeen>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Granted at `revision`: just now, or earlier to this very session (a retried Acquire
    /// whose first answer was lost gets the same grant back).
    Granted { revision: i64 },
    /// Another session holds it; it was seen held at revision `at`.
    Held { at: i64 },
    /// This process holds it under another session (ADR-13): the same identity and the
    /// same instance (both unset counts as the same, the rule before instances).
    LeakedHold,
    /// The session's binding is gone: it expired or was closed.
    SessionGone,
    /// The epoch record moved since it was cached: re-read it and try again.
    EpochMoved,
    /// Released between the compare and the read: try again.
    ReleasedMeanwhile,
    /// The key is in its lock-delay (its marker is on a lease), seen at revision `at`:
    /// not granted until the marker's lease ends it (watch the marker).
    Delayed { at: i64 },
    /// The holder is gone and its marker still marks the hold: it ended without a release.
    /// Start the delay (the marker, unchanged since `marker_mod_revision`, goes on a lease).
    EndedUnreleased {
        session: Option<String>,
        marker_mod_revision: i64,
    },
}

/// What a transaction's answer means (ADR-13). The order matters: an epoch that moved
/// explains every other failed compare; a session that is gone can hold nothing.
pub fn verdict(claimant: &Claimant<'_>, seen: &TxnSeen) -> Verdict {
    match seen {
        TxnSeen::Committed { revision } => Verdict::Granted {
            revision: *revision,
        },
        TxnSeen::Refused {
            epoch_mod_revision,
            session_create_revision,
            holder,
            read_at,
            delay,
        } => {
            if *epoch_mod_revision != Some(claimant.epoch_mod_revision) {
                return Verdict::EpochMoved;
            }
            if *session_create_revision != Some(claimant.session_create_revision) {
                return Verdict::SessionGone;
            }
            match (holder, delay) {
                (Some(h), _) => holder_verdict(claimant, h, read_at.unwrap_or(h.mod_revision)),
                (None, Some(d)) if d.leased => Verdict::Delayed {
                    at: read_at.unwrap_or(d.mod_revision),
                },
                (None, Some(d)) => Verdict::EndedUnreleased {
                    session: d.session.clone(),
                    marker_mod_revision: d.mod_revision,
                },
                (None, None) => Verdict::ReleasedMeanwhile,
            }
        }
    }
}

/// Who holds the key decides: this session (the grant exists), this process under
/// another session (a leak), anyone else (held, seen at `read_at`). An undecodable record
/// is someone else's.
///
/// "This process" is the same identity *and* the same instance (issue 32, DESIGN 8): in a
/// mesh every replica of a Deployment has the same SPIFFE ID, and a sibling replica is a
/// contender that queues, not a leak. A client that sends no instance keeps the old rule
/// (None == None); one that does never matches a record written without one.
pub fn holder_verdict(claimant: &Claimant<'_>, holder: &HolderSeen, read_at: i64) -> Verdict {
    if holder.session.as_deref() == Some(claimant.lease_hex) {
        // The token's revision is the write that made this session holder: its own put,
        // or the release transaction that handed the key on to it (an overwrite keeps the
        // record's create revision, so only the mod revision names the grant).
        Verdict::Granted {
            revision: holder.mod_revision,
        }
    } else if holder.spiffe_id.as_deref() == Some(claimant.spiffe_id)
        && holder.instance.as_deref() == claimant.instance
    {
        Verdict::LeakedHold
    } else {
        Verdict::Held { at: read_at }
    }
}

/// A lock-delay marker key-value as plain data.
pub fn delay_seen(kv: &KeyValue) -> DelaySeen {
    DelaySeen {
        session: decode::<DelayMarker>(kv.value()).map(|m| m.session),
        mod_revision: kv.mod_revision(),
        leased: kv.lease() != 0,
    }
}

/// A holder key-value as plain data.
pub fn holder_seen(kv: &KeyValue) -> HolderSeen {
    let record = decode::<Holder>(kv.value());
    HolderSeen {
        session: record.as_ref().map(|h| h.session.clone()),
        instance: record.as_ref().and_then(|h| h.instance.clone()),
        spiffe_id: record.map(|h| h.spiffe_id),
        create_revision: kv.create_revision(),
        mod_revision: kv.mod_revision(),
    }
}

/// The token for a grant at `revision` in `epoch`.
pub fn mint(
    epoch: &Epoch,
    revision: i64,
    class: &ResolvedClass<'_>,
) -> Result<Grant, ArbiterError> {
    let unsigned =
        u64::try_from(revision).map_err(|_| StoreError::Malformed(Malformed::NegativeRevision))?;
    let token = FencingToken::pack(epoch.record.epoch, unsigned)
        .map_err(|e| ArbiterError::Internal(Internal::Mint(e)))?;
    Ok(Grant {
        token,
        revision,
        class: class.name.to_owned(),
        ttl_seconds: class.ttl_seconds,
        permit: None,
    })
}
