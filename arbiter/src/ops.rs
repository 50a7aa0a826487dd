//! Operating the arbiter: what an operator sees and steers, beside the lock path.
//!
//! | module             | owns                                                                 |
//! |--------------------|----------------------------------------------------------------------|
//! | `metrics`          | the Prometheus registry and every series the arbiter counts          |
//! | `metrics/register` | every series created and registered: its name and help text          |
//! | `admin`            | the admin listener: `/metrics` and `/status`, and lockctl's scrape   |
//! | `traces`           | one span per call and per etcd call, exported as OpenTelemetry JSON  |
//! | `logging`          | logs for every binary of the service, and the arbiter's trace export |
//! | `drain`            | the drain at SIGTERM: NOT_SERVING, DRAINING answers                  |
//! | `bugs`             | the deliberate bugs of the release gate (debug builds only)          |
//! | `https`            | server TLS for the HTTPS listeners beside the lock path              |
//! | `registry_files`   | a registry folder read and validated, dated today                    |
//!
//! May import: nothing else of the arbiter. Every other folder imports `ops`; `ops`
//! imports none of them (not even `error`), so it is the floor.

pub mod admin;
pub mod bugs;
pub(crate) mod drain;
pub mod https;
pub mod logging;
pub mod metrics;
pub mod registry_files;
pub(crate) mod traces;
