//! An etcd NOSPACE alarm fails grants closed (STORE_FULL) while releases, renewals and
//! reads keep working, so holders can finish and let go.

use lock_config::Reason;
use lock_config::proto::v1::*;
use lock_integration::pki::LEDGER;
use lock_integration::reason_of;
use lock_integration::{Stack, StackOptions, open_session, renewals};

#[tokio::test]
async fn nospace_refuses_grants_but_releases_and_keepalives_work() {
    let stack = Stack::start(StackOptions {
        etcd_args: vec![format!("--quota-backend-bytes={}", 8 * 1024 * 1024)],
        ..Default::default()
    })
    .await
    .unwrap();
    let mut ledger = stack.workload(LEDGER).await.unwrap();
    let s = open_session(&mut ledger, "pay/ledger/a").await.unwrap();
    let held = ledger
        .acquire(AcquireRequest {
            key: "pay/ledger/a".into(),
            session_id: s,
            wait_millis: 0,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();

    // Fill etcd until it raises NOSPACE (bounded: at most 64 puts of 512 KiB).
    let mut etcd = stack.etcd_client().await.unwrap();
    let blob = vec![b'x'; 512 * 1024];
    let mut full = false;
    for i in 0..64 {
        if let Err(e) = etcd.put(format!("/fill/{i}"), blob.clone(), None).await {
            assert!(e.to_string().contains("database space exceeded"), "{e}");
            full = true;
            break;
        }
    }
    assert!(full, "etcd never reported NOSPACE");
    let alarms = etcd
        .alarm(
            etcd_client::AlarmAction::Get,
            etcd_client::AlarmType::None,
            None,
        )
        .await
        .unwrap();
    assert!(!alarms.alarms().is_empty(), "NOSPACE alarm raised");

    // No new grant (closed posture).
    let status = ledger
        .acquire(AcquireRequest {
            key: "pay/ledger/b".into(),
            session_id: s,
            wait_millis: 0,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        reason_of(&status).map(|r| r.0),
        Some(Reason::StoreFull),
        "{status:?}"
    );
    assert_eq!(
        etcd.get("/l/pay/ledger/b", None).await.unwrap().kvs().len(),
        0
    );

    // Renewal, inspection and release still work.
    let (tx, mut renewals) = renewals(&mut ledger).await.unwrap();
    tx.send(KeepAliveRequest { session_id: s }).await.unwrap();
    assert!(renewals.message().await.unwrap().unwrap().ttl_seconds > 0);
    let i = ledger
        .inspect(InspectRequest {
            key: "pay/ledger/a".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(i.held);
    ledger
        .release(ReleaseRequest {
            key: "pay/ledger/a".into(),
            token: held.token,
            session_id: s,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        etcd.get("/l/pay/ledger/a", None).await.unwrap().kvs().len(),
        0
    );
}
