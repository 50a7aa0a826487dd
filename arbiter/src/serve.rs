//! lock.v1 on the wire: the listener, the service and its streams, down to the engine
//! façade every call goes through.
//!
//! | module            | owns                                                                       |
//! |-------------------|----------------------------------------------------------------------------|
//! | `server`          | serving: the listener, the interceptor, the services on it                 |
//! | `peer_tls`        | the listener's mutual TLS: only the edge's identities, reloaded            |
//! | `edge`            | what the edge decided, read from the initial HEADERS                       |
//! | `service`         | the `lock.v1.Lock` service: requests to the engine, errors to statuses     |
//! | `calls`           | the work of an Acquire and a Release, whatever carried them                |
//! | `hold`            | the Hold stream: one hold of one key on one HTTP/2 stream                  |
//! | `keepalive`       | the KeepAlive stream: session renewals                                     |
//! | `observe`         | the Observe stream: a key's holder now, then every change of it            |
//! | `observe/change`  | a watch event read as the key's state, once for every observer             |
//! | `observers`       | the bound on open Observe streams (`--max-observers`)                      |
//! | `engine`          | the façade: class, session, cluster and wait kind, then into `lock`        |
//! | `engine/set`      | AcquireAll and ReleaseAll: what a set must be before etcd, then `lock/set` |
//! | `engine/reads`    | ValidateToken and Inspect: reads, never a grant                            |
//! | `health`          | `grpc.health.v1` for Envoy: SERVING while the epoch record reads back      |
//! | `registry_reload` | the registry folder polled, a valid new set swapped in whole               |
//! | `proto`           | the tonic server stubs for lock.v1                                         |
//!
//! May import: `lock`, `cluster`, `store`, `error`, `ops`; nothing imports `serve` but the
//! binary. A call's work goes through `engine`, the one module here that drives `lock` and
//! `cluster`; beside it, `calls` and `keepalive` take plain types from `lock` (a hold's
//! mode, a stream's session keepers) and `observe` reads the store behind the seal (a
//! hint, never a grant).

pub(crate) mod calls;
pub(crate) mod edge;
pub mod engine;
pub(crate) mod health;
pub(crate) mod hold;
pub(crate) mod keepalive;
pub(crate) mod observe;
pub mod observers;
pub mod peer_tls;
pub mod proto;
pub mod registry_reload;
pub mod server;
pub mod service;
