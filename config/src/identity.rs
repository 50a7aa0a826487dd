//! SPIFFE IDs (`spiffe://<trust-domain>/<path>`), parsed per the SPIFFE ID spec: trust domain
//! of `[a-z0-9._-]`, a non-empty path of segments of `[A-Za-z0-9._-]`, no `.`/`..`, no query,
//! fragment, port or user info, 2048 bytes at most.

use std::fmt;

const SCHEME: &str = "spiffe://";
pub const MAX_SPIFFE_ID_LEN: usize = 2048;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpiffeIdError {
    #[error("not a spiffe:// URI")]
    Scheme,
    #[error("SPIFFE ID longer than {MAX_SPIFFE_ID_LEN} bytes")]
    TooLong,
    #[error("trust domain must be non-empty [a-z0-9._-]")]
    TrustDomain,
    #[error("path must be non-empty segments of [A-Za-z0-9._-], without '.' or '..'")]
    Path,
}

#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpiffeId {
    full: String,
    td_len: usize,
}

impl SpiffeId {
    pub fn parse(s: &str) -> Result<Self, SpiffeIdError> {
        if s.len() > MAX_SPIFFE_ID_LEN {
            return Err(SpiffeIdError::TooLong);
        }
        let rest = s.strip_prefix(SCHEME).ok_or(SpiffeIdError::Scheme)?;
        let (td, path) = rest.split_once('/').ok_or(SpiffeIdError::Path)?;
        let td_ok = !td.is_empty()
            && td
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"._-".contains(&c));
        if !td_ok {
            return Err(SpiffeIdError::TrustDomain);
        }
        let seg_ok = |seg: &str| {
            !seg.is_empty()
                && seg != "."
                && seg != ".."
                && seg
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c))
        };
        if !path.split('/').all(seg_ok) {
            return Err(SpiffeIdError::Path);
        }
        Ok(Self {
            full: s.to_owned(),
            td_len: td.len(),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.full
    }

    pub fn trust_domain(&self) -> &str {
        &self.full[SCHEME.len()..SCHEME.len() + self.td_len]
    }
}

impl fmt::Debug for SpiffeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SpiffeId({:?})", self.full)
    }
}

impl fmt::Display for SpiffeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.full)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let id = SpiffeId::parse("spiffe://dev.lock.local/ns/pay/sa/ledger").unwrap();
        assert_eq!(id.trust_domain(), "dev.lock.local");
        for bad in [
            "",
            "http://x/y",
            "spiffe://",
            "spiffe://td",
            "spiffe://td/",
            "spiffe://TD/x",
            "spiffe://td/a//b",
            "spiffe://td/a/../b",
            "spiffe://td/a?b",
            "spiffe://td:443/a",
            "spiffe://user@td/a",
        ] {
            assert!(SpiffeId::parse(bad).is_err(), "{bad:?}");
        }
    }
}
