//! A pass-through proxy-wasm filter: Envoy still creates a context per request and calls
//! into the VM for each callback, but every callback continues at once and makes no host
//! call. `bench --only edge` runs it in the lock filter's place to price the wasm machinery
//! apart from what the lock filter does with it.

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::ContextType;

proxy_wasm::main! {{
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(Root) });
}}

struct Root;

impl Context for Root {}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        true
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(PassThrough))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct PassThrough;

impl Context for PassThrough {}

impl HttpContext for PassThrough {}
