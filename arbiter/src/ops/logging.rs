//! The arbiter's logs: every binary's (`lock_store::logging`), and with a trace file its
//! spans to the OpenTelemetry exporter (`traces.rs`).

use lock_store::logging::log_filter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// Keeps the trace exporter; dropping it flushes the last spans (at exit).
pub struct Traces(Option<opentelemetry_sdk::trace::SdkTracerProvider>);

impl Drop for Traces {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = p.shutdown();
        }
    }
}

/// `lock_store::logging::init`, and with `trace_file` the request and etcd spans exported
/// to it (each layer filtered on its own: the log filter never turns the spans on, and no
/// span is made when nothing exports them).
pub fn init_with_traces(trace_file: Option<&std::path::Path>) -> std::io::Result<Traces> {
    let logs = tracing_subscriber::fmt::layer().with_filter(log_filter());
    let Some(path) = trace_file else {
        tracing_subscriber::registry().with(logs).init();
        return Ok(Traces(None));
    };
    let provider = crate::ops::traces::provider(path, std::time::Duration::from_millis(500))?;
    let spans = tracing_opentelemetry::layer()
        .with_tracer(crate::ops::traces::tracer(&provider))
        .with_filter(
            tracing_subscriber::filter::Targets::new()
                .with_target(crate::ops::traces::TARGET, tracing::Level::DEBUG),
        );
    tracing_subscriber::registry().with(logs).with(spans).init();
    Ok(Traces(Some(provider)))
}
