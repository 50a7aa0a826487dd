//! Arbiter errors and their one mapping to gRPC statuses with `google.rpc.ErrorInfo`
//! (DESIGN 4.4). Messages never contain a token.

use lock_config::status_details::encode_status;
use lock_config::{GrpcCode, KeyError, Reason};
use lock_store::StoreError;
use tonic::{Code, Status};

#[derive(Debug, thiserror::Error)]
pub enum ArbiterError {
    #[error("request did not come through the edge: no x-lock-identity")]
    NoIdentity,
    #[error("x-lock-key does not match the key in the request")]
    KeyHeaderMismatch,
    #[error("invalid key: {0}")]
    InvalidKey(#[from] KeyError),
    #[error("no lock class covers this key")]
    NoClass,
    #[error("token is not a valid fencing token")]
    MalformedToken,
    #[error("hold mode {0} is not one this arbiter knows (unset, EXCLUSIVE 1, SHARED 2)")]
    UnknownMode(i32),
    #[error("{0}")]
    BadInstance(lock_config::instance::InstanceError),
    #[error("held by another session")]
    Held,
    #[error(
        "{waiters} waiter(s) queued for this key (fairness: durable): a caller that will not wait does not overtake them"
    )]
    Queued { waiters: usize },
    #[error("still held by another session when the wait deadline passed")]
    HeldDeadline,
    #[error(
        "held by this process instance (or, without lock-instance, this identity) under another session (leaked hold?)"
    )]
    LeakedHold,
    #[error("token does not name the current grant of this key")]
    StaleToken,
    #[error("no such session for this identity (expired or never opened)")]
    SessionNotFound,
    #[error("class {class} needs a session with a TTL of {ttl_seconds} s")]
    WrongSessionTtl { class: String, ttl_seconds: u32 },
    #[error("sealed: {0}")]
    Sealed(String),
    #[error("store unavailable or without quorum")]
    NoQuorum,
    #[error(
        "store unavailable: this acquire's grant may still take effect (its transaction's answer was lost and it could not be settled); acquire again on this session to learn"
    )]
    GrantInDoubt,
    #[error(
        "store is out of space (etcd NOSPACE alarm): no new grants until an operator frees space"
    )]
    StoreFull,
    #[error("at most {limit} sessions may be renewed on one KeepAlive stream")]
    StreamFull { limit: usize },
    #[error("this arbiter already serves {limit} Observe streams: retry later, or Inspect")]
    ObserversFull { limit: usize },
    #[error(
        "the store has compacted the changes after that revision (compacted to {compact_revision}): observe from now"
    )]
    HistoryCompacted { compact_revision: i64 },
    #[error("this arbiter is draining for a restart: retry, the key's next owner answers")]
    Draining,
    #[error("the key's range is moving between shards: retry shortly")]
    Moving,
    #[error("the key lives on cluster {cluster}: open a session for this key there")]
    WrongSessionPlace { cluster: String },
    #[error("a Hold stream carries one acquire, then one release of its grant: {0}")]
    HoldOutOfOrder(&'static str),
    #[error("{0}")]
    BadKeySet(lock_config::KeySetError),
    #[error("the key set cannot be granted as one: {detail}")]
    KeySetRefused { why: &'static str, detail: String },
    #[error("class {class} does not allow shared holds (shared: true): acquire it exclusive")]
    NotShared { class: String },
    #[error("class {class} is not a semaphore (permits: N): acquire it without PERMIT")]
    NotSemaphore { class: String },
    #[error(
        "class {class} is a semaphore of {permits} permits: acquire and release with mode PERMIT"
    )]
    SemaphoreMode { class: String, permits: u32 },
    #[error(
        "class {class} is a semaphore of {permits} permits: Observe reports one holder, not permits (use Inspect)"
    )]
    SemaphoreNotObservable { class: String, permits: u32 },
    /// A store failure that is not a refusal the contract names (those are `NoQuorum` and
    /// `StoreFull`, which [`From<StoreError>`] picks out): INTERNAL, in the store's words.
    #[error(transparent)]
    Store(StoreError),
    /// A state the arbiter's own code holds impossible. Its words keep the `store error: `
    /// they have always been answered with.
    #[error("store error: {0}")]
    Internal(Internal),
}

/// What the arbiter's own code holds impossible (INTERNAL if it happens).
#[derive(Debug, thiserror::Error)]
pub enum Internal {
    /// A waiter's state machine given an event its state has no rule for.
    #[error("waiter: no transition from {0}")]
    NoTransition(String),
    /// A FIFO wait told to await its grant attempt when none was sent.
    #[error("no transaction in flight")]
    NoAttemptInFlight,
    /// A durable wait leaving with a step its driver does not run there.
    #[error("durable wait: no driver for {0} while leaving")]
    NoDriver(String),
    /// A revision the fencing token cannot carry (or an epoch outside its range).
    #[error("cannot mint token: {0}")]
    Mint(lock_config::token::TokenError),
}

impl ArbiterError {
    pub fn reason(&self) -> Reason {
        match self {
            ArbiterError::NoIdentity => Reason::Unauthenticated,
            ArbiterError::KeyHeaderMismatch
            | ArbiterError::MalformedToken
            | ArbiterError::UnknownMode(_)
            | ArbiterError::BadInstance(_)
            | ArbiterError::HoldOutOfOrder(_)
            | ArbiterError::NotShared { .. }
            | ArbiterError::NotSemaphore { .. }
            | ArbiterError::SemaphoreMode { .. }
            | ArbiterError::SemaphoreNotObservable { .. } => Reason::MalformedRequest,
            ArbiterError::InvalidKey(_) | ArbiterError::NoClass => Reason::InvalidKey,
            ArbiterError::BadKeySet(lock_config::KeySetError::Key(_)) => Reason::InvalidKey,
            ArbiterError::BadKeySet(_) => Reason::MalformedRequest,
            ArbiterError::KeySetRefused { .. } => Reason::KeySetRefused,
            ArbiterError::Held | ArbiterError::Queued { .. } => Reason::Held,
            ArbiterError::HeldDeadline => Reason::HeldDeadline,
            ArbiterError::LeakedHold => Reason::LeakedHold,
            ArbiterError::StaleToken => Reason::StaleToken,
            ArbiterError::SessionNotFound => Reason::SessionExpired,
            ArbiterError::WrongSessionTtl { .. } => Reason::WrongSessionTtl,
            ArbiterError::Sealed(_) => Reason::Sealed,
            ArbiterError::NoQuorum | ArbiterError::GrantInDoubt => Reason::NoQuorum,
            ArbiterError::StoreFull => Reason::StoreFull,
            ArbiterError::StreamFull { .. } | ArbiterError::ObserversFull { .. } => {
                Reason::StreamFull
            }
            ArbiterError::HistoryCompacted { .. } => Reason::HistoryCompacted,
            ArbiterError::Draining => Reason::Draining,
            ArbiterError::Moving => Reason::Moving,
            ArbiterError::WrongSessionPlace { .. } => Reason::WrongSessionPlace,
            ArbiterError::Store(_) | ArbiterError::Internal(_) => Reason::Internal,
        }
    }

    fn metadata(&self) -> Vec<(&'static str, String)> {
        match self {
            ArbiterError::WrongSessionTtl { class, ttl_seconds } => vec![
                ("class", class.clone()),
                ("ttl_seconds", ttl_seconds.to_string()),
            ],
            ArbiterError::StreamFull { limit } | ArbiterError::ObserversFull { limit } => {
                vec![("limit", limit.to_string())]
            }
            ArbiterError::HistoryCompacted { compact_revision } => {
                vec![("compact_revision", compact_revision.to_string())]
            }
            ArbiterError::WrongSessionPlace { cluster } => vec![("cluster", cluster.clone())],
            ArbiterError::Queued { waiters } => vec![("waiters", waiters.to_string())],
            ArbiterError::KeySetRefused { why, .. } => vec![("why", (*why).to_owned())],
            _ => Vec::new(),
        }
    }
}

fn code(c: GrpcCode) -> Code {
    match c {
        GrpcCode::InvalidArgument => Code::InvalidArgument,
        GrpcCode::DeadlineExceeded => Code::DeadlineExceeded,
        GrpcCode::NotFound => Code::NotFound,
        GrpcCode::PermissionDenied => Code::PermissionDenied,
        GrpcCode::ResourceExhausted => Code::ResourceExhausted,
        GrpcCode::FailedPrecondition => Code::FailedPrecondition,
        GrpcCode::Aborted => Code::Aborted,
        GrpcCode::OutOfRange => Code::OutOfRange,
        GrpcCode::Unimplemented => Code::Unimplemented,
        GrpcCode::Internal => Code::Internal,
        GrpcCode::Unavailable => Code::Unavailable,
        GrpcCode::Unauthenticated => Code::Unauthenticated,
    }
}

impl From<ArbiterError> for Status {
    fn from(e: ArbiterError) -> Status {
        let reason = e.reason();
        // Every refusal passes here once: the count by reason (never the key or caller).
        crate::ops::metrics::METRICS.refused(reason);
        if reason == Reason::Internal {
            // Not a refusal the contract names: the operator needs its words (which never
            // carry a token: see the messages above).
            tracing::warn!(error = %e, "internal error answered");
        }
        let message = e.to_string();
        let metadata = e.metadata();
        let pairs: Vec<(&str, &str)> = metadata.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let details = encode_status(reason, &message, &pairs);
        Status::with_details(code(reason.code()), message, details.into())
    }
}

/// The store's failures: its two the contract names (NO_QUORUM: unavailable or timed out,
/// the closed posture of ADR-04; STORE_FULL), every other cause INTERNAL in its own words.
/// Listed whole, so a new cause is a decision here.
impl From<StoreError> for ArbiterError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NoQuorum => ArbiterError::NoQuorum,
            StoreError::Full => ArbiterError::StoreFull,
            StoreError::Etcd(_)
            | StoreError::Connect(_)
            | StoreError::Undecodable(_)
            | StoreError::Absent(_)
            | StoreError::Malformed(_)
            | StoreError::Contended(_)
            | StoreError::Epoch(_)
            | StoreError::Map(_)
            | StoreError::Move(_)
            | StoreError::Stopped(_) => ArbiterError::Store(e),
        }
    }
}

/// etcd's errors as the store reads them (`lock_store`'s `error.rs`), for the arbiter's own
/// calls on etcd-client's clients (watches, the seal's reads).
impl From<etcd_client::Error> for ArbiterError {
    fn from(e: etcd_client::Error) -> Self {
        StoreError::from(e).into()
    }
}

/// Why a wait ended without the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The caller's wait deadline passed.
    Deadline,
    /// The arbiter started draining (SIGTERM): the caller retries at the key's next owner.
    Draining,
}

impl Ended {
    /// The refusal the waiter is answered with.
    pub fn refusal(self) -> ArbiterError {
        match self {
            Self::Deadline => ArbiterError::HeldDeadline,
            Self::Draining => ArbiterError::Draining,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_carry_error_info() {
        let s: Status = ArbiterError::WrongSessionTtl {
            class: "c".into(),
            ttl_seconds: 60,
        }
        .into();
        assert_eq!(s.code(), Code::FailedPrecondition);
        let info = lock_config::status_details::decode_error_info(s.details()).unwrap();
        assert_eq!(info.reason, "WRONG_SESSION_TTL");
        assert_eq!(info.domain, "lock.v1");
        assert_eq!(info.metadata["ttl_seconds"], "60");
        let s: Status = ArbiterError::Held.into();
        assert_eq!(s.code(), Code::Aborted);
    }
}
