//! Operating the arbiter: what an operator sees and steers, beside the lock path.
//!
//! | module             | owns                                                                 |
//! |--------------------|----------------------------------------------------------------------|
//! | `metrics`          | the Prometheus registry and every series the arbiter counts          |
//! | `metrics/register` | every series created and registered: its name and help text          |
//! | `admin`            | the admin listener's pages: `/metrics` and `/status`                 |
//! | `traces`           | one span per call and per etcd call, exported as OpenTelemetry JSON  |
//! | `logging`          | the arbiter's logs, and its trace export                             |
//! | `drain`            | the drain at SIGTERM: NOT_SERVING, DRAINING answers                  |
//!
//! From `lock_store`, shared with the other binaries: `bugs` (the deliberate bugs of the
//! release gate, debug builds only), `registry_files` (a registry folder read and
//! validated), and the admin listener itself.
//!
//! May import: nothing else of the arbiter. Every other folder imports `ops`; `ops`
//! imports none of them (not even `error`), so it is the floor.

pub mod admin;
pub(crate) mod drain;
pub mod logging;
pub mod metrics;
pub(crate) mod traces;

pub(crate) use lock_store::{bugs, registry_files};
