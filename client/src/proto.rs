//! tonic client stubs for lock.v1.
#![allow(clippy::all, missing_docs)]
include!(concat!(env!("OUT_DIR"), "/lock.v1.rs"));
