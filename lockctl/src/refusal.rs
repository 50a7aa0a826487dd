//! How every subcommand prints a refusal: `REASON (Code): message [k=v ...]`, whether it
//! came as a raw status (`acquire`, `inspect`, ...) or through lock-client (`run`), so a
//! script matches one form (issue 32: `run` printed Rust's Debug form).

use crate::Failure;
use lock_client::LockError;

/// The one line: reason, gRPC code, message, then the metadata sorted by key.
pub fn line(reason: &str, code: tonic::Code, message: &str, mut meta: Vec<String>) -> String {
    meta.sort();
    format!("{reason} ({code:?}): {message} {}", meta.join(" "))
        .trim_end()
        .to_owned()
}

/// A refusal the service sent as a status.
pub fn of_status(status: tonic::Status) -> Failure {
    let code = status.code();
    match lock_client::refusal(&status) {
        Some(r) => {
            let meta = r
                .metadata
                .into_iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            by_cause(
                r.reason,
                line(r.reason.as_str(), code, status.message(), meta),
            )
        }
        None if matches!(code, tonic::Code::Unavailable | tonic::Code::Unknown) => {
            Failure::unreachable(format!("{code:?}: {}", status.message()))
        }
        None => Failure::refused(line("UNKNOWN", code, status.message(), Vec::new())),
    }
}

/// A refusal lock-client reported; `waited`: the caller asked to wait, so contention at
/// the end is the wait's deadline (DEADLINE_EXCEEDED), as the service answers it.
pub fn of_lock_error(e: LockError, waited: bool) -> Failure {
    // A key the service cannot take is the caller's input to fix, as a bad argument is.
    if let LockError::InvalidKey(_) = e {
        return Failure::input(e.to_string());
    }
    let Some(reason) = e.reason() else {
        return match e {
            LockError::Unavailable(_) => Failure::unreachable(e.to_string()),
            LockError::InvalidRequest(_) => Failure::input(e.to_string()),
            LockError::Other { code, ref message } => {
                Failure::refused(line("UNKNOWN", code, message, Vec::new()))
            }
            e => Failure::refused(e.to_string()),
        };
    };
    let reason = match reason {
        lock_client::Reason::Held if waited => lock_client::Reason::HeldDeadline,
        r => r,
    };
    let code = tonic::Code::from_i32(reason.code() as i32);
    let meta = e
        .metadata()
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    by_cause(reason, line(reason.as_str(), code, &e.to_string(), meta))
}

/// The exit code by cause: NO_QUORUM is etcd out of the arbiter's reach, so it exits as
/// unreachable (3), like a service out of lockctl's own reach; every other reason is a
/// refusal (1). Either way the one line is printed.
fn by_cause(reason: lock_client::Reason, message: String) -> Failure {
    match reason {
        lock_client::Reason::NoQuorum => Failure::unreachable(message),
        _ => Failure::refused(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_prints_one_form() {
        let cases: Vec<(LockError, bool, u8, &str)> = vec![
            (
                LockError::RegionRedirect {
                    region: "eu-far".into(),
                },
                false,
                1,
                "REGION_REDIRECT (FailedPrecondition): namespace is homed in region eu-far region=eu-far",
            ),
            (
                LockError::LeakedHold,
                false,
                1,
                "LEAKED_HOLD (FailedPrecondition): held by this process instance under another session (a leaked hold?)",
            ),
            (
                LockError::Held,
                true,
                1,
                "HELD (DeadlineExceeded): held by another session",
            ),
            (
                LockError::Held,
                false,
                1,
                "HELD (Aborted): held by another session",
            ),
            (
                LockError::Unavailable("no route".into()),
                false,
                3,
                "cannot reach the lock service: no route",
            ),
            (
                LockError::InvalidRequest("bad key".into()),
                false,
                2,
                "invalid key or request: bad key",
            ),
        ];
        for (e, waited, exit, want) in cases {
            let f = of_lock_error(e, waited);
            assert_eq!((f.exit, f.message.as_str()), (exit, want));
        }
        // A quorum loss is etcd unreachable: exit 3 on both paths, the line as any refusal.
        let details = lock_config::status_details::encode_status(
            lock_config::Reason::NoQuorum,
            "store unavailable or without quorum",
            &[],
        );
        let status = tonic::Status::with_details(
            tonic::Code::Unavailable,
            "store unavailable or without quorum",
            details.into(),
        );
        let f = of_status(status);
        assert_eq!(f.exit, 3, "{}", f.message);
        assert!(
            f.message.starts_with("NO_QUORUM (Unavailable): "),
            "{}",
            f.message
        );
        let f = of_lock_error(LockError::NoQuorum, false);
        assert_eq!(f.exit, 3, "{}", f.message);
        assert!(
            f.message.starts_with("NO_QUORUM (Unavailable): "),
            "{}",
            f.message
        );
        // The raw-status path prints the same shape.
        let f = of_status(tonic::Status::unavailable("gone"));
        assert_eq!((f.exit, f.message.as_str()), (3, "Unavailable: gone"));
    }
}
