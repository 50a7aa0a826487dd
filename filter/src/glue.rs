//! proxy-wasm glue: forwards Envoy's callbacks to the edge logic. Nothing here decides.

use crate::gate::{RequestGate, Step};
use crate::host::{Host, SharedDataError};
use lock_config::{CompiledFilterConfig, FilterConfig, GrpcCode};
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{
    Action, BufferType, ContextType, GrpcStatusCode, LogLevel, MapType, MetricType, Status,
};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Warn);
    // A panic inside the VM must be visible in Envoy's log rather than a silent trap.
    std::panic::set_hook(Box::new(|info| {
        let _ = hostcalls::log(LogLevel::Critical, &format!("lock-filter panic: {info}"));
    }));
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(LockFilterRoot { config: None }) });
}}

struct LockFilterRoot {
    config: Option<Rc<CompiledFilterConfig>>,
}

impl Context for LockFilterRoot {}

impl RootContext for LockFilterRoot {
    /// Parse, compile, freeze. Returning false makes Envoy reject the configuration and
    /// keep serving with the previous one.
    fn on_configure(&mut self, _size: usize) -> bool {
        let Some(bytes) = self.get_plugin_configuration() else {
            let _ = hostcalls::log(LogLevel::Error, "lock-filter: no plugin configuration");
            return false;
        };
        match FilterConfig::from_json(&bytes).and_then(|c| c.compile()) {
            Ok(compiled) if compiled.test_switches.any() && !cfg!(debug_assertions) => {
                let _ = hostcalls::log(
                    LogLevel::Error,
                    "lock-filter: configuration rejected: unsafeTestSwitches are honoured by debug builds only",
                );
                false
            }
            Ok(compiled) => {
                if compiled.test_switches.any() {
                    let _ = hostcalls::log(
                        LogLevel::Critical,
                        &format!(
                            "lock-filter: UNSAFE TEST SWITCHES ON ({:?}): this edge is deliberately broken",
                            compiled.test_switches
                        ),
                    );
                }
                let _ = hostcalls::log(
                    LogLevel::Info,
                    &format!(
                        "lock-filter: configuration accepted ({} identities, region {})",
                        compiled.authoriser.identities(),
                        compiled.region
                    ),
                );
                // The version this Envoy now serves, as the ECDS version_info says it
                // (`lockctl registry status` reads the gauge).
                let version = lock_config::ecds::config_version(&bytes);
                if let Ok(id) = hostcalls::define_metric(MetricType::Gauge, CONFIG_VERSION) {
                    let _ = hostcalls::record_metric(id, version);
                }
                self.config = Some(Rc::new(compiled));
                true
            }
            Err(e) => {
                let _ = hostcalls::log(
                    LogLevel::Error,
                    &format!("lock-filter: configuration rejected: {e}"),
                );
                false
            }
        }
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(LockFilter {
            gate: RequestGate::new(self.config.clone()),
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct LockFilter {
    gate: RequestGate,
}

impl Context for LockFilter {}

impl HttpContext for LockFilter {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        action(self.gate.on_request_headers(&mut WasmHost, end_of_stream))
    }

    fn on_http_request_trailers(&mut self, _num_trailers: usize) -> Action {
        action(self.gate.on_request_trailers(&mut WasmHost))
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        action(
            self.gate
                .on_request_body(&mut WasmHost, body_size, end_of_stream),
        )
    }
}

fn action(step: Step) -> Action {
    match step {
        Step::Continue => Action::Continue,
        Step::Pause => Action::Pause,
    }
}

/// The current HTTP context's host: proxy-wasm hostcalls act on the context being called.
struct WasmHost;

impl Host for WasmHost {
    fn property(&self, path: &[&str]) -> Option<Vec<u8>> {
        hostcalls::get_property(path.to_vec()).ok().flatten()
    }

    fn request_headers(&self) -> Vec<(String, Vec<u8>)> {
        // get_map_bytes, not get_map: proxy-wasm's get_map (and get_map_value) unwrap each
        // value as UTF-8, which a client's header value need not be. Names are tokens
        // (Envoy's codec checks them), so their UTF-8 is given.
        hostcalls::get_map_bytes(MapType::HttpRequestHeaders).unwrap_or_default()
    }

    fn set_request_header(&mut self, name: &str, value: Option<&str>) {
        let _ = hostcalls::set_map_value(MapType::HttpRequestHeaders, name, value);
    }

    fn request_trailer_names(&self) -> Option<Vec<String>> {
        hostcalls::get_map_bytes(MapType::HttpRequestTrailers)
            .ok()
            .map(|m| m.into_iter().map(|(k, _)| k).collect())
    }

    fn remove_request_trailer(&mut self, name: &str) {
        let _ = hostcalls::set_map_value(MapType::HttpRequestTrailers, name, None);
    }

    fn request_body(&self, len: usize) -> Option<Vec<u8>> {
        hostcalls::get_buffer(BufferType::HttpRequestBody, 0, len)
            .ok()
            .flatten()
    }

    fn send_grpc_reply(&mut self, code: GrpcCode, message: &str, headers: &[(&str, &str)]) {
        let headers: Vec<(&str, &[u8])> = headers.iter().map(|(k, v)| (*k, v.as_bytes())).collect();
        if hostcalls::send_grpc_response(grpc_status(code), Some(message), headers).is_err() {
            let _ = hostcalls::log(LogLevel::Error, "lock-filter: local reply failed");
        }
    }

    fn now_ns(&self) -> u64 {
        hostcalls::get_current_time()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    fn shared_data(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        hostcalls::get_shared_data(key).unwrap_or((None, None))
    }

    fn set_shared_data(
        &mut self,
        key: &str,
        value: &[u8],
        cas: Option<u32>,
    ) -> Result<(), SharedDataError> {
        match hostcalls::set_shared_data(key, Some(value), cas) {
            Ok(()) => Ok(()),
            Err(Status::CasMismatch) => Err(SharedDataError::CasMismatch),
            Err(_) => Err(SharedDataError::Other),
        }
    }

    fn count(&mut self, metric: &str) {
        let id = METRICS.with(|m| {
            if let Some(id) = m.borrow().get(metric) {
                return Some(*id);
            }
            let id = hostcalls::define_metric(MetricType::Counter, metric).ok()?;
            m.borrow_mut().insert(metric.to_owned(), id);
            Some(id)
        });
        if let Some(id) = id {
            let _ = hostcalls::increment_metric(id, 1);
        }
    }
}

/// The gauge holding the served configuration's version (`wasmcustom.` prefixed by Envoy).
const CONFIG_VERSION: &str = "lock_edge.config_version";

thread_local! {
    /// Metric ids by name: define_metric is idempotent, this only saves the hostcall.
    static METRICS: RefCell<HashMap<String, u32>> = RefCell::new(HashMap::new());
}

fn grpc_status(code: GrpcCode) -> GrpcStatusCode {
    match code {
        GrpcCode::InvalidArgument => GrpcStatusCode::InvalidArgument,
        GrpcCode::DeadlineExceeded => GrpcStatusCode::DeadlineExceeded,
        GrpcCode::NotFound => GrpcStatusCode::NotFound,
        GrpcCode::PermissionDenied => GrpcStatusCode::PermissionDenied,
        GrpcCode::ResourceExhausted => GrpcStatusCode::ResourceExhausted,
        GrpcCode::FailedPrecondition => GrpcStatusCode::FailedPrecondition,
        GrpcCode::Aborted => GrpcStatusCode::Aborted,
        GrpcCode::OutOfRange => GrpcStatusCode::OutOfRange,
        GrpcCode::Unimplemented => GrpcStatusCode::Unimplemented,
        GrpcCode::Internal => GrpcStatusCode::Internal,
        GrpcCode::Unavailable => GrpcStatusCode::Unavailable,
        GrpcCode::Unauthenticated => GrpcStatusCode::Unauthenticated,
    }
}
