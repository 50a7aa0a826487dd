//! The arbiter: the only component with an etcd write credential for grants (ADR-18).
//! It owns the grant and release transactions, sessions and the epoch seal, and serves
//! `lock.v1` behind Envoy.

pub mod admin;
pub mod batch;
pub mod bugs;
pub mod calls;
pub mod clusters;
pub mod drain;
pub mod durable;
pub mod edge;
pub mod engine;
pub mod epoch;
pub mod error;
pub mod etcd;
pub mod etcd_roles;
pub mod etcd_tls;
pub mod fifo;
pub mod grant;
pub mod health;
pub mod hold;
pub mod hold_end;
pub mod https;
pub mod keepalive;
pub mod layout;
pub mod logging;
pub mod metrics;
pub mod observe;
pub mod observe_hub;
pub mod observers;
pub mod peer_tls;
pub mod proto;
pub mod queue;
pub mod registry_files;
pub mod registry_reload;
pub mod rehome;
pub mod release;
pub mod release_watch;
pub mod renewals;
pub mod server;
pub mod service;
pub mod sessions;
pub mod set_grant;
pub mod shard_map;
pub mod shared;
pub mod store;
pub mod traces;
pub mod wait_end;
pub mod waiter;
pub mod watch_hub;

pub use engine::Engine;
pub use error::ArbiterError;
pub use etcd::Etcd;
pub use store::Store;
