//! Fencing tokens (ADR-02, DESIGN 4.3): `epoch << 48 | revision`.
//!
//! The revision is the etcd header revision of the committing grant transaction; the epoch
//! is bound to the etcd cluster ID (ADR-03) and stays below 2^15 so the packed value is
//! positive in a signed 64-bit column. Resources compare the packed integer only.
//!
//! `FencingToken` deliberately has no `Display`, and its `Debug` is redacted: tokens are
//! capabilities and must not reach logs or error messages by accident (ADR-22).

use std::fmt;

pub const EPOCH_BITS: u32 = 15;
pub const REVISION_BITS: u32 = 48;
/// Largest epoch: the packed token must stay below 2^63.
pub const MAX_EPOCH: u16 = (1 << EPOCH_BITS) - 1;
/// Largest revision that fits below the epoch bits.
pub const MAX_REVISION: u64 = (1 << REVISION_BITS) - 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("epoch must be 1..={MAX_EPOCH}")]
    EpochOutOfRange,
    #[error("revision must be 1..={MAX_REVISION}")]
    RevisionOutOfRange,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    /// Packs an epoch and a commit revision. Epoch 0 and revision 0 never name a grant.
    pub fn pack(epoch: u16, revision: u64) -> Result<Self, TokenError> {
        if epoch == 0 || epoch > MAX_EPOCH {
            return Err(TokenError::EpochOutOfRange);
        }
        if revision == 0 || revision > MAX_REVISION {
            return Err(TokenError::RevisionOutOfRange);
        }
        Ok(Self(u64::from(epoch) << REVISION_BITS | revision))
    }

    /// Interprets a wire value; refuses values no grant could have produced.
    pub fn from_u64(v: u64) -> Result<Self, TokenError> {
        let epoch = v >> REVISION_BITS;
        let epoch = u16::try_from(epoch).map_err(|_| TokenError::EpochOutOfRange)?;
        Self::pack(epoch, v & MAX_REVISION)
    }

    pub fn as_u64(self) -> u64 {
        self.0
    }

    /// The value for a signed BIGINT column; always positive.
    pub fn as_i64(self) -> i64 {
        // Below 2^63 by construction (epoch < 2^15).
        self.0 as i64
    }

    pub fn epoch(self) -> u16 {
        (self.0 >> REVISION_BITS) as u16
    }

    pub fn revision(self) -> u64 {
        self.0 & MAX_REVISION
    }
}

impl fmt::Debug for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FencingToken(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn packs_and_unpacks() {
        let t = FencingToken::pack(1, 42).unwrap();
        assert_eq!(t.as_u64(), (1 << 48) + 42);
        assert_eq!((t.epoch(), t.revision()), (1, 42));
        assert_eq!(FencingToken::from_u64(t.as_u64()).unwrap(), t);
        let max = FencingToken::pack(MAX_EPOCH, MAX_REVISION).unwrap();
        assert_eq!(max.as_u64(), i64::MAX as u64);
        assert!(max.as_i64() > 0);
    }

    #[test]
    fn refuses_out_of_range() {
        assert_eq!(FencingToken::pack(0, 1), Err(TokenError::EpochOutOfRange));
        assert_eq!(
            FencingToken::pack(MAX_EPOCH + 1, 1),
            Err(TokenError::EpochOutOfRange)
        );
        assert_eq!(
            FencingToken::pack(1, 0),
            Err(TokenError::RevisionOutOfRange)
        );
        assert_eq!(
            FencingToken::pack(1, 1 << 48),
            Err(TokenError::RevisionOutOfRange)
        );
        assert_eq!(
            FencingToken::from_u64(u64::MAX),
            Err(TokenError::EpochOutOfRange)
        );
        assert_eq!(FencingToken::from_u64(0), Err(TokenError::EpochOutOfRange));
    }

    #[test]
    fn debug_is_redacted() {
        let t = FencingToken::pack(3, 123_456).unwrap();
        let s = format!("{t:?}");
        assert!(!s.contains("123456") && !s.contains(&t.as_u64().to_string()));
    }

    proptest! {
        #[test]
        fn token_order_is_epoch_then_revision(
            e1 in 1..=MAX_EPOCH, r1 in 1..=MAX_REVISION,
            e2 in 1..=MAX_EPOCH, r2 in 1..=MAX_REVISION,
        ) {
            let t1 = FencingToken::pack(e1, r1).unwrap();
            let t2 = FencingToken::pack(e2, r2).unwrap();
            prop_assert_eq!(t1.cmp(&t2), (e1, r1).cmp(&(e2, r2)));
            prop_assert_eq!(t1.as_i64().cmp(&t2.as_i64()), (e1, r1).cmp(&(e2, r2)));
            prop_assert_eq!((t1.epoch(), t1.revision()), (e1, r1));
        }
    }
}
