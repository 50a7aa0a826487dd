//! Logs for every binary of the service (arbiter, lock-audit, lock-admin, lock-webhook,
//! lock-registry-sync): `tracing` to stderr, filtered by `RUST_LOG`, `info` by default. The
//! arbiter adds its trace export on top (its own `ops/logging.rs`), with the same filter.

/// The filter every binary's logs pass: `RUST_LOG`, else `info`.
pub fn log_filter() -> tracing_subscriber::EnvFilter {
    tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
}

pub fn init() {
    tracing_subscriber::fmt()
        .with_env_filter(log_filter())
        .init();
}
