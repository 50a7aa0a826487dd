//! Typed errors: every refusal of DESIGN 4.4 as a variant a caller can match on. The one
//! mapping from wire statuses is [`LockError::from_status`]. Messages never carry a token.

use lock_config::{ERROR_DOMAIN, Reason};
use std::time::Duration;
use tonic_types::StatusExt as _;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LockError {
    #[error("held by another session")]
    Held,
    #[error("held by this identity under another session (a leaked hold?)")]
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
    #[error("invalid key or request: {0}")]
    InvalidRequest(String),
    #[error("the token is not the key's current grant")]
    StaleToken,
    #[error("the session expired")]
    SessionExpired,
    #[error("class {class} needs a session with a {ttl_seconds} s TTL")]
    WrongSessionTtl { class: String, ttl_seconds: u32 },
    #[error("too many sessions on one KeepAlive stream: {0}")]
    StreamFull(String),
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
        let info = status
            .get_details_error_info()
            .filter(|i| i.domain == ERROR_DOMAIN);
        let Some(info) = info else {
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
        match Reason::from_wire(&info.reason) {
            Some(Reason::Held | Reason::HeldDeadline) => LockError::Held,
            Some(Reason::LeakedHold) => LockError::LeakedHold,
            Some(Reason::RegionRedirect) => LockError::RegionRedirect {
                region: meta("region"),
            },
            Some(Reason::RateLimited) => LockError::RateLimited {
                retry_after: Duration::from_millis(meta("retry_after_ms").parse().unwrap_or(1000)),
            },
            Some(Reason::Sealed) => LockError::Sealed,
            Some(Reason::NoQuorum) => LockError::NoQuorum,
            Some(Reason::StoreFull) => LockError::StoreFull,
            Some(Reason::NotGranted) => LockError::NotGranted,
            Some(Reason::Unauthenticated) => {
                LockError::Unauthenticated(status.message().to_owned())
            }
            Some(Reason::InvalidKey | Reason::MalformedRequest | Reason::UnknownMethod) => {
                LockError::InvalidRequest(status.message().to_owned())
            }
            Some(Reason::StaleToken) => LockError::StaleToken,
            Some(Reason::SessionExpired) => LockError::SessionExpired,
            Some(Reason::WrongSessionTtl) => LockError::WrongSessionTtl {
                class: meta("class"),
                ttl_seconds: meta("ttl_seconds").parse().unwrap_or(0),
            },
            Some(Reason::StreamFull) => LockError::StreamFull(status.message().to_owned()),
            Some(Reason::Internal) | None => LockError::Other {
                code: status.code(),
                message: status.message().to_owned(),
            },
        }
    }

    /// Worth retrying inside the caller's deadline.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            LockError::NoQuorum | LockError::Unavailable(_) | LockError::RateLimited { .. }
        )
    }
}

impl From<tonic::Status> for LockError {
    fn from(s: tonic::Status) -> Self {
        LockError::from_status(&s)
    }
}
