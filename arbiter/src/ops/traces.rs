//! Traces (ADR-22): one span per lock.v1 call, a child span per etcd call, continued from
//! the W3C `traceparent` the edge forwards, exported by the OpenTelemetry SDK. No
//! OpenTelemetry collector is installable here, so the exporter writes the spans as JSON
//! lines to a file (`--trace-file`); a collector's file receiver or a log shipper reads
//! them. A span carries the operation, and the class and namespace it resolved to; never a
//! key, an identity, a session or a token (a token is a capability: a test scans the
//! exported spans for every token it was granted).
//!
//! The spans are `DEBUG` under their own target, so without `--trace-file` no layer wants
//! them and they cost a disabled callsite's check on the request path.

use opentelemetry::propagation::{Extractor, TextMapPropagator as _};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter,
};
use std::io::Write as _;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The target every span of this module is created under.
pub const TARGET: &str = "lock_trace";

/// A lock.v1 call's span, a child of the caller's trace when the request carries one.
pub fn request(operation: &'static str, headers: &tonic::metadata::MetadataMap) -> tracing::Span {
    let span = tracing::debug_span!(
        target: TARGET,
        "lock.v1",
        otel.name = operation,
        otel.kind = "server",
        lock.class = tracing::field::Empty,
        lock.namespace = tracing::field::Empty,
    );
    if headers.get("traceparent").is_some() {
        let parent = TraceContextPropagator::new().extract(&Headers(headers));
        // A malformed traceparent leaves a trace of its own: nothing to refuse.
        let _ = span.set_parent(parent);
    }
    span
}

/// The namespace a call's key is in, on its span (bounded: from the registry).
pub fn namespace(namespace: &str) {
    tracing::Span::current().record("lock.namespace", namespace);
}

/// The class a call resolved to, on its span.
pub fn class(class: &str) {
    tracing::Span::current().record("lock.class", class);
}

/// An etcd call's span (a child of the call that made it).
pub fn etcd(operation: &'static str) -> tracing::Span {
    tracing::debug_span!(
        target: TARGET,
        "etcd",
        otel.name = operation,
        otel.kind = "client",
        db.system = "etcd",
    )
}

struct Headers<'a>(&'a tonic::metadata::MetadataMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|k| match k {
                tonic::metadata::KeyRef::Ascii(k) => Some(k.as_str()),
                tonic::metadata::KeyRef::Binary(_) => None,
            })
            .collect()
    }
}

/// Writes each exported span as one JSON line.
#[derive(Debug)]
pub struct FileExporter {
    file: Mutex<std::fs::File>,
}

impl FileExporter {
    pub fn create(path: &Path) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Self {
            file: Mutex::new(file),
        })
    }
}

fn unix_nanos(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

/// One span as its JSON line (pure).
pub fn line(span: &SpanData) -> String {
    let attributes: serde_json::Map<String, serde_json::Value> = span
        .attributes
        .iter()
        .map(|kv| {
            (
                kv.key.as_str().to_owned(),
                serde_json::Value::String(kv.value.as_str().into_owned()),
            )
        })
        .collect();
    serde_json::json!({
        "trace_id": span.span_context.trace_id().to_string(),
        "span_id": span.span_context.span_id().to_string(),
        "parent_span_id": span.parent_span_id.to_string(),
        "name": span.name,
        "kind": format!("{:?}", span.span_kind),
        "start_unix_nanos": unix_nanos(span.start_time).to_string(),
        "end_unix_nanos": unix_nanos(span.end_time).to_string(),
        "attributes": attributes,
    })
    .to_string()
}

impl SpanExporter for FileExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let mut text = String::new();
        for span in &batch {
            text.push_str(&line(span));
            text.push('\n');
        }
        let mut file = self
            .file
            .lock()
            .map_err(|_| opentelemetry_sdk::error::OTelSdkError::InternalFailure("lock".into()))?;
        file.write_all(text.as_bytes())
            .map_err(|e| opentelemetry_sdk::error::OTelSdkError::InternalFailure(e.to_string()))
    }
}

/// A provider exporting to `path` in batches every `every` (and at shutdown).
pub fn provider(path: &Path, every: Duration) -> std::io::Result<SdkTracerProvider> {
    let batch = BatchSpanProcessor::builder(FileExporter::create(path)?)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_scheduled_delay(every)
                .build(),
        )
        .build();
    Ok(SdkTracerProvider::builder()
        .with_span_processor(batch)
        .build())
}

/// The tracer the `tracing` layer hands spans to.
pub fn tracer(provider: &SdkTracerProvider) -> opentelemetry_sdk::trace::Tracer {
    provider.tracer("lock-arbiter")
}
