//! The only way edge logic touches Envoy. The wasm glue implements it with proxy-wasm
//! hostcalls; tests implement it with a recording fake.

use lock_config::GrpcCode;

pub trait Host {
    /// An Envoy attribute, e.g. `["connection", "mtls"]`. Booleans come back as one byte.
    fn property(&self, path: &[&str]) -> Option<Vec<u8>>;
    fn request_header(&self, name: &str) -> Option<String>;
    /// Sets (Some) or removes (None) a request header.
    fn set_request_header(&mut self, name: &str, value: Option<&str>);
    /// The first `len` bytes of the request body buffered so far.
    fn request_body(&self, len: usize) -> Option<Vec<u8>>;
    /// Ends the request with a local gRPC reply (trailers-only response).
    fn send_grpc_reply(&mut self, code: GrpcCode, message: &str, headers: &[(&str, &str)]);
}
