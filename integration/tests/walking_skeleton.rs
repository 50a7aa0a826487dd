//! Issue 2's end-to-end checks, through real Envoy (with the built wasm), two real arbiters
//! and real etcd, with dev SVIDs.

use lock_config::proto::v1::*;
use lock_config::{FencingToken, Reason};
use lock_integration::pki::{LEDGER, OPERATOR, ORDERS};
use lock_integration::reason_of;
use lock_integration::{Stack, StackOptions, answered_by, as_from_edge, raw};
use std::collections::{HashMap, HashSet};
use tonic::transport::Channel;
use tonic::{Code, Request};

use lock_integration::{Client, acquire};

async fn stack() -> Stack {
    Stack::start(StackOptions::default())
        .await
        .expect("stack starts")
}

async fn session(c: &mut Client, key: &str) -> i64 {
    c.open_session(OpenSessionRequest { key: key.into() })
        .await
        .expect("open session")
        .into_inner()
        .session_id
}

fn refused(
    r: Result<impl std::fmt::Debug, tonic::Status>,
) -> (Code, Reason, HashMap<String, String>) {
    let status = r.expect_err("expected a refusal");
    let (reason, meta) =
        reason_of(&status).unwrap_or_else(|| panic!("no lock.v1 ErrorInfo in {status:?}"));
    (status.code(), reason, meta)
}

async fn etcd_revision(stack: &Stack) -> i64 {
    let mut c = stack.etcd_client().await.unwrap();
    c.get("/", None).await.unwrap().header().unwrap().revision()
}

async fn holder_create_revision(stack: &Stack, key: &str) -> Option<i64> {
    let mut c = stack.etcd_client().await.unwrap();
    let r = c.get(format!("/l/{key}"), None).await.unwrap();
    r.kvs().first().map(|kv| kv.create_revision())
}

#[tokio::test]
async fn grant_held_leak_release_and_a_larger_token() {
    let stack = stack().await;
    let mut ledger = stack.workload(LEDGER).await.unwrap();
    let mut operator = stack.workload(OPERATOR).await.unwrap();
    let key = "pay/ledger/42";

    let s1 = session(&mut ledger, key).await;
    let g1 = acquire(&mut ledger, key, s1, 0).await.unwrap();
    let t1 = FencingToken::from_u64(g1.token).unwrap();
    let parts = g1.parts.unwrap();
    assert_eq!((parts.epoch, parts.revision), (1, t1.revision()));
    assert_eq!(t1.epoch(), 1);
    // The token's revision is the etcd commit revision of the grant.
    assert_eq!(
        holder_create_revision(&stack, key).await,
        Some(t1.revision() as i64)
    );
    assert_eq!(g1.class_name, "pay-ledger");

    // Retrying the same Acquire on the same session returns the same grant.
    assert_eq!(
        acquire(&mut ledger, key, s1, 0).await.unwrap().token,
        g1.token
    );

    // Another identity's session: HELD (ABORTED).
    let s_op = session(&mut operator, key).await;
    let (code, reason, _) = refused(acquire(&mut operator, key, s_op, 0).await);
    assert_eq!((code, reason), (Code::Aborted, Reason::Held));

    // The same identity under a second session: LEAKED_HOLD, not HELD (ADR-13).
    let s2 = session(&mut ledger, key).await;
    let (code, reason, _) = refused(acquire(&mut ledger, key, s2, 0).await);
    assert_eq!(
        (code, reason),
        (Code::FailedPrecondition, Reason::LeakedHold)
    );

    // A wrong token does not release; the right one does.
    let wrong = FencingToken::pack(1, t1.revision() + 1).unwrap().as_u64();
    let r = ledger
        .release(ReleaseRequest {
            key: key.into(),
            token: wrong,
            session_id: s1,
            ..Default::default()
        })
        .await;
    assert_eq!(refused(r).1, Reason::StaleToken);
    let released = ledger
        .release(ReleaseRequest {
            key: key.into(),
            token: g1.token,
            session_id: s1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(holder_create_revision(&stack, key).await, None);
    // The answer names the delete's revision: nothing has written since, so it is the
    // store's current revision.
    let mut etcd = stack.etcd_client().await.unwrap();
    let now = etcd
        .get("/", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    assert_eq!(released.released_at_revision, now);
    // Releasing twice is a stale token, not a silent success.
    let r = ledger
        .release(ReleaseRequest {
            key: key.into(),
            token: g1.token,
            session_id: s1,
            ..Default::default()
        })
        .await;
    assert_eq!(refused(r).1, Reason::StaleToken);

    // The next grant's token is larger.
    let g2 = acquire(&mut operator, key, s_op, 0).await.unwrap();
    assert!(g2.token > g1.token, "next token must be larger");

    // Closing the operator's session releases its hold in one committed entry.
    operator
        .close_session(CloseSessionRequest { session_id: s_op })
        .await
        .unwrap();
    assert_eq!(holder_create_revision(&stack, key).await, None);
    let (code, reason, _) = refused(acquire(&mut operator, key, s_op, 0).await);
    assert_eq!((code, reason), (Code::NotFound, Reason::SessionExpired));
}

#[tokio::test]
async fn bad_input_gets_its_status_and_nothing_reaches_etcd() {
    let stack = stack().await;
    let mut ledger = stack.workload(LEDGER).await.unwrap();
    let mut orders = stack.workload(ORDERS).await.unwrap();
    let s = session(&mut ledger, "pay/ledger/1").await;
    acquire(&mut ledger, "pay/ledger/1", s, 0).await.unwrap();
    let so = session(&mut orders, "orders/x").await;
    let mut operator = stack.workload(OPERATOR).await.unwrap();
    // From here on, every request is refused at the edge: etcd's revision must not move,
    // and Envoy sends nothing upstream (its own count of requests to the arbiters).
    let before = etcd_revision(&stack).await;
    let upstream = |stack: &Stack| {
        stack
            .envoy
            .stat("cluster.arbiters.upstream_rq_total")
            .unwrap()
            .unwrap_or(0)
    };
    let forwarded_before = upstream(&stack);

    // No covering grant: PERMISSION_DENIED / NOT_GRANTED, the same reply for a held key, a
    // free key and a key in a namespace that does not exist.
    let mut replies = Vec::new();
    for key in ["pay/ledger/1", "pay/ledger/free", "nope/x"] {
        let status = acquire(&mut orders, key, so, 0).await.unwrap_err();
        assert_eq!(status.code(), Code::PermissionDenied, "{key}");
        assert_eq!(reason_of(&status).unwrap().0, Reason::NotGranted);
        replies.push((
            status.code(),
            status.message().to_owned(),
            status.details().to_vec(),
        ));
    }
    assert!(
        replies.windows(2).all(|w| w[0] == w[1]),
        "denials must be identical"
    );
    // Segment boundaries: a grant on pay/ledger does not cover pay/ledgers.
    assert_eq!(
        refused(acquire(&mut ledger, "pay/ledgers", s, 0).await).1,
        Reason::NotGranted
    );

    // Malformed and oversized keys.
    for key in [
        "pay/a//b",
        "PAY/x",
        "pay",
        "",
        &format!("pay/{}", "x".repeat(600)),
    ] {
        let (code, reason, _) = refused(acquire(&mut ledger, key, s, 0).await);
        assert_eq!(
            (code, reason),
            (Code::InvalidArgument, Reason::InvalidKey),
            "{key:?}"
        );
    }

    // Region: archive is homed in eu-far.
    let (code, reason, meta) = refused(acquire(&mut operator, "archive/x", s, 0).await);
    assert_eq!(
        (code, reason),
        (Code::FailedPrecondition, Reason::RegionRedirect)
    );
    assert_eq!(meta.get("region").map(String::as_str), Some("eu-far"));

    // Undecodable bodies, via a raw codec.
    let channel = stack_channel(&stack, "ledger").await;
    for body in [vec![0xff, 0xff, 0xff], vec![0x0a, 0x50, b'x']] {
        let status = raw::call(channel.clone(), "Acquire", body)
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(reason_of(&status).unwrap().0, Reason::MalformedRequest);
    }
    // Unknown methods are refused at the edge.
    let status = raw::call(channel.clone(), "Steal", vec![])
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented);

    // Certificates: one without a SPIFFE URI SAN, one from another trust domain.
    for (name, uris) in [
        ("nospiffe", vec![]),
        ("foreign", vec!["spiffe://evil.example/x"]),
    ] {
        let svid = stack.pki.issue(name, &uris).unwrap();
        let mut c = stack.client(&svid).await.unwrap();
        let status = c
            .open_session(OpenSessionRequest {
                key: "pay/ledger/1".into(),
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::Unauthenticated, "{name}");
        assert_eq!(reason_of(&status).unwrap().0, Reason::Unauthenticated);
    }

    // No client certificate at all: Envoy's listener refuses the TLS handshake.
    let svid = stack.pki.files("ledger");
    let no_cert = lock_client::stub::Svid {
        cert: None,
        key: None,
        ca: &svid.ca,
    };
    match lock_client::stub::connect(&stack.endpoint(), &no_cert, "localhost").await {
        Err(_) => {}
        Ok(mut c) => {
            let r = c
                .open_session(OpenSessionRequest {
                    key: "pay/ledger/1".into(),
                })
                .await;
            assert!(r.is_err(), "a client without a certificate must be refused");
        }
    }

    assert_eq!(
        etcd_revision(&stack).await,
        before,
        "a refused request must not write to etcd"
    );
    assert_eq!(
        upstream(&stack),
        forwarded_before,
        "a request refused at the edge must not be forwarded"
    );
    for a in &stack.arbiters {
        assert!(!a.proc.log_text().contains("panicked"), "{} panicked", a.id);
    }
    assert!(
        !stack.envoy.proc.log_text().contains("panic"),
        "filter panicked"
    );
}

async fn stack_channel(stack: &Stack, svid_name: &str) -> Channel {
    let svid = stack.pki.svid(svid_name, LEDGER).unwrap();
    let tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(
            std::fs::read(&svid.ca).unwrap(),
        ))
        .identity(tonic::transport::Identity::from_pem(
            std::fs::read(&svid.cert).unwrap(),
            std::fs::read(&svid.key).unwrap(),
        ))
        .domain_name("localhost");
    Channel::from_shared(stack.endpoint())
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap()
}

#[tokio::test]
async fn forged_headers_change_neither_key_nor_identity() {
    let stack = stack().await;
    let mut ledger = stack.workload(LEDGER).await.unwrap();
    let s = session(&mut ledger, "pay/ledger/real").await;

    let mut req = Request::new(AcquireRequest {
        key: "pay/ledger/real".into(),
        session_id: s,
        wait_millis: 0,
        ..Default::default()
    });
    req.metadata_mut()
        .insert("x-lock-key", "pay/ledger/forged".parse().unwrap());
    req.metadata_mut()
        .insert("x-lock-identity", OPERATOR.parse().unwrap());
    let g = ledger.acquire(req).await.unwrap().into_inner();
    let t = FencingToken::from_u64(g.token).unwrap();
    assert_eq!(
        holder_create_revision(&stack, "pay/ledger/real").await,
        Some(t.revision() as i64)
    );
    assert_eq!(
        holder_create_revision(&stack, "pay/ledger/forged").await,
        None
    );
    let mut etcd = stack.etcd_client().await.unwrap();
    let holder = etcd.get("/l/pay/ledger/real", None).await.unwrap();
    let value = String::from_utf8_lossy(holder.kvs()[0].value()).to_string();
    assert!(
        value.contains(LEDGER) && !value.contains(OPERATOR),
        "{value}"
    );

    // An identity claiming another one in x-lock-identity is still itself.
    let mut orders = stack.workload(ORDERS).await.unwrap();
    let mut req = Request::new(OpenSessionRequest {
        key: "pay/ledger/x".into(),
    });
    req.metadata_mut()
        .insert("x-lock-identity", LEDGER.parse().unwrap());
    assert_eq!(
        refused(orders.open_session(req).await).1,
        Reason::NotGranted
    );

    // Straight to an arbiter, a key header that disagrees with the body is refused, and a
    // request without an identity is unauthenticated.
    let mut direct = stack.arbiter_direct(0).await.unwrap();
    let y = || AcquireRequest {
        key: "pay/ledger/y".into(),
        session_id: s,
        wait_millis: 0,
        ..Default::default()
    };
    let req = as_from_edge(y(), Some("pay/ledger/z"), Some(LEDGER));
    assert_eq!(refused(direct.acquire(req).await).0, Code::InvalidArgument);
    let req = as_from_edge(y(), Some("pay/ledger/y"), None);
    assert_eq!(
        refused(direct.acquire(req).await).1,
        Reason::Unauthenticated
    );
    // Someone else's session is indistinguishable from a missing one.
    let req = as_from_edge(y(), Some("pay/ledger/y"), Some(OPERATOR));
    assert_eq!(refused(direct.acquire(req).await).1, Reason::SessionExpired);
}

#[tokio::test]
async fn wrong_session_ttl_names_the_class() {
    let stack = stack().await;
    let mut orders = stack.workload(ORDERS).await.unwrap();
    let s = session(&mut orders, "orders/x").await; // orders-default: 30 s
    let (code, reason, meta) = refused(acquire(&mut orders, "orders/batch/1", s, 0).await);
    assert_eq!(
        (code, reason),
        (Code::FailedPrecondition, Reason::WrongSessionTtl)
    );
    assert_eq!(meta.get("class").map(String::as_str), Some("orders-batch"));
    assert_eq!(meta.get("ttl_seconds").map(String::as_str), Some("60"));
    let s60 = session(&mut orders, "orders/batch/1").await;
    acquire(&mut orders, "orders/batch/1", s60, 0)
        .await
        .unwrap();
}

#[tokio::test]
async fn same_key_always_reaches_the_same_arbiter() {
    let stack = stack().await;
    let mut ledger = stack.workload(LEDGER).await.unwrap();
    let mut seen: HashMap<String, String> = HashMap::new();
    for round in 0..3 {
        for i in 0..60 {
            let key = format!("pay/ledger/k{i}");
            let resp = ledger
                .open_session(OpenSessionRequest { key: key.clone() })
                .await
                .unwrap();
            let arbiter = answered_by(&resp).unwrap();
            let id = resp.into_inner().session_id;
            ledger
                .close_session(CloseSessionRequest { session_id: id })
                .await
                .unwrap();
            match seen.get(&key) {
                Some(prev) => assert_eq!(prev, &arbiter, "{key} moved in round {round}"),
                None => {
                    seen.insert(key, arbiter);
                }
            }
        }
    }
    let used: HashSet<_> = seen.values().collect();
    assert_eq!(
        used.len(),
        2,
        "60 keys should spread over both arbiters: {used:?}"
    );
}

#[tokio::test]
async fn no_epoch_no_grant_until_lockctl_epoch_init() {
    let stack = Stack::start(StackOptions {
        init_epoch: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut ledger = stack.workload(LEDGER).await.unwrap();
    let status = ledger
        .open_session(OpenSessionRequest {
            key: "pay/ledger/1".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(reason_of(&status).unwrap().0, Reason::Sealed);

    let out = lock_integration::stack::lockctl_etcd(
        &["epoch", "init", "--etcd", &stack.etcd.client_url],
        &stack.etcd.pki,
        "root",
    )
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("epoch 1 created"));
    // Idempotent.
    let out = lock_integration::stack::lockctl_etcd(
        &["epoch", "init", "--etcd", &stack.etcd.client_url],
        &stack.etcd.pki,
        "root",
    )
    .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("already exists"));

    let s = session(&mut ledger, "pay/ledger/1").await;
    acquire(&mut ledger, "pay/ledger/1", s, 0).await.unwrap();
}

#[tokio::test]
async fn lockctl_takes_and_releases_through_envoy() {
    let stack = stack().await;
    let svid = stack.pki.svid("ops", OPERATOR).unwrap();
    let out = stack
        .lockctl_as(&svid, &["acquire", "pay/ledger/42"])
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let field = |name: &str| {
        stdout
            .split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{name}=")))
            .map(str::to_owned)
            .unwrap()
    };
    let token: u64 = field("token").parse().unwrap();
    assert_eq!(field("epoch"), "1");
    assert_eq!(
        FencingToken::from_u64(token)
            .unwrap()
            .revision()
            .to_string(),
        field("revision")
    );

    // A second acquire (another lockctl process: another instance of the same identity, a
    // contender, issue 32) is refused with exit code 1 and the reason.
    let out = stack
        .lockctl_as(&svid, &["acquire", "pay/ledger/42"])
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("HELD (Aborted)"));

    let out = stack
        .lockctl_as(&svid, &["release", "pay/ledger/42", &token.to_string()])
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = stack
        .lockctl_as(&svid, &["release", "pay/ledger/42", &token.to_string()])
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("STALE_TOKEN"));

    // Another identity cannot release a hold that is not its own, even with the token.
    let out = stack
        .lockctl_as(&svid, &["acquire", "pay/ledger/43"])
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let token = stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix("token="))
        .unwrap()
        .to_owned();
    let ledger = stack.pki.svid("ledger", LEDGER).unwrap();
    let out = stack
        .lockctl_as(&ledger, &["release", "pay/ledger/43", &token])
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("STALE_TOKEN"));
}

#[tokio::test]
async fn keepalive_stream_renews_and_reports_a_closed_session() {
    let stack = stack().await;
    let mut ledger = stack.workload(LEDGER).await.unwrap();
    let s = session(&mut ledger, "pay/ledger/ka").await;
    acquire(&mut ledger, "pay/ledger/ka", s, 0).await.unwrap();

    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut replies = ledger
        .keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    for _ in 0..2 {
        tx.send(KeepAliveRequest { session_id: s }).await.unwrap();
        let r = replies.message().await.unwrap().unwrap();
        assert_eq!(r.session_id, s);
        assert!((1..=30).contains(&r.ttl_seconds), "ttl {}", r.ttl_seconds);
    }

    // Another identity cannot renew this session.
    let mut orders = stack.workload(ORDERS).await.unwrap();
    let (otx, orx) = tokio::sync::mpsc::channel(1);
    let mut theirs = orders
        .keep_alive(tokio_stream::wrappers::ReceiverStream::new(orx))
        .await
        .unwrap()
        .into_inner();
    otx.send(KeepAliveRequest { session_id: s }).await.unwrap();
    let status = theirs.message().await.unwrap_err();
    assert_eq!(reason_of(&status).unwrap().0, Reason::SessionExpired);

    // After CloseSession the hold is gone and renewing says so.
    ledger
        .close_session(CloseSessionRequest { session_id: s })
        .await
        .unwrap();
    assert_eq!(holder_create_revision(&stack, "pay/ledger/ka").await, None);
    tx.send(KeepAliveRequest { session_id: s }).await.unwrap();
    let status = replies.message().await.unwrap_err();
    assert_eq!(reason_of(&status).unwrap().0, Reason::SessionExpired);
}
