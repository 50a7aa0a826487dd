//! `etcd-growth [--cycles N]`: what the lock service's history costs etcd, measured. On a
//! fresh single-member etcd (the harness's: TLS, loopback, a temp folder), N grant and
//! release cycles as the arbiter writes them (a holder record put by a create-revision
//! compare on a session lease, then deleted; 5,000 keys in turn), then the database size
//! before and after a compaction and a defragmentation. Its bytes per revision size the
//! compaction window (docs: Deploying, Kubernetes).

use anyhow::Context as _;
use etcd_client::{CompactionOptions, Compare, CompareOp, PutOptions, Txn, TxnOp};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let cycles: i64 = match args.iter().position(|a| a == "--cycles") {
        Some(i) => args.get(i + 1).context("--cycles N")?.parse()?,
        None => 50_000,
    };
    let dir = tempfile::tempdir()?;
    let etcd = lock_integration::etcd::Etcd::start(dir.path(), "growth")?;
    let mut c = etcd.client().await?;
    // A holder record as the arbiter writes it, at a realistic size (identity, instance,
    // session, class, time).
    let holder = lock_store::layout::encode(&lock_store::layout::Holder {
        spiffe_id: "spiffe://prod.example.org/ns/payments/sa/ledger-writer".into(),
        instance: Some("9f3a5c2e1b7d4e60".into()),
        session: "694d8e3f2a1b7c55".into(),
        class: "pay-ledger".into(),
        acquired_at_ms: 1_796_541_778_123,
    });
    let lease = c.lease_grant(3600, None).await?.id();
    let size = |s: &etcd_client::StatusResponse| s.db_size();
    let before = c.status().await?;
    for i in 0..cycles {
        let key = format!("/l/payments/ledger/accounts/{:08}", i % 5000);
        let grant = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.as_str(),
                holder.clone(),
                Some(PutOptions::new().with_lease(lease)),
            )]);
        c.txn(grant).await?;
        c.delete(key.as_str(), None).await?;
    }
    let after = c.status().await?;
    let revisions =
        after.header().map_or(0, |h| h.revision()) - before.header().map_or(0, |h| h.revision());
    let grown = size(&after) - size(&before);
    c.compact(
        after.header().map_or(0, |h| h.revision()),
        Some(CompactionOptions::new().with_physical()),
    )
    .await?;
    c.defragment().await?;
    let defragmented = c.status().await?;
    println!(
        "{cycles} grant+release cycles: {revisions} revisions, database +{grown} bytes ({:.0} bytes per revision); after compaction and defragmentation {} bytes",
        grown as f64 / revisions.max(1) as f64,
        size(&defragmented)
    );
    Ok(())
}
