//! The lock service's edge filter (proxy-wasm, `wasm32-wasip1`).
//!
//! Everything the filter decides lives in plain Rust modules behind the [`host::Host`]
//! trait and is tested natively; the proxy-wasm glue (`glue`, wasm only) only forwards
//! callbacks to a [`gate::RequestGate`].

pub mod cost;
pub mod error;
pub mod frame;
pub mod gate;
pub mod host;
pub mod method;
pub mod rate;
pub mod xfcc;

#[cfg(target_arch = "wasm32")]
mod glue;

pub use error::EdgeError;
pub use gate::{RequestGate, Step};
pub use host::Host;
