//! Rust client of the fenced lock service (`lock.v1` through Envoy with the workload's SVID:
//! from files, from the SPIFFE Workload API, or presented by the workload's mesh sidecar).
//!
//! - One session (etcd lease) per distinct TTL, opened on first use; one KeepAlive stream per
//!   session renews every hold attached to it, every TTL/3 (ADR-10).
//! - Drain then fence (ADR-12): [`Hold::can_start`] turns false at the first failed renewal;
//!   at the monotonic send time of the last successful renewal + TTL − 1 s the hold's required
//!   `on_fence` runs and the hold is dead, before the store's lease can expire.
//! - Re-entrancy (ADR-13): nested acquires of a key this client holds count locally; only the
//!   outermost acquire and the final release call the service.
//! - Refusals are [`LockError`] variants; waits, transient errors (with jittered backoff) and
//!   rate limits (honouring retry-after) are handled inside the caller's deadline.
//! - Metrics, opt-in ([`LockClient::with_metrics`]): wait and hold times and lost holds in
//!   a Prometheus registry, labelled by class and outcome only ([`ClientMetrics`]).
//!
//! ```no_run
//! use lock_client::{Config, LockClient};
//! use std::time::Duration;
//!
//! # async fn run() -> Result<(), lock_client::LockError> {
//! // SVID files; or `Config::mesh_sidecar("http://127.0.0.1:15001")` behind a mesh sidecar, or
//! // `Credentials::WorkloadApi` with `lock_client::workload_api_source(socket).await?`.
//! let client = LockClient::new(Config::files(
//!     "https://127.0.0.1:8443",
//!     "svid.pem",
//!     "svid.key",
//!     "bundle.pem",
//!     "localhost",
//! ))?;
//! let hold = client
//!     .acquire("pay/ledger/42", Duration::from_secs(5), || {
//!         eprintln!("lock lost: stop writing");
//!     })
//!     .await?;
//! if hold.can_start() {
//!     // UPDATE ledger SET ..., fence = $token WHERE id = 42 AND fence < $token
//!     let _fence = hold.token().as_i64();
//! }
//! hold.release().await?;
//! # Ok(())
//! # }
//! ```

mod client;
mod connect;
mod election;
mod error;
mod hold;
mod hold_stream;
pub mod liveness;
mod metrics;
mod observe;
mod permit;
pub mod proto;
mod retry;
mod session;
mod set;
mod shared;
mod state;
pub mod stub;

pub use client::LockClient;
pub use connect::{
    Config, Credentials, SvidFiles, instance_for, process_instance, workload_api_source,
};
pub use election::Leadership;
pub use error::{LockError, refusal};
pub use hold::Hold;
pub use hold_stream::DEFAULT_MAX_HOLD_STREAMS;
pub use lock_config::FencingToken;
pub use lock_config::Reason;
pub use lock_config::status_details::Refusal;
pub use metrics::ClientMetrics;
pub use observe::{Change, Holder, Observation, Observed};
pub use permit::Permit;
pub use set::HeldSet;
pub use shared::SharedHold;

/// The manual's Rust page, compiled as doctests: a snippet that no longer compiles against
/// this crate fails `cargo test` (issue 37).
#[cfg(doctest)]
#[doc = include_str!("../../docs/src/using/rust.md")]
pub struct BookRustPage;
