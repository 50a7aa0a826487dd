//! Which lock.v1 method a request calls, and how to find its key.

use crate::error::EdgeError;
use lock_config::proto::v1;
use prost::Message as _;

const SERVICE_PREFIX: &str = "/lock.v1.Lock/";

/// Methods whose request message names a key (field 1): authorised per key and routed on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keyed {
    OpenSession,
    Acquire,
    Release,
    ValidateToken,
    Inspect,
    /// A server stream of one request: decided like Inspect.
    Observe,
    /// A stream: decided once, on its first message's `acquire` (or its `lock-key`); the
    /// arbiter refuses any later message naming another key.
    Hold,
    /// A set of keys (field 1, repeated): authorised on every key, routed on the least.
    AcquireAll,
    ReleaseAll,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Keyed(Keyed),
    /// KeepAlive and CloseSession carry no key; the arbiter checks session ownership.
    Session,
}

impl Method {
    /// Unknown methods are refused: the edge cannot authorise what it does not understand.
    pub fn from_path(path: &str) -> Result<Self, EdgeError> {
        match path.strip_prefix(SERVICE_PREFIX) {
            Some("OpenSession") => Ok(Method::Keyed(Keyed::OpenSession)),
            Some("Acquire") => Ok(Method::Keyed(Keyed::Acquire)),
            Some("Release") => Ok(Method::Keyed(Keyed::Release)),
            Some("ValidateToken") => Ok(Method::Keyed(Keyed::ValidateToken)),
            Some("Inspect") => Ok(Method::Keyed(Keyed::Inspect)),
            Some("Observe") => Ok(Method::Keyed(Keyed::Observe)),
            Some("Hold") => Ok(Method::Keyed(Keyed::Hold)),
            Some("AcquireAll") => Ok(Method::Keyed(Keyed::AcquireAll)),
            Some("ReleaseAll") => Ok(Method::Keyed(Keyed::ReleaseAll)),
            Some("KeepAlive") | Some("CloseSession") => Ok(Method::Session),
            _ => Err(EdgeError::UnknownMethod),
        }
    }
}

impl Keyed {
    /// Methods that name a set of keys rather than one.
    pub fn is_set(self) -> bool {
        matches!(self, Keyed::AcquireAll | Keyed::ReleaseAll)
    }

    /// Decodes one request message and returns its keys (still unvalidated): one, or a
    /// set's.
    pub fn keys_of(self, message: &[u8]) -> Result<Vec<String>, EdgeError> {
        let keys = match self {
            Keyed::AcquireAll => v1::AcquireAllRequest::decode(message).map(|m| m.keys),
            Keyed::ReleaseAll => v1::ReleaseAllRequest::decode(message).map(|m| m.keys),
            _ => return self.key_of(message).map(|k| vec![k]),
        };
        keys.map_err(|_| EdgeError::Undecodable)
    }

    /// Decodes one request message and returns its key (still unvalidated).
    pub fn key_of(self, message: &[u8]) -> Result<String, EdgeError> {
        let key = match self {
            Keyed::AcquireAll | Keyed::ReleaseAll => return Err(EdgeError::Undecodable),
            Keyed::OpenSession => v1::OpenSessionRequest::decode(message).map(|m| m.key),
            Keyed::Acquire => v1::AcquireRequest::decode(message).map(|m| m.key),
            Keyed::Release => v1::ReleaseRequest::decode(message).map(|m| m.key),
            Keyed::ValidateToken => v1::ValidateTokenRequest::decode(message).map(|m| m.key),
            Keyed::Inspect => v1::InspectRequest::decode(message).map(|m| m.key),
            Keyed::Observe => v1::ObserveRequest::decode(message).map(|m| m.key),
            // Only an acquire may open a Hold stream.
            Keyed::Hold => match v1::HoldRequest::decode(message) {
                Ok(v1::HoldRequest {
                    step: Some(v1::hold_request::Step::Acquire(a)),
                }) => Ok(a.key),
                Ok(_) => return Err(EdgeError::Undecodable),
                Err(e) => Err(e),
            },
        };
        key.map_err(|_| EdgeError::Undecodable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_paths() {
        assert_eq!(
            Method::from_path("/lock.v1.Lock/Acquire").unwrap(),
            Method::Keyed(Keyed::Acquire)
        );
        assert_eq!(
            Method::from_path("/lock.v1.Lock/KeepAlive").unwrap(),
            Method::Session
        );
        // Observe is keyed: decided on its request's key like Inspect, never passed as a
        // session call.
        assert_eq!(
            Method::from_path("/lock.v1.Lock/Observe").unwrap(),
            Method::Keyed(Keyed::Observe)
        );
        let observe = v1::ObserveRequest {
            key: "pay/a".into(),
            after_revision: 7,
            session_id: 3,
            after_store_epoch: 0,
        };
        assert_eq!(
            Keyed::Observe.key_of(&observe.encode_to_vec()).unwrap(),
            "pay/a"
        );
        for bad in [
            "/lock.v1.Lock/Nope",
            "/grpc.health.v1.Health/Check",
            "",
            "/lock.v1.Lock/",
        ] {
            assert_eq!(Method::from_path(bad), Err(EdgeError::UnknownMethod));
        }
    }

    /// A Hold stream is decided on its first message, which must be an acquire: a stream
    /// opened with a release (or nothing) has no key the edge decided.
    #[test]
    fn a_hold_stream_is_keyed_by_its_acquire_only() {
        use v1::hold_request::Step;
        let encode = |step| v1::HoldRequest { step }.encode_to_vec();
        let acquire = encode(Some(Step::Acquire(v1::AcquireRequest {
            key: "pay/a".into(),
            ..Default::default()
        })));
        assert_eq!(Keyed::Hold.key_of(&acquire).unwrap(), "pay/a");
        let release = encode(Some(Step::Release(v1::ReleaseRequest {
            key: "pay/a".into(),
            ..Default::default()
        })));
        for bad in [release, encode(None), vec![0xff, 0xff]] {
            assert_eq!(Keyed::Hold.key_of(&bad), Err(EdgeError::Undecodable));
        }
        assert_eq!(
            Method::from_path("/lock.v1.Lock/Hold").unwrap(),
            Method::Keyed(Keyed::Hold)
        );
    }
}
