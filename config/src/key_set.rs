//! A set of keys taken as one (AcquireAll, ReleaseAll): the shared rule for what a set is,
//! and how it travels from the edge to the arbiter.
//!
//! A set is 1..=[`MAX_SET_KEYS`] distinct valid keys, kept sorted: the edge and the arbiter
//! read the same body into the same set whatever order the caller wrote it in, and the
//! set's least key is the one the ring hash routes on. `x-lock-keys` carries the set as
//! each key percent-encoded ([`encode_key`]) and joined by one space, which [`encode_key`]
//! always escapes, so the split is unambiguous.

use crate::edge_headers::{decode_key, encode_key};
use crate::key::{KeyError, LockKey};

/// Keys per set. Bounded so one transaction stays well inside etcd's `--max-txn-ops`
/// (128 operations per branch): a set's grant compares every key plus four records and
/// reads each key back plus three when refused.
pub const MAX_SET_KEYS: usize = 16;

/// The set of a multi-key request, as the edge decided it (percent-encoded keys, one
/// space apart).
pub const KEYS_HEADER: &str = "x-lock-keys";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeySetError {
    #[error("a key set has 1..={MAX_SET_KEYS} keys")]
    Size,
    #[error("a key set names {0} twice")]
    Duplicate(String),
    #[error("invalid key in the set: {0}")]
    Key(#[from] KeyError),
}

/// 1..=[`MAX_SET_KEYS`] distinct keys, sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySet {
    keys: Vec<LockKey>,
}

impl KeySet {
    /// Parses the keys of a request body: each must be a valid key, none twice, and the
    /// count in bounds. The size is checked first, so an oversized body costs no parsing.
    pub fn parse<S: AsRef<str>>(keys: &[S]) -> Result<Self, KeySetError> {
        if keys.is_empty() || keys.len() > MAX_SET_KEYS {
            return Err(KeySetError::Size);
        }
        let mut parsed = keys
            .iter()
            .map(|k| LockKey::parse(k.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        parsed.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        if let Some(w) = parsed.windows(2).find(|w| w[0] == w[1]) {
            return Err(KeySetError::Duplicate(w[0].as_str().to_owned()));
        }
        Ok(Self { keys: parsed })
    }

    pub fn keys(&self) -> &[LockKey] {
        &self.keys
    }

    /// The least key: the set is routed (ring hash) and placed (store) by it.
    pub fn first(&self) -> &LockKey {
        // Never empty: `parse` refuses an empty set.
        &self.keys[0]
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The keys as strings, sorted.
    pub fn names(&self) -> Vec<String> {
        self.keys.iter().map(|k| k.as_str().to_owned()).collect()
    }

    /// The value of `x-lock-keys`.
    pub fn encode_header(&self) -> String {
        self.keys
            .iter()
            .map(|k| encode_key(k.as_str()))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The set in an `x-lock-keys` value; None unless it is exactly what
    /// [`KeySet::encode_header`] writes for some set (one spelling per set).
    pub fn decode_header(value: &[u8]) -> Option<Self> {
        let keys = value
            .split(|b| *b == b' ')
            .map(decode_key)
            .collect::<Option<Vec<_>>>()?;
        let set = Self::parse(&keys).ok()?;
        (set.encode_header().as_bytes() == value).then_some(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_parse_sorted_distinct_and_bounded() {
        let set = KeySet::parse(&["pay/b", "pay/a", "ops/z z"]).unwrap();
        assert_eq!(set.names(), ["ops/z z", "pay/a", "pay/b"]);
        assert_eq!(set.first().as_str(), "ops/z z");
        assert_eq!(set.encode_header(), "ops/z%20z pay/a pay/b");
        assert_eq!(
            KeySet::decode_header(set.encode_header().as_bytes()),
            Some(set)
        );
        let cases: [(&[&str], KeySetError); 3] = [
            (&[], KeySetError::Size),
            (&["pay/a", "pay/a"], KeySetError::Duplicate("pay/a".into())),
            (&["pay/a", "nope"], KeySetError::Key(KeyError::NoPath)),
        ];
        for (keys, want) in cases {
            assert_eq!(KeySet::parse(keys), Err(want), "{keys:?}");
        }
        let many: Vec<String> = (0..=MAX_SET_KEYS).map(|i| format!("pay/{i}")).collect();
        assert_eq!(KeySet::parse(&many), Err(KeySetError::Size));
        assert!(KeySet::parse(&many[..MAX_SET_KEYS]).is_ok());
    }

    /// Only the one spelling the edge writes is read: unsorted, doubled separators,
    /// a trailing space or a duplicate are not a set the edge decided.
    #[test]
    fn the_header_has_one_spelling() {
        for bad in [
            "pay/b pay/a",
            "pay/a  pay/b",
            "pay/a ",
            "",
            "pay/a pay/a",
            "pay/%61",
        ] {
            assert_eq!(KeySet::decode_header(bad.as_bytes()), None, "{bad:?}");
        }
    }
}
