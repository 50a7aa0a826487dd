//! Quorum loss (ADR-04): with 2 of 3 etcd members stopped, Acquire and KeepAlive fail with
//! NO_QUORUM within the arbiter's store timeout (never a hang) and no grant is made;
//! `lockctl acquire` exits 3 (etcd unreachable); after the members return, grants resume.

use lock_config::Reason;
use lock_config::proto::v1::*;
use lock_integration::pki::LEDGER;
use lock_integration::process::{eventually, patience};
use lock_integration::reason_of;
use lock_integration::{Stack, StackOptions, open_session, renewals};
use std::time::{Duration, Instant};

const STORE_TIMEOUT_MS: u64 = 1000;

#[tokio::test]
async fn no_quorum_is_a_prompt_refusal_and_grants_resume_after_recovery() {
    let mut stack = Stack::start(StackOptions {
        etcd_members: 3,
        arbiter_args: vec!["--store-timeout-ms".into(), STORE_TIMEOUT_MS.to_string()],
        ..Default::default()
    })
    .await
    .unwrap();
    let mut ledger = stack.workload(LEDGER).await.unwrap();
    let s = open_session(&mut ledger, "pay/ledger/q").await.unwrap();
    let (tx, mut renewals) = renewals(&mut ledger).await.unwrap();
    tx.send(KeepAliveRequest { session_id: s }).await.unwrap();
    assert!(renewals.message().await.unwrap().unwrap().ttl_seconds > 0);

    // Stop two of three members, and wait until the survivor has no leader: a leader that
    // has not yet noticed the loss (up to an election timeout) still appends proposals,
    // which commit once the members return. A grant sent in that window has an unknown
    // outcome: it is attached to the caller's session, so retrying on that session returns
    // it, and otherwise it lapses with the session (docs/src/concepts/lock-semantics.md).
    for m in &mut stack.etcd_peers {
        m.kill();
    }
    let survivor = stack.etcd.client_url.clone();
    let tls = stack.etcd.pki.tls("root").unwrap();
    eventually(Duration::from_secs(20), || {
        let url = survivor.clone();
        let tls = tls.clone();
        async move {
            let opts = etcd_client::ConnectOptions::new()
                .with_timeout(Duration::from_millis(500))
                .with_tls(tls);
            let mut c = etcd_client::Client::connect([url], Some(opts)).await?;
            match c.status().await {
                Ok(s) if s.leader() != 0 => anyhow::bail!("still has leader {:x}", s.leader()),
                _ => Ok(()),
            }
        }
    })
    .await
    .unwrap();

    // A hang guard, not a latency assertion: a grant is one Txn plus one read-back, each
    // capped by the store timeout, so an answer comes within a few store timeouts; without
    // the cap the call would hang until the test's own timeout. The slack is wide so that a
    // loaded machine makes this slower, never red.
    let bound = Duration::from_millis(4 * STORE_TIMEOUT_MS) + Duration::from_secs(10);
    let started = Instant::now();
    let status = ledger
        .acquire(AcquireRequest {
            key: "pay/ledger/q".into(),
            session_id: s,
            wait_millis: 0,
            ..Default::default()
        })
        .await
        .unwrap_err();
    let took = started.elapsed();
    eprintln!(
        "acquire without quorum answered {:?} in {took:?}",
        status.code()
    );
    assert_eq!(
        reason_of(&status).map(|r| r.0),
        Some(Reason::NoQuorum),
        "{status:?}"
    );
    assert!(took < bound, "took {took:?}");

    let started = Instant::now();
    tx.send(KeepAliveRequest { session_id: s }).await.unwrap();
    let status = renewals.message().await.unwrap_err();
    let took = started.elapsed();
    eprintln!(
        "keepalive without quorum answered {:?} in {took:?}",
        status.code()
    );
    assert_eq!(
        reason_of(&status).map(|r| r.0),
        Some(Reason::NoQuorum),
        "{status:?}"
    );
    assert!(took < bound, "took {took:?}");

    // lockctl exits by cause: a quorum loss is etcd unreachable, exit 3 as the README
    // says, with the refusal's one line (it exited 1, as any refusal, before).
    let svid = stack.pki.svid("ledger-cli", LEDGER).unwrap();
    let out = stack
        .lockctl_as(&svid, &["acquire", "pay/ledger/q-cli"])
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("NO_QUORUM (Unavailable)"), "{stderr}");

    // Recovery: the members come back; grants resume and no grant was made meanwhile.
    for m in &mut stack.etcd_peers {
        m.restart().unwrap();
    }
    let mut etcd = stack.etcd_client().await.unwrap();
    let held = etcd.get("/l/pay/ledger/q", None).await.unwrap().kvs().len();
    assert_eq!(held, 0, "no grant was made without quorum");
    let token = eventually(patience(), || {
        let mut c = ledger.clone();
        async move {
            let s = c
                .open_session(OpenSessionRequest {
                    key: "pay/ledger/q".into(),
                })
                .await?
                .into_inner()
                .session_id;
            let g = c
                .acquire(AcquireRequest {
                    key: "pay/ledger/q".into(),
                    session_id: s,
                    wait_millis: 0,
                    ..Default::default()
                })
                .await?
                .into_inner();
            Ok(g.token)
        }
    })
    .await
    .unwrap();
    assert!(token > 0);
}
