//! What the service's binaries share beside the lock path (the arbiter, lock-audit,
//! lock-admin, lock-webhook, lock-registry-sync, lockctl).
//!
//! | module           | owns                                                                  |
//! |------------------|-----------------------------------------------------------------------|
//! | `logging`        | logs for every binary: `tracing` to stderr, filtered by `RUST_LOG`    |
//! | `https`          | server TLS for the HTTPS listeners beside the lock path               |
//! | `admin`          | an admin listener (`/metrics`), and its client: lockctl's scrape      |
//! | `registry_files` | a registry folder read and validated, dated today                     |
//! | `bugs`           | the deliberate bugs of the release gate (debug builds only)           |
//!
//! May import: nothing else of this crate: it is the floor.

pub mod admin;
pub mod bugs;
pub mod https;
pub mod logging;
pub mod registry_files;
