//! The pause-test kit (ADR-17): the reference fences for PostgreSQL (`fence.rs`) and
//! S3-compatible stores (`s3_fence.rs`), deliberately broken fences the kit must catch, and
//! the `pause-test` command that proves a resource's fence by observation (see `main.rs`).
//! A tool resource owners run against their own database or bucket.

pub mod fence;
pub mod resource;
pub mod s3_fence;

/// Connects to PostgreSQL (the connection task runs on the current runtime).
pub async fn connect(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}
