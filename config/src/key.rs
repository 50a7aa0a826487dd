//! Lock keys: `<namespace>/<path>` (DESIGN 4.1).
//!
//! The namespace is a DNS label (`[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?`); the path is UTF-8,
//! 1..=512 bytes, split on `/` into segments that are never empty, `.` or `..`, with no control
//! characters. The same rules apply to grant and class prefixes, which is what makes prefix
//! matching on segment boundaries well defined.

use std::fmt;

/// Longest namespace (a DNS label).
pub const MAX_NAMESPACE_LEN: usize = 63;
/// Longest path, in bytes.
pub const MAX_PATH_LEN: usize = 512;
/// Longest whole key: namespace, separator, path.
pub const MAX_KEY_LEN: usize = MAX_NAMESPACE_LEN + 1 + MAX_PATH_LEN;

/// Why a key (or a prefix) is not acceptable. Messages never echo the key itself: keys of
/// other tenants must not come back in errors that might be logged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("key is empty")]
    Empty,
    #[error("key is longer than {MAX_KEY_LEN} bytes")]
    TooLong,
    #[error("key has no '/' between namespace and path")]
    NoPath,
    #[error("namespace must be a DNS label: [a-z0-9]([a-z0-9-]{{0,61}}[a-z0-9])?")]
    BadNamespace,
    #[error("path must be 1..={MAX_PATH_LEN} bytes")]
    BadPathLength,
    #[error("path has an empty, '.' or '..' segment")]
    BadSegment,
    #[error("path contains a control character")]
    ControlCharacter,
}

/// A validated lock key. Construction is the only validation point; every `LockKey` in the
/// program satisfies DESIGN 4.1.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockKey {
    full: String,
    ns_len: usize,
}

impl LockKey {
    /// Parses and validates `<namespace>/<path>`.
    pub fn parse(s: &str) -> Result<Self, KeyError> {
        if s.is_empty() {
            return Err(KeyError::Empty);
        }
        if s.len() > MAX_KEY_LEN {
            return Err(KeyError::TooLong);
        }
        let (ns, path) = s.split_once('/').ok_or(KeyError::NoPath)?;
        validate_namespace(ns)?;
        validate_path(path)?;
        Ok(Self {
            full: s.to_owned(),
            ns_len: ns.len(),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.full
    }

    pub fn namespace(&self) -> &str {
        &self.full[..self.ns_len]
    }

    pub fn path(&self) -> &str {
        &self.full[self.ns_len + 1..]
    }
}

// Keys are tenant data; Debug prints them (operators need it in tests and panics), Display
// is what user-facing messages use. Neither is ever used for tokens.
impl fmt::Debug for LockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LockKey({:?})", self.full)
    }
}

impl fmt::Display for LockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.full)
    }
}

/// A grant or class prefix: a namespace alone (`pay`) or a namespace and leading path
/// segments (`pay/ledger`). Matches keys on segment boundaries only.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct KeyPrefix(String);

impl KeyPrefix {
    pub fn parse(s: &str) -> Result<Self, KeyError> {
        if s.is_empty() {
            return Err(KeyError::Empty);
        }
        if s.len() > MAX_KEY_LEN {
            return Err(KeyError::TooLong);
        }
        match s.split_once('/') {
            None => validate_namespace(s)?,
            Some((ns, path)) => {
                validate_namespace(ns)?;
                validate_path(path)?;
            }
        }
        Ok(Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn namespace(&self) -> &str {
        self.0.split_once('/').map_or(self.0.as_str(), |(ns, _)| ns)
    }

    /// True when `key` is this prefix or lies below it on a segment boundary.
    pub fn covers(&self, key: &LockKey) -> bool {
        let k = key.as_str();
        k == self.0 || (k.starts_with(&self.0) && k.as_bytes().get(self.0.len()) == Some(&b'/'))
    }
}

impl fmt::Display for KeyPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The byte string a prefix or key is stored under in a radix trie so that trie ancestry is
/// segment ancestry: a trailing `/` makes `pay/ledger/` an ancestor of `pay/ledger/42/` and of
/// `pay/ledger/` but never of `pay/ledgers/`.
pub fn trie_key(s: &str) -> String {
    let mut k = String::with_capacity(s.len() + 1);
    k.push_str(s);
    k.push('/');
    k
}

/// A namespace name (a DNS label): the one rule, used for keys, prefixes, the registry's
/// Namespace documents and the filter's namespace table.
pub fn validate_namespace(ns: &str) -> Result<(), KeyError> {
    let b = ns.as_bytes();
    let ok_len = (1..=MAX_NAMESPACE_LEN).contains(&b.len());
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let ok_chars = b.iter().all(|c| alnum(c) || *c == b'-');
    let ok_ends = b.first().is_some_and(alnum) && b.last().is_some_and(alnum);
    if ok_len && ok_chars && ok_ends {
        Ok(())
    } else {
        Err(KeyError::BadNamespace)
    }
}

fn validate_path(path: &str) -> Result<(), KeyError> {
    if path.is_empty() || path.len() > MAX_PATH_LEN {
        return Err(KeyError::BadPathLength);
    }
    if path.chars().any(char::is_control) {
        return Err(KeyError::ControlCharacter);
    }
    if path
        .split('/')
        .any(|seg| seg.is_empty() || seg == "." || seg == "..")
    {
        return Err(KeyError::BadSegment);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_well_formed_keys() {
        let k = LockKey::parse("pay/ledger/42").unwrap();
        assert_eq!(k.namespace(), "pay");
        assert_eq!(k.path(), "ledger/42");
        assert!(LockKey::parse("a/b").is_ok());
        assert!(LockKey::parse("a-b-9/über/ключ").is_ok());
        let ns63 = "a".repeat(63);
        assert!(LockKey::parse(&format!("{ns63}/{}", "p".repeat(512))).is_ok());
    }

    #[test]
    fn rejects_each_rule() {
        use KeyError::*;
        let cases: &[(&str, KeyError)] = &[
            ("", Empty),
            ("pay", NoPath),
            ("Pay/x", BadNamespace),
            ("-pay/x", BadNamespace),
            ("pay-/x", BadNamespace),
            ("p_y/x", BadNamespace),
            ("/x", BadNamespace),
            ("pay/", BadPathLength),
            ("pay/a//b", BadSegment),
            ("pay/a/./b", BadSegment),
            ("pay/..", BadSegment),
            ("pay/a/", BadSegment),
            ("pay/a\nb", ControlCharacter),
            ("pay/a\u{7f}", ControlCharacter),
        ];
        for (input, want) in cases {
            assert_eq!(LockKey::parse(input).unwrap_err(), *want, "{input:?}");
        }
        assert_eq!(
            LockKey::parse(&format!("{}/x", "a".repeat(64))).unwrap_err(),
            BadNamespace
        );
        assert_eq!(
            LockKey::parse(&format!("a/{}", "p".repeat(513))).unwrap_err(),
            BadPathLength
        );
        assert_eq!(LockKey::parse(&"a".repeat(700)).unwrap_err(), TooLong);
    }

    #[test]
    fn prefixes_cover_on_segment_boundaries() {
        let p = KeyPrefix::parse("pay/ledger").unwrap();
        assert!(p.covers(&LockKey::parse("pay/ledger").unwrap()));
        assert!(p.covers(&LockKey::parse("pay/ledger/42").unwrap()));
        assert!(!p.covers(&LockKey::parse("pay/ledgers").unwrap()));
        assert!(!p.covers(&LockKey::parse("pay/ledge").unwrap()));
        let ns = KeyPrefix::parse("pay").unwrap();
        assert!(ns.covers(&LockKey::parse("pay/anything").unwrap()));
        assert!(!ns.covers(&LockKey::parse("payroll/x").unwrap()));
        assert_eq!(ns.namespace(), "pay");
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in "\\PC{0,700}") {
            let _ = LockKey::parse(&s);
            let _ = KeyPrefix::parse(&s);
        }

        #[test]
        fn trie_ancestry_is_segment_coverage(
            a in "[a-c]{1,2}(/[a-c]{1,2}){0,3}",
            b in "[a-c]{1,2}/[a-c]{1,2}(/[a-c]{1,2}){0,3}",
        ) {
            let prefix = KeyPrefix::parse(&a).unwrap();
            let key = LockKey::parse(&b).unwrap();
            prop_assert_eq!(trie_key(b.as_str()).starts_with(&trie_key(&a)), prefix.covers(&key));
        }
    }
}
