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
//!
//! The steps, in the order a request meets them:
//!
//! | module       | owns                                                                     |
//! |--------------|--------------------------------------------------------------------------|
//! | `headers`    | the decision on headers: method, gRPC, identity, grant, rate, fast path  |
//! | `identity`   | who the peer is: its certificate's one URI SAN, a trusted SPIFFE ID      |
//! | `rate_limit` | the identity's token bucket in Envoy's shared data (compare-and-swap)    |
//! | `body`       | a keyed call's first message: the key it names, or a set's keys          |
//! | `admit`      | the decision on a key or a set, the same on both paths: grant, region    |
//!
//! This file keeps the request's state and the callbacks the glue calls; each step is an
//! `impl RequestGate` in its own file, so only this folder moves a request's state.

mod admit;
mod body;
mod headers;
mod identity;
mod rate_limit;

use crate::error::EdgeError;
use crate::host::Host;
use crate::method::Keyed;
use lock_config::CompiledFilterConfig;
use lock_config::edge_headers::is_edge_header;
pub use lock_config::edge_headers::{IDENTITY_HEADER, KEY_HEADER};
use lock_config::filter_config::EdgeTestSwitches;
use lock_config::status_details::{STATUS_DETAILS_HEADER, encode_status_header};
pub use rate_limit::{RATE_KEY_PREFIX, VALIDATE_RATE_KEY_PREFIX};
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

#[cfg(test)]
mod tests;
