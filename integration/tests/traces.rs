//! Traces (issue 38, ADR-22): the arbiter's spans, exported by the OpenTelemetry SDK to a
//! file (`--trace-file`; no collector is installable here), through the real edge. A call
//! that carries a W3C `traceparent` is continued: its `lock.v1/Acquire` span is in the
//! caller's trace, a child of the caller's span, with the class and namespace it resolved
//! to, and the etcd transactions it made are spans of the same trace. No span carries a
//! token: the file is scanned for every token the test was granted, and for any attribute
//! named like one. The debug-only `token-in-span` bug (the grant's token as an attribute)
//! is caught by the same scan.

use lock_config::proto::v1::{AcquireRequest, OpenSessionRequest, ReleaseRequest};
use lock_integration::Stack;
use lock_integration::pki::LEDGER;
use lock_integration::stack::StackOptions;
use std::time::{Duration, Instant};

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";

fn traced<T>(msg: T) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    let parent = format!("00-{TRACE_ID}-{PARENT_ID}-01");
    req.metadata_mut()
        .insert("traceparent", parent.parse().expect("ascii"));
    req
}

/// Three locks through the edge on one arbiter writing spans; returns the spans (JSON
/// lines) and the tokens granted.
async fn spans(bugs: &[&str]) -> (Vec<serde_json::Value>, Vec<u64>) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("spans.jsonl");
    let mut arbiter_args = vec!["--trace-file".to_owned(), file.display().to_string()];
    for b in bugs {
        arbiter_args.extend(["--inject-bug".to_owned(), (*b).to_owned()]);
    }
    let stack = Stack::start(StackOptions {
        arbiters: 1,
        arbiter_args,
        ..StackOptions::default()
    })
    .await
    .unwrap();
    let mut c = stack.workload(LEDGER).await.unwrap();
    let mut tokens = Vec::new();
    for i in 0..3 {
        let key = format!("pay/ledger/traced-{i}");
        let session_id = c
            .open_session(traced(OpenSessionRequest { key: key.clone() }))
            .await
            .unwrap()
            .into_inner()
            .session_id;
        let token = c
            .acquire(traced(AcquireRequest {
                key: key.clone(),
                session_id,
                wait_millis: 0,
                ..Default::default()
            }))
            .await
            .unwrap()
            .into_inner()
            .token;
        tokens.push(token);
        c.release(traced(ReleaseRequest {
            key,
            token,
            session_id,
            ..Default::default()
        }))
        .await
        .unwrap();
    }
    // Exported in batches every 500 ms: wait for the last release's span (bounded).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        if lines
            .iter()
            .filter(|s| s["name"] == "lock.v1/Release")
            .count()
            >= 3
        {
            return (lines, tokens);
        }
        assert!(Instant::now() < deadline, "spans never exported: {text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every place a token could hide in a span: its decimal and hex forms, anywhere in the
/// line, or an attribute whose name says token.
fn leaks(spans: &[serde_json::Value], tokens: &[u64]) -> Vec<String> {
    let mut out = Vec::new();
    for s in spans {
        let text = s.to_string();
        for t in tokens {
            for form in [t.to_string(), format!("{t:x}")] {
                if text.contains(&form) {
                    out.push(format!("token {form} in {text}"));
                }
            }
        }
        if let Some(attrs) = s["attributes"].as_object() {
            for k in attrs.keys().filter(|k| k.contains("token")) {
                out.push(format!("attribute {k} in {text}"));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_continue_the_callers_trace_with_etcd_children_and_no_token() {
    let (spans, tokens) = spans(&[]).await;
    let acquires: Vec<&serde_json::Value> = spans
        .iter()
        .filter(|s| s["name"] == "lock.v1/Acquire")
        .collect();
    assert_eq!(acquires.len(), 3, "{spans:#?}");
    for a in &acquires {
        assert_eq!(a["trace_id"], TRACE_ID, "the caller's trace: {a}");
        assert_eq!(a["parent_span_id"], PARENT_ID, "the caller's span: {a}");
        assert_eq!(a["attributes"]["lock.class"], "pay-ledger", "{a}");
        assert_eq!(a["attributes"]["lock.namespace"], "pay", "{a}");
    }
    // The grants' transactions: etcd spans in the same trace.
    let txns = spans
        .iter()
        .filter(|s| s["name"] == "txn" && s["trace_id"] == TRACE_ID)
        .count();
    assert!(txns >= 3, "etcd spans: {spans:#?}");
    assert_eq!(leaks(&spans, &tokens), Vec::<String>::new());
}

/// The bugs exist only in debug builds (`arbiter --inject-bug`).
#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scan_catches_a_token_in_a_span() {
    let (spans, tokens) = spans(&["token-in-span"]).await;
    let found = leaks(&spans, &tokens);
    assert!(!found.is_empty(), "the token in the span went unseen");
}
