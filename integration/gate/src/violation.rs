//! A violation of a check, as every checker reports it, and the revision half of a token
//! that most checks compare.

use lock_config::FencingToken;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub check: &'static str,
    pub key: String,
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}] {}: {}", self.check, self.key, self.detail)
    }
}

/// The revision half of a token.
pub fn revision(token: u64) -> i64 {
    FencingToken::from_u64(token)
        .ok()
        .and_then(|t| i64::try_from(t.revision()).ok())
        .unwrap_or(i64::MAX)
}
