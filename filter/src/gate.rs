//! The per-request decision: identity on headers, key on the headers when the client sent
//! it as `lock-key` metadata (the fast path), else on the first body frame.
//!
//! On headers: method, gRPC content type, identity (`connection.mtls`, the URI SAN of the
//! peer certificate — exactly one, counted in the connection manager's XFCC — a valid
//! SPIFFE ID of a trusted domain). Client-supplied `x-lock-key`/`x-lock-identity` are
//! removed and `x-lock-identity` is set from the certificate. Keyed methods then pause
//! (Envoy must run with `allow_on_headers_stop_iteration: true`) until the first gRPC
//! message is buffered; the key is decoded, checked (syntax -> grant -> region, so an
//! identity without a grant learns nothing about where a namespace lives), and set as
//! `x-lock-key` for ring-hash routing.
//!
//! **Invariant: every request that reaches an upstream was decided by this gate.** A
//! request is forwarded only by `Step::Continue` from a decision (admitted on headers for
//! KeepAlive/CloseSession, on the first message for keyed calls). Trailers or the end of
//! the stream arriving while a request is undecided refuse it, so nothing undecided is
//! ever resumed. Request trailers named `x-lock-*` are removed in every state: tonic
//! merges request trailers into the metadata a handler reads, so a trailer could
//! otherwise replace what the edge set in the headers (issue 13). Removed rather than
//! refused: by the time trailers arrive an admitted request has already been forwarded
//! with the headers the edge decided, and a refusal then could only hide from the caller
//! what the arbiter did with them; removal keeps the arbiter's view exactly the edge's
//! decision. Each removal is counted (`lock_edge.stripped.trailer`) so the attempt shows.

use crate::error::EdgeError;
use crate::frame::{FirstFrame, first_message};
use crate::host::{Host, SharedDataError};
use crate::method::{Keyed, Method};
use crate::rate::{Bucket, Verdict};
use crate::xfcc::{XFCC_HEADER, uri_sans};
pub use lock_config::edge_headers::{IDENTITY_HEADER, KEY_HEADER};
use lock_config::edge_headers::{METADATA_KEY_HEADER, decode_key, encode_key, is_edge_header};
use lock_config::filter_config::EdgeTestSwitches;
use lock_config::key_set::KEYS_HEADER;
use lock_config::status_details::{STATUS_DETAILS_HEADER, encode_status_header};
use lock_config::{CompiledFilterConfig, KeySet, KeySetError, LockKey, SpiffeId};
use std::rc::Rc;

/// What the glue tells Envoy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Continue,
    /// Stop iteration (headers) or keep buffering (body); also after a local reply.
    Pause,
}

#[derive(Debug)]
enum State {
    Headers,
    Body {
        method: Keyed,
        identity: String,
    },
    /// Admitted or refused: later callbacks pass through untouched.
    Decided,
}

pub struct RequestGate {
    config: Option<Rc<CompiledFilterConfig>>,
    state: State,
}

impl RequestGate {
    /// `config` is None when no valid configuration was ever accepted: everything is
    /// refused (fail closed).
    pub fn new(config: Option<Rc<CompiledFilterConfig>>) -> Self {
        Self {
            config,
            state: State::Headers,
        }
    }

    pub fn on_request_headers(&mut self, host: &mut impl Host, end_of_stream: bool) -> Step {
        match self.check_headers(host, end_of_stream) {
            Ok(step) => step,
            Err(e) => self.refuse(host, &e),
        }
    }

    /// Request trailers: `x-lock-*` entries are removed whatever the state; a request
    /// still undecided is refused (nothing of it has been forwarded).
    pub fn on_request_trailers(&mut self, host: &mut impl Host) -> Step {
        if self.switches().ignore_trailers {
            return Step::Continue;
        }
        let Some(names) = host.request_trailer_names() else {
            // Trailers the filter cannot read could carry anything: fail closed.
            host.count("lock_edge.stripped.trailer");
            return match self.state {
                State::Decided => Step::Continue,
                _ => self.refuse(host, &EdgeError::Truncated),
            };
        };
        for name in names.iter().filter(|n| is_edge_header(n)) {
            host.remove_request_trailer(name);
            host.count("lock_edge.stripped.trailer");
        }
        match self.state {
            State::Decided => Step::Continue,
            State::Headers | State::Body { .. } => self.refuse(host, &EdgeError::Truncated),
        }
    }

    fn switches(&self) -> EdgeTestSwitches {
        self.config
            .as_deref()
            .map(|c| c.test_switches)
            .filter(|_| cfg!(debug_assertions))
            .unwrap_or_default()
    }

    pub fn on_request_body(
        &mut self,
        host: &mut impl Host,
        body_size: usize,
        end_of_stream: bool,
    ) -> Step {
        let State::Body { method, .. } = &self.state else {
            return Step::Continue;
        };
        let method = *method;
        match self.check_body(host, method, body_size, end_of_stream) {
            Ok(step) => step,
            Err(e) => self.refuse(host, &e),
        }
    }

    fn check_headers(&mut self, host: &mut impl Host, eos: bool) -> Result<Step, EdgeError> {
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

    fn check_body(
        &mut self,
        host: &mut impl Host,
        method: Keyed,
        body_size: usize,
        eos: bool,
    ) -> Result<Step, EdgeError> {
        let config = self.config.clone().ok_or(EdgeError::Unconfigured)?;
        let body = host.request_body(body_size).unwrap_or_default();
        let message = match first_message(&body)? {
            FirstFrame::Complete(m) => m,
            FirstFrame::Incomplete if eos => return Err(EdgeError::Truncated),
            FirstFrame::Incomplete => return Ok(Step::Pause),
        };
        let State::Body { identity, .. } = &self.state else {
            return Err(EdgeError::Unconfigured);
        };
        let identity = identity.clone();
        if method.is_set() {
            let set = KeySet::parse(&method.keys_of(message)?).map_err(|e| match e {
                KeySetError::Key(k) => EdgeError::InvalidKey(k),
                KeySetError::Size | KeySetError::Duplicate(_) => EdgeError::BadKeySet,
            })?;
            return self.admit_set(host, &config, &identity, &set);
        }
        let key = LockKey::parse(&method.key_of(message)?).map_err(EdgeError::InvalidKey)?;
        self.admit(host, &config, &identity, &key, method)
    }

    /// A set's decision: every key is decided as a single key would be (grant, then
    /// region), and any one refused refuses the whole request with that key's refusal,
    /// which for a missing grant is the same NOT_GRANTED reply a single key gets: the
    /// reply never says which key it was. Admitted, the set is `x-lock-keys` (the arbiter
    /// holds the body to it) and its least key is `x-lock-key` (the ring hash routes on it).
    fn admit_set(
        &mut self,
        host: &mut impl Host,
        config: &CompiledFilterConfig,
        identity: &str,
        set: &KeySet,
    ) -> Result<Step, EdgeError> {
        let decided = if self.switches().set_first_key_only {
            &set.keys()[..1]
        } else {
            set.keys()
        };
        // Grants for every key before any region: an identity without a grant on one key
        // learns nothing about where the others live.
        for key in decided {
            config
                .authoriser
                .authorise(identity, key)
                .ok_or(EdgeError::NotGranted)?;
        }
        for key in decided {
            match config.namespaces.get(key.namespace()) {
                Some(home) if *home != config.region => {
                    host.count(&format!("lock_edge.redirected.ns.{}", key.namespace()));
                    return Err(EdgeError::RegionRedirect {
                        region: home.clone(),
                    });
                }
                Some(_) => {}
                None => return Err(EdgeError::NotGranted),
            }
        }
        host.set_request_header(KEY_HEADER, Some(&encode_key(set.first().as_str())));
        host.set_request_header(KEYS_HEADER, Some(&set.encode_header()));
        let mut namespaces: Vec<&str> = set.keys().iter().map(LockKey::namespace).collect();
        namespaces.dedup();
        for ns in namespaces {
            host.count(&format!("lock_edge.allowed.ns.{ns}"));
        }
        self.state = State::Decided;
        Ok(Step::Continue)
    }

    /// The key's decision, the same on both paths: grant, then region (so an identity
    /// without a grant learns nothing about where a namespace lives); admitted, the key is
    /// set as `x-lock-key` for the ring hash and the arbiter.
    fn admit(
        &mut self,
        host: &mut impl Host,
        config: &CompiledFilterConfig,
        identity: &str,
        key: &LockKey,
        method: Keyed,
    ) -> Result<Step, EdgeError> {
        config
            .authoriser
            .authorise(identity, key)
            .ok_or(EdgeError::NotGranted)?;
        match config.namespaces.get(key.namespace()) {
            Some(home) if *home != config.region => {
                // Declared namespaces only: a bounded label.
                host.count(&format!("lock_edge.redirected.ns.{}", key.namespace()));
                return Err(EdgeError::RegionRedirect {
                    region: home.clone(),
                });
            }
            Some(_) => {}
            // Grants are validated against declared namespaces; an undeclared one cannot be
            // granted, so this is unreachable with a valid config. Refuse like no grant.
            None => return Err(EdgeError::NotGranted),
        }
        host.set_request_header(KEY_HEADER, Some(&encode_key(key.as_str())));
        host.count(&format!("lock_edge.allowed.ns.{}", key.namespace()));
        if method == Keyed::ValidateToken {
            // ADR-16 wants teams on conditional writes instead: who still reads grants back
            // shows per namespace (declared ones only, so the label is bounded).
            host.count(&format!("lock_edge.validate.ns.{}", key.namespace()));
        }
        self.state = State::Decided;
        Ok(Step::Continue)
    }

    fn refuse(&mut self, host: &mut impl Host, error: &EdgeError) -> Step {
        self.state = State::Decided;
        let r = error.refusal();
        // Reason only: the key or namespace of a refused request is caller-chosen input.
        host.count(&format!("lock_edge.denied.{}", r.reason.as_str()));
        let meta: Vec<(&str, &str)> = r.metadata.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let details = encode_status_header(r.reason, &r.message, &meta);
        host.send_grpc_reply(
            r.reason.code(),
            &r.message,
            &[(STATUS_DETAILS_HEADER, details.as_str())],
        );
        Step::Pause
    }
}

/// Compare-and-swap attempts on one identity's bucket before failing closed.
const MAX_CAS_ATTEMPTS: usize = 8;
/// Shared-data key prefix of the per-identity buckets.
pub const RATE_KEY_PREFIX: &str = "lock-rl/";
/// Shared-data key prefix of the per-identity ValidateToken buckets.
pub const VALIDATE_RATE_KEY_PREFIX: &str = "lock-rl-validate/";

/// Takes one token from the identity's bucket, shared by all worker threads.
fn rate_limit(
    host: &mut impl Host,
    bucket: &str,
    identity: &str,
    budget: lock_config::registry::RateBudget,
) -> Result<(), EdgeError> {
    let key = format!("{bucket}{identity}");
    for _ in 0..MAX_CAS_ATTEMPTS {
        let now = host.now_ns();
        let (data, cas) = host.shared_data(&key);
        let bucket = data
            .as_deref()
            .and_then(Bucket::decode)
            .unwrap_or_else(|| Bucket::full(budget, now));
        let (verdict, next) = bucket.take(budget, now);
        match host.set_shared_data(&key, &next.encode(), cas) {
            Ok(()) => {
                return match verdict {
                    Verdict::Allow => Ok(()),
                    Verdict::Limited { retry_after_ms } => {
                        Err(EdgeError::RateLimited { retry_after_ms })
                    }
                };
            }
            Err(SharedDataError::CasMismatch) => continue,
            Err(SharedDataError::Other) => break,
        }
    }
    // Contention or a host error: fail closed, and say when to come back.
    Err(EdgeError::RateLimited {
        retry_after_ms: 100,
    })
}

fn peer_identity(
    host: &impl Host,
    xfcc: Option<&str>,
    config: &CompiledFilterConfig,
    switches: EdgeTestSwitches,
) -> Result<SpiffeId, EdgeError> {
    let mtls = host.property(&["connection", "mtls"]);
    if mtls.as_deref() != Some(&[1u8][..]) {
        return Err(EdgeError::NoPeerCertificate);
    }
    let san = host
        .property(&["connection", "uri_san_peer_certificate"])
        .and_then(|b| String::from_utf8(b).ok())
        .filter(|s| !s.is_empty())
        .ok_or(EdgeError::InvalidSpiffeId)?;
    // An X.509-SVID has exactly one URI SAN; the attribute above is only the first.
    if !switches.first_uri_san {
        let uris = xfcc
            .ok_or(EdgeError::InvalidSpiffeId)
            .and_then(|h| uri_sans(h).map_err(|_| EdgeError::InvalidSpiffeId))?;
        if uris.len() != 1 || uris[0] != san {
            return Err(EdgeError::InvalidSpiffeId);
        }
    }
    let id = SpiffeId::parse(&san).map_err(|_| EdgeError::InvalidSpiffeId)?;
    if !config
        .trust_domains
        .iter()
        .any(|td| td == id.trust_domain())
    {
        return Err(EdgeError::ForeignTrustDomain);
    }
    Ok(id)
}

#[cfg(test)]
mod tests;
