//! The client's process instance (`lock-instance` request metadata, issue 32).
//!
//! In a mesh a SPIFFE ID names a service account, so every replica of a Deployment shares
//! one identity. Leak detection (ADR-13, DESIGN 8) must tell "this process lost its session
//! and asks again" from "a sibling replica asks for the key": the first is a leak, the second
//! an ordinary contender that queues. The instance names the client object:
//! `<prefix>:<pid>:<n>`, the prefix the pod UID when the workload passes one
//! (`LOCK_INSTANCE`, from the downward API) or random per process, `n` counting the
//! process's client objects from 1. Two client objects in one process and the worker
//! processes of one pod queue; a container restarting as pid 1 and making its first client
//! again meets its previous life's hold as a leak.
//!
//! It is sent with OpenSession and bound to the session (`/s/<lease>`), and every grant's
//! holder record copies it from the session. It is *not* an identity claim and the edge
//! passes it as is: a client that lies about it can only make itself wait behind its own
//! hold instead of being told it leaked one. Without it the older rule holds: the same
//! identity under another session is a leak.

/// The request metadata carrying the instance (not `x-lock-*`: the client's to send).
pub const INSTANCE_HEADER: &str = "lock-instance";
/// The environment variable clients read it from (the pod UID, say).
pub const INSTANCE_ENV: &str = "LOCK_INSTANCE";
/// Longest instance accepted: a UUID is 36, a pod name at most 253.
pub const MAX_INSTANCE_LEN: usize = 253;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "lock-instance must be 1..={MAX_INSTANCE_LEN} characters of A-Z a-z 0-9 . _ : - (a pod UID or name)"
)]
pub struct InstanceError;

/// Checks an instance value: bounded, and plain enough to store and print as it is.
pub fn parse_instance(value: &[u8]) -> Result<String, InstanceError> {
    let ok = (1..=MAX_INSTANCE_LEN).contains(&value.len())
        && value
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
    if !ok {
        return Err(InstanceError);
    }
    String::from_utf8(value.to_vec()).map_err(|_| InstanceError)
}

/// A fresh random instance for a process that was given none: 128 bits as hex, from
/// `seed` (the caller brings the randomness: this crate does no I/O).
pub fn random_instance(seed: u128) -> String {
    format!("p-{seed:032x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        for (value, ok) in [
            (&b"3f2a9c1e-8b7d-4c11-9a0e-5d6f7a8b9c0d"[..], true),
            (b"ledger-7d9f8c-x2x4q", true),
            (b"node-1.pod:pay_ledger", true),
            (b"", false),
            (b"with space", false),
            (b"slash/y", false),
            (b"caf\xc3\xa9", false),
            (b"new\nline", false),
        ] {
            assert_eq!(parse_instance(value).is_ok(), ok, "{value:?}");
        }
        assert!(parse_instance(&[b'a'; MAX_INSTANCE_LEN]).is_ok());
        assert!(parse_instance(&[b'a'; MAX_INSTANCE_LEN + 1]).is_err());
        let r = random_instance(u128::MAX - 1);
        assert_eq!(r.len(), 34);
        assert!(parse_instance(r.as_bytes()).is_ok());
    }
}
