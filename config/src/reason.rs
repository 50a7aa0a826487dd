//! The error contract of DESIGN 4.4: every refusal is a gRPC status plus a
//! `google.rpc.ErrorInfo` whose reason is one of these, in domain [`ERROR_DOMAIN`].
//! The filter and the arbiter each map their own error types onto this enum in one place.

/// `ErrorInfo.domain` of every refusal.
pub const ERROR_DOMAIN: &str = "lock.v1";

/// gRPC status codes used by the contract (numeric values from the gRPC spec).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum GrpcCode {
    InvalidArgument = 3,
    DeadlineExceeded = 4,
    NotFound = 5,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    FailedPrecondition = 9,
    Aborted = 10,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
    Unauthenticated = 16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    Unauthenticated,
    NotGranted,
    RateLimited,
    RegionRedirect,
    InvalidKey,
    /// The request could not be read as a lock.v1 message (not in DESIGN 4.4's table, which
    /// assumes a decodable request; the code is the same INVALID_ARGUMENT as INVALID_KEY).
    MalformedRequest,
    /// Contention, refused at once (ABORTED).
    Held,
    /// Contention, still held when the caller's wait deadline passed (DEADLINE_EXCEEDED).
    HeldDeadline,
    LeakedHold,
    StaleToken,
    SessionExpired,
    WrongSessionTtl,
    Sealed,
    NoQuorum,
    /// etcd raised its NOSPACE alarm: no new grants or sessions (closed); releases,
    /// renewals and reads still work. An addition to DESIGN 4.4.
    StoreFull,
    /// The arbiter is draining for a restart (SIGTERM): nothing was done; the same request
    /// at the key's next owner will be answered (UNAVAILABLE, retryable). An addition to
    /// DESIGN 4.4.
    Draining,
    /// The key's range is being moved between entity shards (ADR-09): nothing was done;
    /// grants resume when the move completes (UNAVAILABLE, retryable). An addition to
    /// DESIGN 4.4.
    Moving,
    /// The session lives on another cluster than the key (tiers and shards, ADR-07/09):
    /// open a session for this key (metadata `cluster` names where it lives) and retry
    /// (FAILED_PRECONDITION, like WRONG_SESSION_TTL). An addition to DESIGN 4.4.
    WrongSessionPlace,
    /// A KeepAlive stream asked to renew more sessions than one stream may carry
    /// (RESOURCE_EXHAUSTED; metadata `limit`). An addition to DESIGN 4.4.
    StreamFull,
    /// A method the edge does not know how to authorise (fail closed).
    UnknownMethod,
    Internal,
}

impl Reason {
    /// The `ErrorInfo.reason` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Unauthenticated => "UNAUTHENTICATED",
            Reason::NotGranted => "NOT_GRANTED",
            Reason::RateLimited => "RATE_LIMITED",
            Reason::RegionRedirect => "REGION_REDIRECT",
            Reason::InvalidKey => "INVALID_KEY",
            Reason::MalformedRequest => "MALFORMED_REQUEST",
            Reason::Held | Reason::HeldDeadline => "HELD",
            Reason::LeakedHold => "LEAKED_HOLD",
            Reason::StaleToken => "STALE_TOKEN",
            Reason::SessionExpired => "SESSION_EXPIRED",
            Reason::WrongSessionTtl => "WRONG_SESSION_TTL",
            Reason::Sealed => "SEALED",
            Reason::NoQuorum => "NO_QUORUM",
            Reason::StoreFull => "STORE_FULL",
            Reason::StreamFull => "STREAM_FULL",
            Reason::Draining => "DRAINING",
            Reason::Moving => "MOVING",
            Reason::WrongSessionPlace => "WRONG_SESSION_PLACE",
            Reason::UnknownMethod => "UNKNOWN_METHOD",
            Reason::Internal => "INTERNAL",
        }
    }

    pub fn code(self) -> GrpcCode {
        match self {
            Reason::Unauthenticated => GrpcCode::Unauthenticated,
            Reason::NotGranted => GrpcCode::PermissionDenied,
            Reason::RateLimited | Reason::StreamFull => GrpcCode::ResourceExhausted,
            Reason::RegionRedirect
            | Reason::LeakedHold
            | Reason::StaleToken
            | Reason::WrongSessionTtl
            | Reason::WrongSessionPlace => GrpcCode::FailedPrecondition,
            Reason::InvalidKey | Reason::MalformedRequest => GrpcCode::InvalidArgument,
            Reason::Held => GrpcCode::Aborted,
            Reason::HeldDeadline => GrpcCode::DeadlineExceeded,
            Reason::SessionExpired => GrpcCode::NotFound,
            Reason::Sealed
            | Reason::NoQuorum
            | Reason::StoreFull
            | Reason::Draining
            | Reason::Moving => GrpcCode::Unavailable,
            Reason::UnknownMethod => GrpcCode::Unimplemented,
            Reason::Internal => GrpcCode::Internal,
        }
    }

    /// Every reason (for declaring one series per reason up front).
    pub fn all() -> &'static [Reason] {
        &ALL
    }

    /// Parses an `ErrorInfo.reason` (HELD maps to the immediate variant).
    pub fn from_wire(s: &str) -> Option<Self> {
        ALL.iter().copied().find(|r| r.as_str() == s)
    }
}

const ALL: [Reason; 21] = [
    Reason::Unauthenticated,
    Reason::NotGranted,
    Reason::RateLimited,
    Reason::RegionRedirect,
    Reason::InvalidKey,
    Reason::MalformedRequest,
    Reason::Held,
    Reason::HeldDeadline,
    Reason::LeakedHold,
    Reason::StaleToken,
    Reason::SessionExpired,
    Reason::WrongSessionTtl,
    Reason::Sealed,
    Reason::NoQuorum,
    Reason::StoreFull,
    Reason::StreamFull,
    Reason::Draining,
    Reason::Moving,
    Reason::WrongSessionPlace,
    Reason::UnknownMethod,
    Reason::Internal,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_design_4_4() {
        let expect = [
            ("UNAUTHENTICATED", 16),
            ("NOT_GRANTED", 7),
            ("RATE_LIMITED", 8),
            ("REGION_REDIRECT", 9),
            ("INVALID_KEY", 3),
            ("LEAKED_HOLD", 9),
            ("STALE_TOKEN", 9),
            ("SESSION_EXPIRED", 5),
            ("WRONG_SESSION_TTL", 9),
            ("SEALED", 14),
            ("NO_QUORUM", 14),
            // Additions: a move is retryable, a session elsewhere is the caller's to fix.
            ("MOVING", 14),
            ("WRONG_SESSION_PLACE", 9),
        ];
        for (reason, code) in expect {
            let r = Reason::from_wire(reason).unwrap();
            assert_eq!(r.code() as i32, code, "{reason}");
        }
        assert_eq!(Reason::Held.code() as i32, 10);
        assert_eq!(Reason::HeldDeadline.code() as i32, 4);
        assert_eq!(Reason::HeldDeadline.as_str(), "HELD");
    }
}
