//! Logs for every binary of the service (arbiter, lock-audit, lock-admin, lock-webhook):
//! `tracing` to stderr, filtered by `RUST_LOG`, `info` by default.

pub fn init() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
}
