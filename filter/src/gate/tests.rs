#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use crate::frame::frame;
use crate::xfcc::XFCC_HEADER;
use lock_config::GrpcCode;
use lock_config::edge_headers::encode_key;
use lock_config::filter_config::{FilterConfig, FilterGrant};
use lock_config::proto::v1;
use lock_config::status_details::decode_error_info;
use prost::Message as _;
use std::collections::HashMap;

const LEDGER: &str = "spiffe://dev.lock.local/ns/pay/sa/ledger";

/// A local reply as the fake host recorded it: code, message, headers.
type Reply = (GrpcCode, String, Vec<(String, String)>);

/// Shared data as Envoy keeps it: value plus a CAS counter, shared by "worker threads".
#[derive(Default)]
struct Shared {
    data: HashMap<String, (Vec<u8>, u32)>,
    /// Mismatches to inject before the next successful set (contention).
    conflicts: u32,
    broken: bool,
}

#[derive(Default)]
struct FakeHost {
    props: HashMap<String, Vec<u8>>,
    headers: HashMap<String, String>,
    trailers: HashMap<String, String>,
    body: Vec<u8>,
    reply: Option<Reply>,
    now_ns: u64,
    shared: std::rc::Rc<std::cell::RefCell<Shared>>,
    metrics: HashMap<String, u64>,
}

impl Host for FakeHost {
    fn property(&self, path: &[&str]) -> Option<Vec<u8>> {
        self.props.get(&path.join(".")).cloned()
    }
    fn request_headers(&self) -> Vec<(String, Vec<u8>)> {
        self.headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
            .collect()
    }
    fn set_request_header(&mut self, name: &str, value: Option<&str>) {
        match value {
            Some(v) => self.headers.insert(name.to_owned(), v.to_owned()),
            None => self.headers.remove(name),
        };
    }
    fn request_trailer_names(&self) -> Option<Vec<String>> {
        Some(self.trailers.keys().cloned().collect())
    }
    fn remove_request_trailer(&mut self, name: &str) {
        self.trailers.remove(name);
    }
    fn request_body(&self, len: usize) -> Option<Vec<u8>> {
        Some(self.body[..len.min(self.body.len())].to_vec())
    }
    fn now_ns(&self) -> u64 {
        self.now_ns
    }
    fn shared_data(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        match self.shared.borrow().data.get(key) {
            Some((v, cas)) => (Some(v.clone()), Some(*cas)),
            None => (None, None),
        }
    }
    fn set_shared_data(
        &mut self,
        key: &str,
        value: &[u8],
        cas: Option<u32>,
    ) -> Result<(), crate::host::SharedDataError> {
        let mut s = self.shared.borrow_mut();
        if s.broken {
            return Err(crate::host::SharedDataError::Other);
        }
        if s.conflicts > 0 {
            s.conflicts -= 1;
            return Err(crate::host::SharedDataError::CasMismatch);
        }
        let current = s.data.get(key).map(|(_, c)| *c);
        if cas.is_some() && cas != current {
            return Err(crate::host::SharedDataError::CasMismatch);
        }
        let next = current.unwrap_or(0) + 1;
        s.data.insert(key.to_owned(), (value.to_vec(), next));
        Ok(())
    }
    fn count(&mut self, metric: &str) {
        *self.metrics.entry(metric.to_owned()).or_default() += 1;
    }
    fn send_grpc_reply(&mut self, code: GrpcCode, message: &str, headers: &[(&str, &str)]) {
        assert!(self.reply.is_none(), "two replies for one request");
        self.reply = Some((
            code,
            message.to_owned(),
            headers
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ));
    }
}

fn config() -> Rc<CompiledFilterConfig> {
    Rc::new(filter_config().compile().unwrap())
}

fn filter_config() -> FilterConfig {
    FilterConfig {
        region: "local".into(),
        trust_domains: vec!["dev.lock.local".into()],
        namespaces: [
            ("pay".to_owned(), "local".to_owned()),
            ("archive".to_owned(), "eu-far".to_owned()),
        ]
        .into(),
        grants: vec![FilterGrant {
            spiffe_id: LEDGER.into(),
            prefixes: vec!["pay/ledger".into(), "archive".into()],
            rate: None,
            validate_rate: None,
        }],
        default_rate: None,
        unsafe_test_switches: Vec::new(),
    }
}

/// A config where LEDGER may make 2 requests at once and 1 more per second, and another
/// identity has no limit.
fn limited_config() -> Rc<CompiledFilterConfig> {
    let mut c = filter_config();
    c.grants[0].rate = Some(lock_config::registry::RateBudget {
        per_second: 1,
        burst: 2,
    });
    c.grants.push(FilterGrant {
        spiffe_id: OTHER.into(),
        prefixes: vec!["pay/ledger".into()],
        rate: None,
        validate_rate: None,
    });
    Rc::new(c.compile().unwrap())
}

const OTHER: &str = "spiffe://dev.lock.local/ns/pay/sa/other";

/// One KeepAlive (no body) from `who` on a host sharing `shared`, at `now_ns`.
fn session_call(
    cfg: &Rc<CompiledFilterConfig>,
    shared: &std::rc::Rc<std::cell::RefCell<Shared>>,
    who: &str,
    now_ns: u64,
) -> FakeHost {
    let mut h = host("KeepAlive", Some(who));
    h.shared = shared.clone();
    h.now_ns = now_ns;
    RequestGate::new(Some(cfg.clone())).on_request_headers(&mut h, false);
    h
}

fn host(method: &str, san: Option<&str>) -> FakeHost {
    let mut h = FakeHost::default();
    h.headers
        .insert(":path".into(), format!("/lock.v1.Lock/{method}"));
    h.headers
        .insert("content-type".into(), "application/grpc".into());
    if let Some(san) = san {
        h.props.insert("connection.mtls".into(), vec![1]);
        h.props.insert(
            "connection.uri_san_peer_certificate".into(),
            san.as_bytes().to_vec(),
        );
        // As Envoy's connection manager writes it (SANITIZE_SET, uri: true).
        h.headers.insert(
            XFCC_HEADER.into(),
            format!("By=spiffe://dev.lock.local/ns/edge/sa/envoy;Hash=0f;URI={san}"),
        );
    }
    h
}

fn acquire_body(key: &str) -> Vec<u8> {
    frame(
        &v1::AcquireRequest {
            key: key.into(),
            session_id: 7,
            wait_millis: 0,
            ..Default::default()
        }
        .encode_to_vec(),
    )
}

/// Runs a whole keyed request: headers, then the body in chunks of `chunk` bytes.
fn run(h: &mut FakeHost, body: Vec<u8>, chunk: usize) -> Step {
    let mut gate = RequestGate::new(Some(config()));
    if gate.on_request_headers(h, false) == Step::Pause && h.reply.is_none() {
        let mut step = Step::Pause;
        let mut end = 0;
        while step == Step::Pause && h.reply.is_none() && end < body.len() {
            end = (end + chunk).min(body.len());
            h.body = body[..end].to_vec();
            step = gate.on_request_body(h, end, end == body.len());
        }
        return step;
    }
    Step::Pause
}

fn reason(h: &FakeHost) -> Option<(GrpcCode, String)> {
    let (code, _, headers) = h.reply.as_ref()?;
    let (_, b64) = headers
        .iter()
        .find(|(k, _)| k == "grpc-status-details-bin")?;
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(b64)
        .ok()?;
    Some((*code, decode_error_info(&bytes)?.reason))
}

#[test]
fn admits_granted_key_and_sets_headers_from_what_it_saw() {
    let mut h = host("Acquire", Some(LEDGER));
    h.headers
        .insert("x-lock-key".into(), "pay/ledger/forged".into());
    h.headers.insert(
        "x-lock-identity".into(),
        "spiffe://dev.lock.local/admin".into(),
    );
    assert_eq!(
        run(&mut h, acquire_body("pay/ledger/42"), 3),
        Step::Continue
    );
    assert!(h.reply.is_none());
    assert_eq!(h.headers["x-lock-key"], "pay/ledger/42");
    assert_eq!(h.headers["x-lock-identity"], LEDGER);
}

#[test]
fn refusals_carry_their_contract_status() {
    let cases: Vec<(FakeHost, Vec<u8>, GrpcCode, &str)> = vec![
        (
            host("Acquire", None),
            acquire_body("pay/ledger/1"),
            GrpcCode::Unauthenticated,
            "UNAUTHENTICATED",
        ),
        (
            host("Acquire", Some("spiffe://evil.domain/x")),
            acquire_body("pay/ledger/1"),
            GrpcCode::Unauthenticated,
            "UNAUTHENTICATED",
        ),
        (
            host("Acquire", Some("https://dev.lock.local/x")),
            acquire_body("pay/ledger/1"),
            GrpcCode::Unauthenticated,
            "UNAUTHENTICATED",
        ),
        (
            host("Acquire", Some(LEDGER)),
            acquire_body("pay/ledgers"),
            GrpcCode::PermissionDenied,
            "NOT_GRANTED",
        ),
        (
            host("Acquire", Some(LEDGER)),
            acquire_body("nope/x"),
            GrpcCode::PermissionDenied,
            "NOT_GRANTED",
        ),
        (
            host("Acquire", Some("spiffe://dev.lock.local/stranger")),
            acquire_body("pay/ledger/1"),
            GrpcCode::PermissionDenied,
            "NOT_GRANTED",
        ),
        (
            host("Acquire", Some(LEDGER)),
            acquire_body("archive/x"),
            GrpcCode::FailedPrecondition,
            "REGION_REDIRECT",
        ),
        (
            host("Acquire", Some(LEDGER)),
            acquire_body("pay/a//b"),
            GrpcCode::InvalidArgument,
            "INVALID_KEY",
        ),
        (
            host("Acquire", Some(LEDGER)),
            acquire_body(&"x".repeat(2000)),
            GrpcCode::InvalidArgument,
            "INVALID_KEY",
        ),
        (
            host("Acquire", Some(LEDGER)),
            frame(&[0xff, 0xff, 0xff]),
            GrpcCode::InvalidArgument,
            "MALFORMED_REQUEST",
        ),
        (
            host("Acquire", Some(LEDGER)),
            vec![0, 0, 0, 0x7f],
            GrpcCode::InvalidArgument,
            "MALFORMED_REQUEST",
        ),
        (
            host("Acquire", Some(LEDGER)),
            vec![0, 0, 1, 0, 0],
            GrpcCode::InvalidArgument,
            "MALFORMED_REQUEST",
        ),
        (
            host("Nope", Some(LEDGER)),
            acquire_body("pay/ledger/1"),
            GrpcCode::Unimplemented,
            "UNKNOWN_METHOD",
        ),
    ];
    for (i, (mut h, body, code, want)) in cases.into_iter().enumerate() {
        let step = run(&mut h, body, 4);
        assert_eq!(step, Step::Pause, "case {i}");
        assert_eq!(reason(&h), Some((code, want.to_owned())), "case {i}");
        assert!(
            !h.headers.contains_key("x-lock-key"),
            "case {i}: key header must not survive"
        );
    }
}

#[test]
fn region_redirect_names_the_region() {
    let mut h = host("Acquire", Some(LEDGER));
    run(&mut h, acquire_body("archive/x"), 100);
    let (_, _, headers) = h.reply.unwrap();
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(&headers[0].1)
        .unwrap();
    let info = decode_error_info(&bytes).unwrap();
    assert_eq!(info.metadata["region"], "eu-far");
}

#[test]
fn not_granted_reply_is_identical_for_any_key() {
    let replies: Vec<_> = ["pay/ledgers", "nope/x", "pay/other/deep/key", "orders/x"]
        .iter()
        .map(|k| {
            let mut h = host("Acquire", Some(LEDGER));
            run(&mut h, acquire_body(k), 1000);
            h.reply.unwrap()
        })
        .collect();
    assert!(replies.windows(2).all(|w| w[0] == w[1]));
}

#[test]
fn session_calls_need_a_known_identity_and_no_body() {
    let mut gate = RequestGate::new(Some(config()));
    let mut h = host("KeepAlive", Some(LEDGER));
    assert_eq!(gate.on_request_headers(&mut h, false), Step::Continue);
    assert_eq!(h.headers["x-lock-identity"], LEDGER);
    // Stream messages after admission pass through untouched.
    assert_eq!(gate.on_request_body(&mut h, 10, false), Step::Continue);

    let mut gate = RequestGate::new(Some(config()));
    let mut h = host("CloseSession", Some("spiffe://dev.lock.local/stranger"));
    assert_eq!(gate.on_request_headers(&mut h, false), Step::Pause);
    assert_eq!(reason(&h).unwrap().1, "NOT_GRANTED");
}

#[test]
fn unconfigured_filter_fails_closed() {
    let mut gate = RequestGate::new(None);
    let mut h = host("Acquire", Some(LEDGER));
    assert_eq!(gate.on_request_headers(&mut h, false), Step::Pause);
    assert_eq!(reason(&h).unwrap().0, GrpcCode::Internal);
}

#[test]
fn non_grpc_and_headers_only_requests_are_refused() {
    let mut h = host("Acquire", Some(LEDGER));
    h.headers
        .insert("content-type".into(), "application/json".into());
    run(&mut h, acquire_body("pay/ledger/1"), 100);
    assert_eq!(reason(&h).unwrap().1, "MALFORMED_REQUEST");

    let mut gate = RequestGate::new(Some(config()));
    let mut h = host("Acquire", Some(LEDGER));
    gate.on_request_headers(&mut h, true);
    assert_eq!(reason(&h).unwrap().1, "MALFORMED_REQUEST");
}

#[test]
fn rate_limit_is_per_identity_and_shared_across_workers() {
    let cfg = limited_config();
    let shared = std::rc::Rc::new(std::cell::RefCell::new(Shared::default()));
    // Two "workers" (two hosts on one shared store) draw from one bucket.
    assert!(session_call(&cfg, &shared, LEDGER, 0).reply.is_none());
    assert!(session_call(&cfg, &shared, LEDGER, 0).reply.is_none());
    let limited = session_call(&cfg, &shared, LEDGER, 0);
    assert_eq!(
        reason(&limited).unwrap(),
        (GrpcCode::ResourceExhausted, "RATE_LIMITED".to_owned())
    );
    let (_, _, headers) = limited.reply.clone().unwrap();
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(&headers[0].1)
        .unwrap();
    assert_eq!(
        decode_error_info(&bytes).unwrap().metadata["retry_after_ms"],
        "1000"
    );
    assert_eq!(
        limited.metrics.get("lock_edge.denied.RATE_LIMITED"),
        Some(&1)
    );
    // Another identity is unaffected.
    for _ in 0..10 {
        assert!(session_call(&cfg, &shared, OTHER, 0).reply.is_none());
    }
    // A second later one more token.
    assert!(
        session_call(&cfg, &shared, LEDGER, 1_000_000_000)
            .reply
            .is_none()
    );
    // Keys are bounded by identities with a budget.
    assert_eq!(shared.borrow().data.len(), 1);
}

/// One ValidateToken (body path) from `who` on a host sharing `shared`, at `now_ns`.
fn validate_call(
    cfg: &Rc<CompiledFilterConfig>,
    shared: &std::rc::Rc<std::cell::RefCell<Shared>>,
    who: &str,
    now_ns: u64,
) -> FakeHost {
    let mut h = host("ValidateToken", Some(who));
    h.shared = shared.clone();
    h.now_ns = now_ns;
    let body = frame(
        &v1::ValidateTokenRequest {
            key: "pay/ledger/1".into(),
            token: 5,
        }
        .encode_to_vec(),
    );
    let mut gate = RequestGate::new(Some(cfg.clone()));
    if gate.on_request_headers(&mut h, false) == Step::Pause && h.reply.is_none() {
        h.body = body.clone();
        gate.on_request_body(&mut h, body.len(), true);
    }
    h
}

/// ADR-16: ValidateToken has a bucket of its own. A resource reading grants back cannot
/// spend the budget its identity takes grants with, nor the reverse; each admitted call is
/// counted by namespace, so the teams still reading back show.
#[test]
fn validate_token_draws_from_a_budget_of_its_own() {
    for validate_rate in [
        None,
        Some(lock_config::registry::RateBudget {
            per_second: 1,
            burst: 1,
        }),
    ] {
        let mut c = filter_config();
        c.grants[0].rate = Some(lock_config::registry::RateBudget {
            per_second: 1,
            burst: 2,
        });
        c.grants[0].validate_rate = validate_rate;
        let cfg = Rc::new(c.compile().unwrap());
        let burst = validate_rate.map_or(2, |r| r.burst);
        let shared = std::rc::Rc::new(std::cell::RefCell::new(Shared::default()));
        for i in 0..burst {
            let h = validate_call(&cfg, &shared, LEDGER, 0);
            assert!(
                h.reply.is_none(),
                "validate {i} of {burst}: {:?}",
                reason(&h)
            );
            assert_eq!(h.metrics.get("lock_edge.validate.ns.pay"), Some(&1));
        }
        let h = validate_call(&cfg, &shared, LEDGER, 0);
        assert_eq!(reason(&h).unwrap().1, "RATE_LIMITED", "{validate_rate:?}");
        // The grant budget is whole: its burst of 2 is still there.
        for i in 0..2 {
            let h = session_call(&cfg, &shared, LEDGER, 0);
            assert!(h.reply.is_none(), "grant-budget call {i}: {:?}", reason(&h));
        }
        assert_eq!(
            reason(&session_call(&cfg, &shared, LEDGER, 0)).unwrap().1,
            "RATE_LIMITED"
        );
        // And spent, it leaves ValidateToken's alone: a second later one more each.
        assert!(
            validate_call(&cfg, &shared, LEDGER, 1_000_000_000)
                .reply
                .is_none()
        );
        // A keyed call other than ValidateToken is not counted as one.
        let mut h = host("Acquire", Some(LEDGER));
        run(&mut h, acquire_body("pay/ledger/9"), 100);
        assert_eq!(h.metrics.get("lock_edge.validate.ns.pay"), None);
    }
}

#[test]
fn cas_contention_retries_and_a_broken_store_fails_closed() {
    let cfg = limited_config();
    let shared = std::rc::Rc::new(std::cell::RefCell::new(Shared::default()));
    shared.borrow_mut().conflicts = 3;
    assert!(
        session_call(&cfg, &shared, LEDGER, 0).reply.is_none(),
        "retried past 3 conflicts"
    );
    shared.borrow_mut().conflicts = 100;
    let h = session_call(&cfg, &shared, LEDGER, 0);
    assert_eq!(
        reason(&h).unwrap().1,
        "RATE_LIMITED",
        "bounded retries, then closed"
    );
    shared.borrow_mut().conflicts = 0;
    shared.borrow_mut().broken = true;
    let h = session_call(&cfg, &shared, LEDGER, 0);
    assert_eq!(reason(&h).unwrap().1, "RATE_LIMITED");
}

#[test]
fn metrics_carry_bounded_labels_only() {
    let mut seen = Vec::new();
    for (key, metric) in [
        ("pay/ledger/7", "lock_edge.allowed.ns.pay"),
        ("secretns/some/key", "lock_edge.denied.NOT_GRANTED"),
        ("archive/x", "lock_edge.redirected.ns.archive"),
    ] {
        let mut h = host("Acquire", Some(LEDGER));
        run(&mut h, acquire_body(key), 100);
        assert_eq!(h.metrics.get(metric), Some(&1), "{key}");
        seen.extend(h.metrics.into_keys());
    }
    // Every metric any of them counted: no namespace that is not configured, no identity.
    for name in &seen {
        assert!(
            !name.contains("secretns") && !name.contains("spiffe") && !name.contains("some"),
            "{name}"
        );
    }
}

mod fuzz {
    //! The gate under generated input: valid lock.v1 frames with generated keys and fields,
    //! frames whose header lies about the payload, and raw bytes, each delivered in chunks
    //! of every size with the end of stream on the last. Exactly one outcome every time:
    //! forwarded (Continue, no reply, `x-lock-key` the key's encoding), or refused (Pause and
    //! exactly one local reply, which the fake host enforces). Paused with no reply — a
    //! request stuck at the edge — fails, as does a forwarded request with another key.
    use super::*;
    use proptest::prelude::*;

    /// Headers, then `body` in chunks of `chunk` bytes, the last with end of stream (a
    /// request with no body ends on its headers, as Envoy delivers it).
    fn run_to_end(h: &mut FakeHost, body: &[u8], chunk: usize) -> Step {
        let mut gate = RequestGate::new(Some(config()));
        let step = gate.on_request_headers(h, body.is_empty());
        if step == Step::Continue || h.reply.is_some() || body.is_empty() {
            return step;
        }
        let mut end = 0;
        loop {
            end = (end + chunk).min(body.len());
            h.body = body[..end].to_vec();
            let step = gate.on_request_body(h, end, end == body.len());
            if step == Step::Continue || h.reply.is_some() || end == body.len() {
                return step;
            }
        }
    }

    /// A key: mostly under the granted prefix, sometimes elsewhere, sometimes invalid,
    /// with non-ASCII and percent signs in the path.
    fn key() -> impl Strategy<Value = String> {
        let ns = prop_oneof![
            Just("pay/ledger".to_owned()),
            Just("pay/other".to_owned()),
            Just("archive".to_owned()),
            Just("secretns".to_owned()),
            "[a-zA-Z0-9_-]{0,12}",
        ];
        (ns, "[a-z0-9/%.ü _-]{0,40}").prop_map(|(ns, path)| format!("{ns}/{path}"))
    }

    /// A request body as a client could send it.
    fn body() -> impl Strategy<Value = (String, Vec<u8>, Option<Vec<String>>)> {
        prop_oneof![
            // A valid frame of the method's message: the key is what must come through.
            (key(), any::<i64>(), any::<u64>()).prop_map(|(k, session_id, wait_millis)| {
                let msg = v1::AcquireRequest {
                    key: k.clone(),
                    session_id,
                    wait_millis,
                    ..Default::default()
                };
                (
                    "Acquire".to_owned(),
                    frame(&msg.encode_to_vec()),
                    Some(vec![k]),
                )
            }),
            // A set: every key must be granted for it to pass.
            proptest::collection::vec(key(), 0..5).prop_map(|keys| {
                let msg = v1::AcquireAllRequest {
                    keys: keys.clone(),
                    session_id: 7,
                    wait_millis: 0,
                };
                (
                    "AcquireAll".to_owned(),
                    frame(&msg.encode_to_vec()),
                    Some(keys),
                )
            }),
            (key(), any::<u64>(), any::<i64>()).prop_map(|(k, token, session_id)| {
                let msg = v1::ReleaseRequest {
                    key: k.clone(),
                    token,
                    session_id,
                    ..Default::default()
                };
                (
                    "Release".to_owned(),
                    frame(&msg.encode_to_vec()),
                    Some(vec![k]),
                )
            }),
            key().prop_map(|k| {
                let msg = v1::OpenSessionRequest { key: k.clone() };
                (
                    "OpenSession".to_owned(),
                    frame(&msg.encode_to_vec()),
                    Some(vec![k]),
                )
            }),
            // A frame header with any flags and length, then any payload.
            (
                any::<u8>(),
                any::<u32>(),
                proptest::collection::vec(any::<u8>(), 0..120)
            )
                .prop_map(|(flags, len, payload)| {
                    let mut b = vec![flags];
                    b.extend_from_slice(&len.to_be_bytes());
                    b.extend(payload);
                    ("Acquire".to_owned(), b, None)
                }),
            // Raw bytes.
            proptest::collection::vec(any::<u8>(), 0..200).prop_map(|b| (
                "Release".to_owned(),
                b,
                None
            )),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn every_request_gets_exactly_one_outcome((method, body, key) in body(), chunk in 1usize..64) {
            let mut h = host(&method, Some(LEDGER));
            let step = run_to_end(&mut h, &body, chunk);
            match (step, &h.reply) {
                (Step::Continue, None) => {
                    // Forwarded: only the decoded keys of this very request, each under a
                    // grant; routed on the least.
                    prop_assert!(key.is_some(), "forwarded a body that is not a lock.v1 frame");
                    let keys = key.unwrap_or_default();
                    prop_assert!(!keys.is_empty());
                    prop_assert!(keys.iter().all(|k| k.starts_with("pay/ledger/")));
                    let least = keys.iter().min().map(|k| encode_key(k));
                    prop_assert_eq!(h.headers.get("x-lock-key").cloned(), least);
                    if method == "AcquireAll" {
                        let mut sorted = keys.clone();
                        sorted.sort();
                        let want = sorted.iter().map(|k| encode_key(k)).collect::<Vec<_>>().join(" ");
                        prop_assert_eq!(h.headers.get("x-lock-keys").cloned(), Some(want));
                    }
                }
                (Step::Pause, Some(_)) => {
                    prop_assert!(reason(&h).is_some(), "a refusal without an ErrorInfo");
                    prop_assert!(!h.headers.contains_key("x-lock-key"));
                    prop_assert!(!h.headers.contains_key("x-lock-keys"));
                }
                (step, reply) => prop_assert!(false, "stuck or contradictory: {step:?} with {reply:?}"),
            }
        }
    }
}

fn switched(switch: &str) -> Rc<CompiledFilterConfig> {
    Rc::new(filter_config_with(&[switch]).compile().unwrap())
}

#[test]
fn edge_trailers_are_removed_from_an_admitted_request() {
    for method in ["Acquire", "KeepAlive"] {
        let mut h = host(method, Some(LEDGER));
        let mut gate = RequestGate::new(Some(config()));
        let mut step = gate.on_request_headers(&mut h, false);
        if step == Step::Pause {
            h.body = acquire_body("pay/ledger/42");
            let len = h.body.len();
            step = gate.on_request_body(&mut h, len, false);
        }
        assert_eq!(step, Step::Continue, "{method}");
        for name in ["x-lock-identity", "X-Lock-Key", "x-lock-anything"] {
            h.trailers
                .insert(name.into(), "spiffe://dev.lock.local/x".into());
        }
        h.trailers.insert("other".into(), "kept".into());
        assert_eq!(gate.on_request_trailers(&mut h), Step::Continue, "{method}");
        assert!(h.reply.is_none(), "{method}");
        assert_eq!(h.trailers.keys().collect::<Vec<_>>(), ["other"], "{method}");
        assert_eq!(h.metrics["lock_edge.stripped.trailer"], 3, "{method}");
        assert_eq!(h.headers["x-lock-identity"], LEDGER);
    }
}

#[test]
fn trailers_before_the_first_message_is_complete_refuse_the_request() {
    let body = acquire_body("pay/ledger/42");
    for cut in 0..body.len() {
        for forged in [false, true] {
            let mut h = host("Acquire", Some(LEDGER));
            let mut gate = RequestGate::new(Some(config()));
            assert_eq!(gate.on_request_headers(&mut h, false), Step::Pause);
            if cut > 0 {
                h.body = body[..cut].to_vec();
                assert_eq!(gate.on_request_body(&mut h, cut, false), Step::Pause);
            }
            if forged {
                h.trailers.insert("x-lock-identity".into(), OTHER.into());
            }
            assert_eq!(gate.on_request_trailers(&mut h), Step::Pause);
            assert_eq!(
                reason(&h),
                Some((GrpcCode::InvalidArgument, "MALFORMED_REQUEST".into())),
                "cut at {cut}"
            );
            assert!(h.trailers.is_empty());
            assert!(
                !h.headers.contains_key("x-lock-key"),
                "undecided: no key set"
            );
        }
    }
}

#[test]
fn exactly_one_uri_san() {
    let other = "spiffe://dev.lock.local/ns/ops/sa/lockctl";
    let xfcc = [
        // Two URI SANs: the attribute names the first, the header shows both.
        format!("Hash=0f;URI={LEDGER};URI={other}"),
        format!("Hash=0f;URI={other};URI={LEDGER}"),
        // The header disagrees with the connection, or is missing or malformed.
        format!("Hash=0f;URI={other}"),
        "Hash=0f".to_owned(),
        format!("URI={LEDGER},URI={LEDGER}"),
        "URI=\"open".to_owned(),
    ];
    for header in xfcc.iter().map(Some).chain([None]) {
        let mut h = host("Acquire", Some(LEDGER));
        match header {
            Some(v) => h.headers.insert(XFCC_HEADER.into(), v.clone()),
            None => h.headers.remove(XFCC_HEADER),
        };
        run(&mut h, acquire_body("pay/ledger/1"), 64);
        assert_eq!(
            reason(&h),
            Some((GrpcCode::Unauthenticated, "UNAUTHENTICATED".into())),
            "{header:?}"
        );
    }
    // One URI SAN: admitted, and the XFCC header does not travel on.
    let mut h = host("Acquire", Some(LEDGER));
    assert_eq!(
        run(&mut h, acquire_body("pay/ledger/1"), 64),
        Step::Continue
    );
    assert!(!h.headers.contains_key(XFCC_HEADER));
}

#[test]
fn non_ascii_keys_travel_percent_encoded() {
    let mut h = host("Acquire", Some(LEDGER));
    assert_eq!(
        run(&mut h, acquire_body("pay/ledger/über"), 5),
        Step::Continue
    );
    assert_eq!(h.headers["x-lock-key"], "pay/ledger/%C3%BCber");
}

/// The switches the boundary tests use to show they catch a missing check (debug only).
#[test]
fn test_switches_turn_exactly_their_check_off() {
    let mut h = host("Acquire", Some(LEDGER));
    let mut gate = RequestGate::new(Some(switched("ignore-trailers")));
    assert_eq!(gate.on_request_headers(&mut h, false), Step::Pause);
    h.trailers.insert("x-lock-identity".into(), OTHER.into());
    assert_eq!(gate.on_request_trailers(&mut h), Step::Continue);
    assert!(h.reply.is_none() && h.trailers.contains_key("x-lock-identity"));

    let mut h = host("Acquire", Some(LEDGER));
    h.headers.insert(
        XFCC_HEADER.into(),
        format!("URI={LEDGER};URI=spiffe://dev.lock.local/x"),
    );
    let mut gate = RequestGate::new(Some(switched("first-uri-san")));
    assert_eq!(gate.on_request_headers(&mut h, false), Step::Pause);
    assert!(h.reply.is_none());
    assert!(filter_config_with(&["no-such-switch"]).compile().is_err());
}

fn filter_config_with(switches: &[&str]) -> FilterConfig {
    let mut c = filter_config();
    c.unsafe_test_switches = switches.iter().map(|s| (*s).to_owned()).collect();
    c
}

/// The fast path (issue 19): with the key as `lock-key` metadata a keyed call is decided
/// on its headers, never paused for its body.
#[test]
fn a_metadata_key_is_decided_on_headers() {
    for key in ["pay/ledger/42", "pay/ledger/über", "pay/ledger/ключ"] {
        let mut h = host("Acquire", Some(LEDGER));
        h.headers.insert("lock-key".into(), encode_key(key));
        h.headers
            .insert("x-lock-key".into(), "pay/ledger/forged".into());
        let mut gate = RequestGate::new(Some(config()));
        assert_eq!(
            gate.on_request_headers(&mut h, false),
            Step::Continue,
            "{key}"
        );
        assert!(h.reply.is_none());
        assert_eq!(h.headers["x-lock-key"], encode_key(key));
        assert!(!h.headers.contains_key("lock-key"), "read and removed");
        assert_eq!(h.headers["x-lock-identity"], LEDGER);
        // Decided: the body passes untouched, whatever it says (the arbiter matches it).
        h.body = acquire_body("pay/other");
        let n = h.body.len();
        assert_eq!(gate.on_request_body(&mut h, n, true), Step::Continue);
        assert!(h.reply.is_none());
    }
}

/// Every refusal on the fast path is the body path's, byte for byte (code, message and
/// status details): a free, a held or a nonexistent key all look alike to an identity
/// without a grant (ADR-19), whichever path its client takes.
#[test]
fn fast_path_refusals_are_the_body_paths() {
    let cases = [
        (Some(LEDGER), "pay/ledgers"),
        (Some(LEDGER), "nope/x"),
        (Some("spiffe://dev.lock.local/stranger"), "pay/ledger/1"),
        (Some(LEDGER), "archive/x"),
        (Some(LEDGER), "pay/a//b"),
        (None, "pay/ledger/1"),
    ];
    for (san, key) in cases {
        let mut body = host("Acquire", san);
        run(&mut body, acquire_body(key), 5);
        let mut fast = host("Acquire", san);
        fast.headers.insert("lock-key".into(), encode_key(key));
        let mut gate = RequestGate::new(Some(config()));
        assert_eq!(gate.on_request_headers(&mut fast, false), Step::Pause);
        assert!(body.reply.is_some(), "{key}: refused on the body path");
        assert_eq!(
            fast.reply, body.reply,
            "{key}: the same reply on both paths"
        );
    }
}

/// A `lock-key` that is not exactly one key's encoding is malformed, not a key.
#[test]
fn a_metadata_key_in_another_spelling_is_refused() {
    for value in [
        "pay/ledger/%c3%bc",
        "pay/ledger/%41",
        "pay/ledger/%",
        "pay/ledger/ x",
    ] {
        let mut h = host("Acquire", Some(LEDGER));
        h.headers.insert("lock-key".into(), value.into());
        let mut gate = RequestGate::new(Some(config()));
        assert_eq!(
            gate.on_request_headers(&mut h, false),
            Step::Pause,
            "{value}"
        );
        assert_eq!(
            reason(&h),
            Some((GrpcCode::InvalidArgument, "MALFORMED_REQUEST".into())),
            "{value}"
        );
        assert!(!h.headers.contains_key("x-lock-key"));
    }
}

fn set_body(keys: &[&str]) -> Vec<u8> {
    frame(
        &v1::AcquireAllRequest {
            keys: keys.iter().map(|k| (*k).to_owned()).collect(),
            session_id: 7,
            wait_millis: 0,
        }
        .encode_to_vec(),
    )
}

fn run_with(cfg: Rc<CompiledFilterConfig>, h: &mut FakeHost, body: Vec<u8>) -> Step {
    let mut gate = RequestGate::new(Some(cfg));
    if gate.on_request_headers(h, false) != Step::Pause || h.reply.is_some() {
        return Step::Pause;
    }
    h.body = body;
    let len = h.body.len();
    gate.on_request_body(h, len, false)
}

/// A set is decided on every key: admitted, it travels as `x-lock-keys` (sorted) and is
/// routed on its least key; one key without a grant refuses the whole request with the
/// reply a single ungranted key gets, whichever key it is and wherever it sits.
#[test]
fn a_set_is_decided_on_every_key() {
    for method in ["AcquireAll", "ReleaseAll"] {
        let mut h = host(method, Some(LEDGER));
        h.headers.insert("x-lock-keys".into(), "pay/other".into());
        let keys = vec!["pay/ledger/b".to_owned(), "pay/ledger/a".to_owned()];
        let body = match method {
            "AcquireAll" => set_body(&["pay/ledger/b", "pay/ledger/a"]),
            _ => frame(
                &v1::ReleaseAllRequest {
                    keys,
                    token: 1 << 48 | 9,
                    session_id: 7,
                }
                .encode_to_vec(),
            ),
        };
        let step = run(&mut h, body, 2);
        assert_eq!(step, Step::Continue, "{method}");
        assert_eq!(h.headers["x-lock-key"], "pay/ledger/a");
        assert_eq!(h.headers["x-lock-keys"], "pay/ledger/a pay/ledger/b");
    }
    let mut single = host("Acquire", Some(LEDGER));
    run(&mut single, acquire_body("pay/other"), 1000);
    let denial = single.reply.unwrap();
    for keys in [
        &["pay/other", "pay/ledger/a"][..],
        &["pay/ledger/a", "pay/other"],
        &["pay/ledger/a", "pay/ledger/b", "zzz/x"],
        &["aaa/x", "pay/ledger/a"],
    ] {
        let mut h = host("AcquireAll", Some(LEDGER));
        assert_eq!(run(&mut h, set_body(keys), 1000), Step::Pause, "{keys:?}");
        assert_eq!(h.reply.as_ref(), Some(&denial), "{keys:?}");
        assert!(!h.headers.contains_key("x-lock-keys"), "{keys:?}");
    }
    // The switch that reads only the first key lets the last one through.
    let mut h = host("AcquireAll", Some(LEDGER));
    let step = run_with(
        switched("set-first-key-only"),
        &mut h,
        set_body(&["pay/ledger/a", "pay/other"]),
    );
    assert_eq!(step, Step::Continue);
}

/// A set cannot take the fast path: a granted `lock-key` in the metadata decides nothing
/// for a body naming other keys; the body's every key is decided.
#[test]
fn a_set_ignores_a_metadata_key() {
    let mut h = host("AcquireAll", Some(LEDGER));
    h.headers.insert("lock-key".into(), "pay/ledger/a".into());
    assert_eq!(
        run(&mut h, set_body(&["pay/ledger/a", "pay/other"]), 1000),
        Step::Pause
    );
    assert_eq!(
        reason(&h),
        Some((GrpcCode::PermissionDenied, "NOT_GRANTED".into()))
    );
    assert!(!h.headers.contains_key("lock-key"));
}

/// Empty, oversized and repeating sets are malformed; a bad key is INVALID_KEY, as alone.
#[test]
fn malformed_sets_are_refused() {
    let many: Vec<String> = (0..=lock_config::MAX_SET_KEYS)
        .map(|i| format!("pay/ledger/{i}"))
        .collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    for (keys, want) in [
        (&[][..], "MALFORMED_REQUEST"),
        (&many[..], "MALFORMED_REQUEST"),
        (&["pay/ledger/a", "pay/ledger/a"], "MALFORMED_REQUEST"),
        (&["pay/ledger/a", "pay/ledger/../x"], "INVALID_KEY"),
    ] {
        let mut h = host("AcquireAll", Some(LEDGER));
        assert_eq!(run(&mut h, set_body(keys), 1000), Step::Pause);
        assert_eq!(reason(&h).map(|r| r.1), Some(want.into()), "{keys:?}");
    }
}

/// Every `x-lock-*` header a client sends is removed, including names the edge sets only
/// for some methods (`x-lock-keys` on a single-key call).
#[test]
fn client_edge_headers_are_removed_whatever_their_name() {
    let mut h = host("Acquire", Some(LEDGER));
    h.headers.insert("x-lock-keys".into(), "pay/other".into());
    h.headers.insert("X-Lock-Future".into(), "x".into());
    assert_eq!(
        run(&mut h, acquire_body("pay/ledger/a"), 1000),
        Step::Continue
    );
    assert!(!h.headers.contains_key("x-lock-keys"));
    assert!(!h.headers.contains_key("X-Lock-Future"));
}
