//! Generated prost types: `lock.v1` (the API) and the `google.rpc` subset used for rich
//! error details. No gRPC transport here, so this builds for wasm32-wasip1.

#[allow(clippy::all, missing_docs)]
pub mod lock {
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/lock.v1.rs"));
    }
}

#[allow(clippy::all, missing_docs)]
pub mod google {
    pub mod rpc {
        include!(concat!(env!("OUT_DIR"), "/google.rpc.rs"));
    }
}

pub use lock::v1;
