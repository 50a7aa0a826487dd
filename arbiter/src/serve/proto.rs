//! tonic service stubs for lock.v1 (messages come from lock-config).
#![allow(clippy::all, missing_docs)]
include!(concat!(env!("OUT_DIR"), "/lock.v1.rs"));
