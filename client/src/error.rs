//! Typed errors: every refusal of DESIGN 4.4 as a variant a caller can match on. The one
//! mapping from wire statuses is [`LockError::from_status`]. Messages never carry a token.

use lock_config::Reason;
use lock_config::status_details::{Refusal, refusal_of};
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LockError {
    #[error("held by another session")]
    Held,
    #[error("held by this process instance under another session (a leaked hold?)")]
    LeakedHold,
    #[error("namespace is homed in region {region}")]
    RegionRedirect { region: String },
    #[error("rate limited; retry after {retry_after:?}")]
    RateLimited { retry_after: Duration },
    #[error("the store is sealed (restore without epoch advance)")]
    Sealed,
    #[error("the store has no quorum")]
    NoQuorum,
    #[error("the store is out of space")]
    StoreFull,
    #[error("no grant covers this key for this identity")]
    NotGranted,
    #[error("not authenticated: {0}")]
    Unauthenticated(String),
    /// The service refused the key (INVALID_KEY): its syntax, or no class covers it.
    #[error("invalid key: {0}")]
    InvalidKey(String),
    /// A request the client or the service could not take as it was (a bad argument, a
    /// malformed message, an endpoint or TLS setting).
    #[error("invalid key or request: {0}")]
    InvalidRequest(String),
    #[error("the token is not the key's current grant")]
    StaleToken,
    #[error("the session expired")]
    SessionExpired,
    #[error("class {class} needs a session with a {ttl_seconds} s TTL")]
    WrongSessionTtl { class: String, ttl_seconds: u32 },
    #[error("the key lives on cluster {cluster}, not on this session's")]
    WrongSessionPlace { cluster: String },
    #[error("the key's range is moving between shards")]
    Moving,
    #[error("stream limit reached: {0}")]
    StreamFull(String),
    #[error("the store compacted past the last revision seen (to {compact_revision})")]
    HistoryCompacted { compact_revision: i64 },
    #[error("the key set cannot be granted as one ({why}): {message}")]
    KeySetRefused { why: String, message: String },
    #[error("the hold was fenced: its session could not be renewed in time")]
    Fenced,
    #[error("cannot reach the lock service: {0}")]
    Unavailable(String),
    #[error("lock service error {code:?}: {message}")]
    Other { code: tonic::Code, message: String },
}

impl LockError {
    /// The one place wire statuses become typed errors.
    pub fn from_status(status: &tonic::Status) -> Self {
        let Some(info) = refusal(status) else {
            return match status.code() {
                tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled => {
                    LockError::Unavailable(status.message().to_owned())
                }
                code => LockError::Other {
                    code,
                    message: status.message().to_owned(),
                },
            };
        };
        let meta = |k: &str| info.metadata.get(k).cloned().unwrap_or_default();
        match info.reason {
            Reason::Held | Reason::HeldDeadline => LockError::Held,
            Reason::LeakedHold => LockError::LeakedHold,
            Reason::RegionRedirect => LockError::RegionRedirect {
                region: meta("region"),
            },
            Reason::RateLimited => LockError::RateLimited {
                retry_after: Duration::from_millis(meta("retry_after_ms").parse().unwrap_or(1000)),
            },
            Reason::Sealed => LockError::Sealed,
            Reason::NoQuorum => LockError::NoQuorum,
            Reason::StoreFull => LockError::StoreFull,
            // Nothing was done; the key's next owner answers the same request.
            Reason::Draining => LockError::Unavailable(status.message().to_owned()),
            Reason::NotGranted => LockError::NotGranted,
            Reason::Unauthenticated => LockError::Unauthenticated(status.message().to_owned()),
            Reason::InvalidKey => LockError::InvalidKey(status.message().to_owned()),
            Reason::MalformedRequest | Reason::UnknownMethod => {
                LockError::InvalidRequest(status.message().to_owned())
            }
            Reason::StaleToken => LockError::StaleToken,
            Reason::SessionExpired => LockError::SessionExpired,
            Reason::WrongSessionTtl => LockError::WrongSessionTtl {
                class: meta("class"),
                ttl_seconds: meta("ttl_seconds").parse().unwrap_or(0),
            },
            Reason::StreamFull => LockError::StreamFull(status.message().to_owned()),
            Reason::HistoryCompacted => LockError::HistoryCompacted {
                compact_revision: meta("compact_revision").parse().unwrap_or(0),
            },
            Reason::Moving => LockError::Moving,
            Reason::WrongSessionPlace => LockError::WrongSessionPlace {
                cluster: meta("cluster"),
            },
            Reason::KeySetRefused => LockError::KeySetRefused {
                why: meta("why"),
                message: status.message().to_owned(),
            },
            Reason::Internal => LockError::Other {
                code: status.code(),
                message: status.message().to_owned(),
            },
        }
    }

    /// The contract reason this error stands for: the inverse of [`LockError::from_status`],
    /// for printing a refusal the way the raw status prints (`lockctl`). None for what the
    /// client decided itself (fenced, unreachable, a bad argument, an unknown status).
    pub fn reason(&self) -> Option<Reason> {
        Some(match self {
            LockError::Held => Reason::Held,
            LockError::LeakedHold => Reason::LeakedHold,
            LockError::RegionRedirect { .. } => Reason::RegionRedirect,
            LockError::RateLimited { .. } => Reason::RateLimited,
            LockError::Sealed => Reason::Sealed,
            LockError::NoQuorum => Reason::NoQuorum,
            LockError::StoreFull => Reason::StoreFull,
            LockError::NotGranted => Reason::NotGranted,
            LockError::InvalidKey(_) => Reason::InvalidKey,
            LockError::Unauthenticated(_) => Reason::Unauthenticated,
            LockError::StaleToken => Reason::StaleToken,
            LockError::SessionExpired => Reason::SessionExpired,
            LockError::WrongSessionTtl { .. } => Reason::WrongSessionTtl,
            LockError::WrongSessionPlace { .. } => Reason::WrongSessionPlace,
            LockError::Moving => Reason::Moving,
            LockError::StreamFull(_) => Reason::StreamFull,
            LockError::HistoryCompacted { .. } => Reason::HistoryCompacted,
            LockError::KeySetRefused { .. } => Reason::KeySetRefused,
            LockError::InvalidRequest(_)
            | LockError::Fenced
            | LockError::Unavailable(_)
            | LockError::Other { .. } => return None,
        })
    }

    /// The `ErrorInfo` metadata the refusal carried, as far as the variant keeps it.
    pub fn metadata(&self) -> Vec<(&'static str, String)> {
        match self {
            LockError::RegionRedirect { region } => vec![("region", region.clone())],
            LockError::RateLimited { retry_after } => {
                vec![("retry_after_ms", retry_after.as_millis().to_string())]
            }
            LockError::WrongSessionTtl { class, ttl_seconds } => vec![
                ("class", class.clone()),
                ("ttl_seconds", ttl_seconds.to_string()),
            ],
            LockError::WrongSessionPlace { cluster } => vec![("cluster", cluster.clone())],
            LockError::KeySetRefused { why, .. } => vec![("why", why.clone())],
            LockError::HistoryCompacted { compact_revision } => {
                vec![("compact_revision", compact_revision.to_string())]
            }
            _ => Vec::new(),
        }
    }

    /// Worth retrying inside the caller's deadline.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            LockError::NoQuorum
                | LockError::Unavailable(_)
                | LockError::RateLimited { .. }
                | LockError::Moving
        )
    }
}

/// The contract refusal a status carries (reason and metadata), if any: for callers that
/// speak lock.v1 through the raw stubs ([`crate::stub`]) rather than [`crate::LockClient`].
pub fn refusal(status: &tonic::Status) -> Option<Refusal> {
    refusal_of(status.code() as i32, status.details())
}

impl From<tonic::Status> for LockError {
    fn from(s: tonic::Status) -> Self {
        LockError::from_status(&s)
    }
}
