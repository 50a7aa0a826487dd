//! The decision on headers: method and gRPC content type, the peer's identity (set as
//! `x-lock-identity`, every client-sent `x-lock-*` removed), a grant at all, the rate, then
//! either a decision now (unkeyed calls; a keyed call whose key came as `lock-key`
//! metadata, the fast path) or a pause until the first message names the key.

use super::identity::peer_identity;
use super::rate_limit::{RATE_KEY_PREFIX, VALIDATE_RATE_KEY_PREFIX, rate_limit};
use super::{IDENTITY_HEADER, RequestGate, State, Step};
use crate::error::EdgeError;
use crate::host::Host;
use crate::method::{Keyed, Method};
use crate::xfcc::XFCC_HEADER;
use lock_config::LockKey;
use lock_config::edge_headers::{METADATA_KEY_HEADER, decode_key, is_edge_header};

impl RequestGate {
    pub(super) fn check_headers(
        &mut self,
        host: &mut impl Host,
        eos: bool,
    ) -> Result<Step, EdgeError> {
        let config = self.config.clone().ok_or(EdgeError::Unconfigured)?;
        // Read once; a header's first value counts, as Envoy's single-header read gives.
        let headers = host.request_headers();
        let raw = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_slice())
        };
        // A value that is not UTF-8 reads as absent: every header here is then refused.
        let header = |name: &str| raw(name).and_then(|v| std::str::from_utf8(v).ok());
        let method = match Method::from_path(header(":path").unwrap_or_default())? {
            Method::Keyed(Keyed::Observe) if self.switches().observe_unkeyed => Method::Session,
            m => m,
        };
        let grpc = header("content-type").is_some_and(|ct| ct.starts_with("application/grpc"));
        if !grpc {
            return Err(EdgeError::NotGrpc);
        }
        let identity = peer_identity(host, header(XFCC_HEADER), &config, self.switches())?;
        host.set_request_header(XFCC_HEADER, None);
        // Every `x-lock-*` header is the edge's to set: whatever a client sent under one
        // (`x-lock-key`, `x-lock-keys`, or a name added later) is removed, not only the
        // names this filter sets today.
        for name in headers.iter().map(|(k, _)| k).filter(|n| is_edge_header(n)) {
            host.set_request_header(name, None);
        }
        host.set_request_header(IDENTITY_HEADER, Some(identity.as_str()));
        // An identity without any grant is refused before anything is buffered, with the
        // same reply a missing grant on a key gets.
        let grant = config
            .authoriser
            .grant_of(identity.as_str())
            .ok_or(EdgeError::NotGranted)?;
        // ValidateToken draws from a bucket of its own (ADR-16): a resource reading grants
        // back cannot starve its identity's grants, nor the reverse.
        let (budgets, bucket) = match method {
            Method::Keyed(Keyed::ValidateToken) => {
                (&config.validate_rates, VALIDATE_RATE_KEY_PREFIX)
            }
            _ => (&config.rates, RATE_KEY_PREFIX),
        };
        if let Some(budget) = budgets.get(grant).copied().flatten() {
            rate_limit(host, bucket, identity.as_str(), budget)?;
        }
        let metadata_key = raw(METADATA_KEY_HEADER);
        // A set is decided on its body's keys, every one: a `lock-key` could name only one.
        if let Method::Keyed(m) = method
            && m.is_set()
            && metadata_key.is_some()
        {
            host.set_request_header(METADATA_KEY_HEADER, None);
        }
        let metadata_key =
            metadata_key.filter(|_| !matches!(method, Method::Keyed(m) if m.is_set()));
        match method {
            Method::Session => {
                host.count("lock_edge.allowed.sessions");
                self.state = State::Decided;
                Ok(Step::Continue)
            }
            Method::Keyed(_) if eos => Err(EdgeError::Truncated),
            // The fast path (issue 19): the client named the key in the request's metadata,
            // so the decision needs no body and the upstream request starts now. The body's
            // key is the arbiter's to match against `x-lock-key` (it refuses any other,
            // before etcd), so a granted metadata key cannot carry an ungranted body key.
            Method::Keyed(method) if metadata_key.is_some() => {
                let value = metadata_key.unwrap_or_default().to_owned();
                host.set_request_header(METADATA_KEY_HEADER, None);
                let key = decode_key(&value).ok_or(EdgeError::Undecodable)?;
                let key = LockKey::parse(&key).map_err(EdgeError::InvalidKey)?;
                host.count("lock_edge.fast_path");
                self.admit(host, &config, identity.as_str(), &key, method)
            }
            Method::Keyed(method) => {
                self.state = State::Body {
                    method,
                    identity: identity.as_str().to_owned(),
                };
                Ok(Step::Pause)
            }
        }
    }
}
