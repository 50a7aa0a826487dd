//! Why a hold ended, from what else happened at the revision of its delete. Pure: one
//! rule shared by the audit trail (`lock-audit`'s `classify`, over a revision's changes)
//! and Observe (`observe.rs`, over reads at that revision), so the two never disagree.
//!
//! etcd records a delete, not its cause; the cause is in the same revision:
//! - an **epoch advance** puts `/sys/epoch` and deletes every hold in one transaction;
//! - a **force release** writes `/sys/force/<id>` with its delete (lock-admin);
//! - a lease revoke deletes the session record `/s/<lease>` with every hold on it: an
//!   **expiry**, or a **close** when CloseSession had marked the record `closing`;
//! - otherwise the holder's own Release deleted it.

/// How a hold's session ended at the revision of the hold's delete, if it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEnd {
    Expired,
    Closed,
}

/// What happened beside the hold's delete, at its revision.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndFacts {
    /// The epoch record changed its epoch number.
    pub advance: bool,
    /// A force release's record was written.
    pub force: bool,
    /// The holding session's record was deleted.
    pub session: Option<SessionEnd>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldEnd {
    Released,
    Expired,
    ClosedWithSession,
    Forced,
    RevokedByAdvance,
}

/// The cause. An advance and a force release are transactions of their own that delete
/// holds whatever their sessions do, so they come first.
pub fn hold_end(f: EndFacts) -> HoldEnd {
    if f.advance {
        HoldEnd::RevokedByAdvance
    } else if f.force {
        HoldEnd::Forced
    } else {
        match f.session {
            Some(SessionEnd::Expired) => HoldEnd::Expired,
            Some(SessionEnd::Closed) => HoldEnd::ClosedWithSession,
            None => HoldEnd::Released,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cause_of_a_holds_end() {
        let facts = |advance, force, session| EndFacts {
            advance,
            force,
            session,
        };
        use SessionEnd::*;
        let table = [
            (facts(false, false, None), HoldEnd::Released),
            (facts(false, false, Some(Expired)), HoldEnd::Expired),
            (
                facts(false, false, Some(Closed)),
                HoldEnd::ClosedWithSession,
            ),
            (facts(false, true, None), HoldEnd::Forced),
            // A force release's transaction deletes the hold, not the session.
            (facts(false, true, Some(Expired)), HoldEnd::Forced),
            (facts(true, false, None), HoldEnd::RevokedByAdvance),
            (facts(true, true, Some(Closed)), HoldEnd::RevokedByAdvance),
        ];
        for (f, want) in table {
            assert_eq!(hold_end(f), want, "{f:?}");
        }
    }
}
