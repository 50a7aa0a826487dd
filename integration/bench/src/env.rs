//! The bench's processes: the stack (etcd, one arbiter, Envoy with the filter), a plaintext
//! arbiter beside it, Redis and PostgreSQL.

use crate::redis_server::Redis;
use lock_integration::postgres::Postgres;
use lock_integration::{Stack, StackOptions};
use std::path::PathBuf;

/// Envoy's workers as the edge ships (deploy/kubernetes/edge.yaml's `--concurrency`).
pub const SHIPPED_ENVOY_WORKERS: usize = 1;

pub struct Env {
    pub stack: Stack,
    /// A second arbiter on the same etcd, plaintext: the TLS cost's baseline.
    pub plaintext: lock_integration::arbiter::Arbiter,
    pub redis: Redis,
    pub pg: Postgres,
}

/// The bench's stack (one arbiter, Envoy, etcd), a plaintext arbiter beside it, Redis and
/// PostgreSQL; in `dir` if given (the scale steps on tmpfs), else a temp folder on disk.
pub async fn start(registry: &std::path::Path, dir: Option<PathBuf>) -> anyhow::Result<Env> {
    let stack = Stack::start(StackOptions {
        arbiters: 1,
        registry: registry.to_path_buf(),
        keep_dir: dir,
        // As the edge ships (deploy/kubernetes/edge.yaml): one worker per Envoy, scaled by
        // replicas; `bench --only edge` measures two beside it.
        envoy_workers: Some(SHIPPED_ENVOY_WORKERS),
        ..Default::default()
    })
    .await?;
    let redis = Redis::start(&stack.dir)?;
    let pg = Postgres::start(&stack.dir)?;
    let plaintext = lock_integration::arbiter::Arbiter::start_with(
        &stack.dir,
        "arbiter-plaintext",
        &stack.etcd_access(),
        registry,
        &stack.pki,
        &["--insecure-plaintext"],
    )?;
    Ok(Env {
        stack,
        plaintext,
        redis,
        pg,
    })
}
