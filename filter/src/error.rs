//! Edge refusals and their one mapping onto the wire contract (DESIGN 4.4).
//!
//! Messages are fixed strings: they never echo a key, an identity or a token, and the
//! NOT_GRANTED reply is byte-identical whatever the state of the key (ADR-19).

use lock_config::{KeyError, Reason};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EdgeError {
    #[error("no verified client certificate")]
    NoPeerCertificate,
    #[error("client certificate has no valid SPIFFE ID")]
    InvalidSpiffeId,
    #[error("SPIFFE ID is not of a trusted trust domain")]
    ForeignTrustDomain,
    #[error("identity has no grant covering this key")]
    NotGranted,
    #[error("namespace is homed in another region")]
    RegionRedirect { region: String },
    #[error("invalid key: {0}")]
    InvalidKey(KeyError),
    #[error("a key set has 1..=16 distinct keys")]
    BadKeySet,
    #[error("request is not a decodable lock.v1 message")]
    Undecodable,
    #[error("compressed request messages are not accepted; send identity encoding")]
    Compressed,
    #[error("request message is larger than the edge accepts")]
    TooLarge,
    #[error("request body ended before its first message")]
    Truncated,
    #[error("not a gRPC request")]
    NotGrpc,
    #[error("method is not part of lock.v1")]
    UnknownMethod,
    #[error("the edge filter has no valid configuration")]
    Unconfigured,
    #[error("rate limit for this identity exceeded")]
    RateLimited { retry_after_ms: u64 },
}

/// A refusal ready for the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: Reason,
    pub message: String,
    pub metadata: Vec<(&'static str, String)>,
}

impl EdgeError {
    /// The one place edge errors become wire statuses.
    pub fn refusal(&self) -> Refusal {
        let reason = match self {
            EdgeError::NoPeerCertificate
            | EdgeError::InvalidSpiffeId
            | EdgeError::ForeignTrustDomain => Reason::Unauthenticated,
            EdgeError::NotGranted => Reason::NotGranted,
            EdgeError::RegionRedirect { .. } => Reason::RegionRedirect,
            EdgeError::InvalidKey(_) => Reason::InvalidKey,
            EdgeError::Undecodable
            | EdgeError::BadKeySet
            | EdgeError::Compressed
            | EdgeError::TooLarge
            | EdgeError::Truncated
            | EdgeError::NotGrpc => Reason::MalformedRequest,
            EdgeError::UnknownMethod => Reason::UnknownMethod,
            EdgeError::Unconfigured => Reason::Internal,
            EdgeError::RateLimited { .. } => Reason::RateLimited,
        };
        let metadata = match self {
            EdgeError::RegionRedirect { region } => vec![("region", region.clone())],
            EdgeError::RateLimited { retry_after_ms } => {
                vec![("retry_after_ms", retry_after_ms.to_string())]
            }
            _ => Vec::new(),
        };
        Refusal {
            reason,
            message: self.to_string(),
            metadata,
        }
    }
}
