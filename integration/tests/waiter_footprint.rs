//! What one queued waiter costs the arbiter in its own code: the Acquire future a waiting
//! request keeps alive. `make bench`'s memory row measures the whole (10,000 waiters); this
//! pins the part the arbiter controls. Before the etcd calls inside `Engine::acquire` were
//! boxed, the service's Acquire future was 13,904 bytes; boxed, 808 (debug and release).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use lock_arbiter::engine::Engine;
use lock_arbiter::proto::lock_server::Lock;
use lock_arbiter::service::LockService;
use lock_config::LockKey;
use lock_config::proto::v1::AcquireRequest;
use lock_integration::etcd::Etcd;
use lock_integration::registry::write_test_registry;
use std::sync::Arc;
use std::time::Duration;

/// Several times today's size, far below the ~13.9 KB of the unboxed future.
const MAX_FUTURE_BYTES: usize = 4096;

#[tokio::test]
async fn a_waiting_acquire_keeps_a_small_future() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(dir.path(), "footprint").unwrap();
    let urls = std::slice::from_ref(&etcd.client_url);
    let tls = lock_store::etcd_tls::load(urls, &etcd.pki.files("arbiter")).unwrap();
    let store = lock_store::Etcd::connect(urls, Duration::from_secs(5), tls.as_ref())
        .await
        .unwrap();
    let registry = write_test_registry(dir.path()).unwrap();
    let registry = Arc::new(lock_store::registry_files::load(&registry).unwrap());
    let engine = Arc::new(Engine::new(store, registry, Default::default()));
    let key = LockKey::parse("pay/bench/footprint").unwrap();

    // Futures are measured, never polled.
    let engine_future = engine.acquire(
        "id",
        &key,
        1,
        Duration::from_secs(1),
        lock_arbiter::Asked::Exclusive,
    );
    let engine_bytes = std::mem::size_of_val(&engine_future);
    let service = LockService::new(engine.clone(), "footprint");
    let service_future = service.acquire(tonic::Request::new(AcquireRequest::default()));
    let service_bytes = std::mem::size_of_val(&*service_future);
    eprintln!("acquire future: engine {engine_bytes} bytes, service {service_bytes} bytes");
    assert!(
        engine_bytes <= MAX_FUTURE_BYTES && service_bytes <= MAX_FUTURE_BYTES,
        "a queued waiter now keeps {service_bytes} bytes of future alive (engine {engine_bytes}); \
         box the large awaits inside Engine::acquire"
    );
}
