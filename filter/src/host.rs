//! The only way edge logic touches Envoy. The wasm glue implements it with proxy-wasm
//! hostcalls; tests implement it with a recording fake.

use lock_config::GrpcCode;

pub trait Host {
    /// An Envoy attribute, e.g. `["connection", "mtls"]`. Booleans come back as one byte.
    fn property(&self, path: &[&str]) -> Option<Vec<u8>>;
    /// Every request header as Envoy holds them (names lower-case), in one host call: each
    /// call that returns data crosses into the VM twice (the answer is allocated in it), so
    /// the four headers the gate reads cost one crossing instead of four (issue 33).
    /// Values are bytes: HTTP/2 allows any octet but NUL, CR and LF in a value, and a
    /// client's non-UTF-8 value must be refused, not panic the filter.
    fn request_headers(&self) -> Vec<(String, Vec<u8>)>;
    /// Sets (Some) or removes (None) a request header.
    fn set_request_header(&mut self, name: &str, value: Option<&str>);
    /// Names of the request trailers (None if the host cannot list them).
    fn request_trailer_names(&self) -> Option<Vec<String>>;
    /// Removes a request trailer.
    fn remove_request_trailer(&mut self, name: &str);
    /// The first `len` bytes of the request body buffered so far.
    fn request_body(&self, len: usize) -> Option<Vec<u8>>;
    /// Ends the request with a local gRPC reply (trailers-only response).
    fn send_grpc_reply(&mut self, code: GrpcCode, message: &str, headers: &[(&str, &str)]);
    /// The host's wall clock, nanoseconds since the Unix epoch (may step backwards).
    fn now_ns(&self) -> u64;
    /// Shared data across the VM's worker threads: value and compare-and-swap token.
    fn shared_data(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>);
    /// Sets shared data if `cas` still matches (None: unconditionally).
    fn set_shared_data(
        &mut self,
        key: &str,
        value: &[u8],
        cas: Option<u32>,
    ) -> Result<(), SharedDataError>;
    /// Adds one to a counter. Names carry bounded labels only (reason, namespace).
    fn count(&mut self, metric: &str);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedDataError {
    /// Another worker changed the value since it was read.
    CasMismatch,
    Other,
}
