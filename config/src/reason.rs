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
    OutOfRange = 11,
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
    /// A KeepAlive stream asked to renew more sessions than one stream may carry, or an
    /// Observe reached an arbiter already serving its limit of Observe streams
    /// (RESOURCE_EXHAUSTED; metadata `limit`). An addition to DESIGN 4.4.
    StreamFull,
    /// An Observe asked to resume after a revision the store has compacted away
    /// (OUT_OF_RANGE; metadata `compact_revision`): observe from now. An addition.
    HistoryCompacted,
    /// An AcquireAll whose set cannot be granted as one (FAILED_PRECONDITION; metadata
    /// `why`): its keys live on more than one store, one is of a durable-fairness class,
    /// or the session already holds one of them. An addition.
    KeySetRefused,
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
            Reason::HistoryCompacted => "HISTORY_COMPACTED",
            Reason::Draining => "DRAINING",
            Reason::Moving => "MOVING",
            Reason::KeySetRefused => "KEY_SET_REFUSED",
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
            | Reason::WrongSessionPlace
            | Reason::KeySetRefused => GrpcCode::FailedPrecondition,
            Reason::InvalidKey | Reason::MalformedRequest => GrpcCode::InvalidArgument,
            Reason::Held => GrpcCode::Aborted,
            Reason::HistoryCompacted => GrpcCode::OutOfRange,
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

    /// What the refusal means and what the caller does about it: the text of the manual's
    /// errors page (`docs/src/reference/errors.md` is generated from this table).
    pub fn meaning(self) -> &'static str {
        match self {
            Reason::Unauthenticated => {
                "No client certificate, not exactly one URI SAN, no valid SPIFFE ID, or a foreign trust domain. Fix the workload's SVID (or its sidecar); retrying does not help."
            }
            Reason::NotGranted => {
                "No grant covers the key for this identity. The reply is byte-identical whether the key exists, is held or is free, so it says nothing about the key. Ask security for a grant (a reviewed registry change)."
            }
            Reason::RateLimited => {
                "The identity's request budget is spent. Metadata `retry_after_ms` says when to retry; the clients wait it out inside the caller's deadline."
            }
            Reason::RegionRedirect => {
                "The key's namespace is homed in another region; metadata `region` names it. Nothing was forwarded: call that region's edge."
            }
            Reason::InvalidKey => {
                "The key breaks the syntax or limits (`<namespace>/<path>`, segments never empty, `.` or `..`, 1..=512 bytes of path), or no lock class covers it."
            }
            Reason::MalformedRequest => {
                "Addition to the records: the body is not a decodable lock.v1 message (compressed, oversized, truncated, not gRPC), `x-lock-key` disagrees with the body, `lock-instance` is not 1..=253 of `A-Z a-z 0-9 . _ : -`, or a hold mode the arbiter does not know (anything but unset, EXCLUSIVE and SHARED)."
            }
            Reason::Held => {
                "Held by another session: at once (wait 0, code ABORTED), or still held when the caller's wait ended (DEADLINE_EXCEEDED). For a `fairness: durable` class a wait-0 call is also refused while waiters are queued (metadata `waiters`). Another replica of the caller's own identity holding the key is reported this way too: replicas wait for each other."
            }
            Reason::HeldDeadline => "Held by another session when the caller's wait ended.",
            Reason::LeakedHold => {
                "This process holds the key under another session (ADR-13): the same identity and the same instance (`lock-instance`), or, for a client that sends no instance, the same identity. The process lost its session (a renewal gap past the TTL) and asked again before its old hold lapsed; the old hold ends by itself within the TTL. A queue does not turn a leak into a wait. Replicas of one identity with their own instances are never told this: they queue. On a `shared: true` class it is also the answer to a session that holds the key in the other mode (shared and asking exclusive, or the reverse): release that hold first."
            }
            Reason::StaleToken => {
                "Release or validate with a token that is not the key's current grant (or not the caller's): the hold already ended or was handed on."
            }
            Reason::SessionExpired => {
                "The session's lease is gone, or the session is not this identity's (the two are indistinguishable on purpose). Open a new session; every hold of the old one has ended."
            }
            Reason::WrongSessionTtl => {
                "The key's class needs a session of another TTL; metadata `class` and `ttl_seconds` say which. The clients open one and retry."
            }
            Reason::Sealed => {
                "No epoch record: a fresh install, until `lockctl epoch init` creates it (the chart's post-install hook runs it). Or the store's cluster ID (or revision) differs from the one the epoch record is bound to: etcd was restored or replaced, and there are no grants until two operators advance the epoch (`lockctl epoch advance request`, then `approve` by a second)."
            }
            Reason::NoQuorum => {
                "etcd is unreachable or did not answer within the store timeout: no grant and no renewal (the closed posture). The outcome is unknown, not a refusal: a write etcd had not answered may still be applied (a stopped leader applies it when it resumes), so an Acquire answered NO_QUORUM may have been granted. The clients retry inside the deadline with the same session, and a retried Acquire gets that grant back; holders drain, then fence. An Acquire whose grant transaction's answer was lost is settled before it is answered (the arbiter puts a fence that transaction compares absent, then reads the holder back); only when that too fails is NO_QUORUM answered with \"this acquire's grant may still take effect\", and then nothing else that wait saw is answered as definite, not even a release handing it the key."
            }
            Reason::StoreFull => {
                "Addition: etcd's NOSPACE alarm is raised. No new grants or sessions; releases, renewals and reads still work. An operator compacts, defragments and disarms."
            }
            Reason::StreamFull => {
                "Addition: a KeepAlive stream asked to renew more than 16 sessions (metadata `limit`): open another stream. Or an Observe reached an arbiter already serving its limit of Observe streams (`--max-observers`): retry later, or Inspect instead."
            }
            Reason::HistoryCompacted => {
                "Addition: an Observe asked to resume after a revision the store has compacted away (metadata `compact_revision`). The changes in between are gone: observe from now (`after_revision` 0), which starts with the current holder. The clients do this themselves."
            }
            Reason::Draining => {
                "Addition: the arbiter is draining for a restart (SIGTERM). Nothing was done; the same request at the key's next owner is answered (the clients retry inside the deadline)."
            }
            Reason::Moving => {
                "Addition: the key's range is being moved between entity shards. Nothing was done; grants resume when the move completes (the clients retry inside the deadline)."
            }
            Reason::WrongSessionPlace => {
                "Addition: the session lives on another etcd cluster than the key (tiers, shards); metadata `cluster` names the key's. Open a session for the key and retry (the clients do)."
            }
            Reason::KeySetRefused => {
                "Addition: an AcquireAll whose set cannot be granted in one transaction; metadata `why` says which rule: `spans-stores` (its keys live on more than one etcd cluster: tiers or shards), `durable-class` (a key of a `fairness: durable` class, whose queue lives in etcd and a set would jump), `shared-class` (a key of a `shared: true` class, whose readers a set's transaction does not compare), `delayed-class` (a key of a class with `lockDelaySeconds`, whose delay a set's transaction does not honour), `semaphore-class` (a key of a `permits: N` class, held by permit, never by a set), `mixed-ttl` (its keys are of classes with different TTLs, and one session has one TTL), `own-hold` (the session already holds one of the keys, alone or in another set). Nothing was held. Ask for a set that fits, or take the keys one by one in key order."
            }
            Reason::UnknownMethod => {
                "Addition: the edge refuses methods it cannot authorise (fail closed)."
            }
            Reason::Internal => {
                "An error inside the service that fits no other reason; the message says what. Nothing a retry is known to fix."
            }
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

const ALL: [Reason; 23] = [
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
    Reason::HistoryCompacted,
    Reason::Draining,
    Reason::Moving,
    Reason::WrongSessionPlace,
    Reason::KeySetRefused,
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
