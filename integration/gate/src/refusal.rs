//! What a refused call did, as every gate worker records it: one rule for the main gate's
//! clients, its attacker and the shard gate's workers, so a history means the same
//! wherever it was written.

use lock_config::Reason;

/// A refused call's place in the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Definitely had no effect; the reason (or what stood for one) is recorded.
    Fail(String),
    /// May or may not have taken effect.
    Unknown(String),
}

/// The history's reading of a gRPC status.
///
/// - NO_QUORUM may follow a transaction that committed (docs/src/reference/errors.md).
/// - A wait that ran out is HELD on the wire, but it may also have ended on a slow store:
///   recorded as HELD_DEADLINE so the checks can tell.
/// - HELD because durable waiters are queued: the key may be free at that moment, which
///   the fenced-mutex model does not represent: recorded as HELD_QUEUED.
/// - Any other named reason is a definite refusal.
/// - No reason: a connection that could not be made sent nothing (its arbiter was
///   killed), a definite failure; anything else (a reset stream, a timeout) is unknown.
pub fn of_status(status: &tonic::Status) -> Refused {
    match lock_integration::reason_of(status) {
        Some((Reason::NoQuorum, _)) => Refused::Unknown(Reason::NoQuorum.as_str().into()),
        Some((Reason::HeldDeadline, _)) => Refused::Fail("HELD_DEADLINE".into()),
        Some((Reason::Held, meta)) if meta.contains_key("waiters") => {
            Refused::Fail("HELD_QUEUED".into())
        }
        Some((r, _)) => Refused::Fail(r.as_str().into()),
        None if never_sent(status.message()) => Refused::Fail("NOT_CONNECTED".into()),
        None => Refused::Unknown(format!("{:?}", status.code())),
    }
}

/// tonic's words for a channel whose TCP connection was refused before any request went.
fn never_sent(message: &str) -> bool {
    message.contains("tcp connect error")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::{Code, Status};

    fn refusal(code: Code, reason: Reason, meta: &[(&str, &str)]) -> Status {
        let details = lock_config::status_details::encode_status(reason, "m", meta);
        Status::with_details(code, "m", details.into())
    }

    #[test]
    fn statuses() {
        let cases = [
            (
                "NO_QUORUM: the write may have committed",
                refusal(Code::Unavailable, Reason::NoQuorum, &[]),
                Refused::Unknown("NO_QUORUM".into()),
            ),
            (
                "HELD: definite",
                refusal(Code::FailedPrecondition, Reason::Held, &[]),
                Refused::Fail("HELD".into()),
            ),
            (
                "HELD with durable waiters queued: recorded apart",
                refusal(Code::FailedPrecondition, Reason::Held, &[("waiters", "2")]),
                Refused::Fail("HELD_QUEUED".into()),
            ),
            (
                "a transport reset: unknown",
                Status::new(Code::Unavailable, "connection reset"),
                Refused::Unknown("Unavailable".into()),
            ),
            (
                "never connected: nothing was sent",
                Status::new(
                    Code::Unavailable,
                    "error trying to connect: tcp connect error: Connection refused",
                ),
                Refused::Fail("NOT_CONNECTED".into()),
            ),
            (
                "a deadline with no reason: unknown",
                Status::new(Code::DeadlineExceeded, "timeout"),
                Refused::Unknown("DeadlineExceeded".into()),
            ),
        ];
        for (why, status, want) in cases {
            let status: Status = status;
            assert_eq!(of_status(&status), want, "{why}");
        }
    }
}
