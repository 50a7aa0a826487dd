//! The pause-test kit (ADR-17): the reference fence for PostgreSQL, two deliberately broken
//! fences the kit must catch, and the `pause-test` command that proves a resource's fence
//! by observation (see `main.rs`). A tool resource owners run against their own database.

pub mod fence;

/// Connects to PostgreSQL (the connection task runs on the current runtime).
pub async fn connect(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}
