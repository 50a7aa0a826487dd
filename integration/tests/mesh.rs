//! Issue 20, mesh mode: the workload speaks plaintext HTTP/2 to its own sidecar (a second
//! Envoy, `envoy/sidecar.yaml.tmpl`), which originates mutual TLS to the edge with the
//! workload's SVID. The edge reads the workload's SPIFFE ID off that connection: grants
//! and refusals are those of direct mTLS, and nothing the workload sends through its
//! sidecar makes it someone else.

use lock_client::proto::lock_client::LockClient as Rpc;
use lock_client::{Config, LockClient, LockError};
use lock_config::proto::v1::InspectRequest;
use lock_integration::pki::{LEDGER, OPERATOR};
use lock_integration::sidecar::Sidecar;
use lock_integration::stack::lockctl;
use lock_integration::{Stack, StackOptions};
use std::time::Duration;
use tonic::transport::Channel;

async fn stack_and_sidecar(name: &str) -> (Stack, Sidecar) {
    let stack = Stack::start(StackOptions::default()).await.unwrap();
    let svid = stack.pki.svid(name, LEDGER).unwrap();
    let sidecar = Sidecar::start(&stack.dir.join(name), stack.envoy.listen, &svid).unwrap();
    (stack, sidecar)
}

async fn plaintext(endpoint: &str) -> Rpc<Channel> {
    Rpc::new(
        Channel::from_shared(endpoint.to_owned())
            .unwrap()
            .connect()
            .await
            .unwrap(),
    )
}

#[tokio::test]
async fn through_its_sidecar_a_workload_holds_its_own_grants_and_no_others() {
    let (stack, sidecar) = stack_and_sidecar("ledger-mesh").await;
    let client = LockClient::new(Config::mesh_sidecar(sidecar.endpoint())).unwrap();

    let hold = client
        .acquire("pay/ledger/mesh", Duration::from_secs(5), || {})
        .await
        .unwrap();
    assert!(hold.can_start());
    let mut direct = stack.workload(OPERATOR).await.unwrap();
    let seen = direct
        .inspect(InspectRequest {
            key: "pay/ledger/mesh".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        seen.holder_spiffe_id, LEDGER,
        "the edge saw the workload's SPIFFE ID, not the sidecar's"
    );
    hold.release().await.unwrap();

    let Err(refused) = client.acquire("orders/mesh", Duration::ZERO, || {}).await else {
        panic!("the ledger was granted orders/mesh through its sidecar");
    };
    assert!(matches!(refused, LockError::NotGranted), "{refused:?}");
    client.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_refusal_through_the_sidecar_is_the_one_direct_mtls_gets() {
    let (stack, sidecar) = stack_and_sidecar("ledger-mesh-refusal").await;
    let svid = stack.pki.svid("ledger-direct", LEDGER).unwrap();
    let mut direct = stack.client(&svid).await.unwrap();
    let mut meshed = plaintext(&sidecar.endpoint()).await;
    for key in ["orders/x", "archive/x", "nowhere/x"] {
        let req = || InspectRequest { key: key.into() };
        let a = direct.inspect(req()).await.unwrap_err();
        let b = meshed.inspect(req()).await.unwrap_err();
        assert_eq!(
            (a.code(), a.message(), a.details()),
            (b.code(), b.message(), b.details()),
            "{key}"
        );
    }
}

#[tokio::test]
async fn an_identity_header_sent_through_the_sidecar_changes_nothing() {
    let (_stack, sidecar) = stack_and_sidecar("ledger-mesh-forger").await;
    let mut meshed = plaintext(&sidecar.endpoint()).await;
    // The operator may inspect orders/; the ledger may not. The sidecar forwards the
    // header as it came; the edge removes it and decides on the certificate.
    let mut req = tonic::Request::new(InspectRequest {
        key: "orders/forged".into(),
    });
    req.metadata_mut()
        .insert("x-lock-identity", OPERATOR.parse().unwrap());
    let status = meshed.inspect(req).await.unwrap_err();
    assert_eq!(
        lock_integration::reason_of(&status).map(|r| r.0),
        Some(lock_config::Reason::NotGranted),
        "{status:?}"
    );
}

#[tokio::test]
async fn lockctl_takes_a_lock_through_the_sidecar_without_any_svid_files() {
    let (_stack, sidecar) = stack_and_sidecar("ledger-mesh-cli").await;
    let endpoint = sidecar.endpoint();
    let out = lockctl(
        &["acquire", "pay/ledger/mesh-cli"],
        &[("LOCK_ENDPOINT", endpoint.as_str())],
    )
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Plaintext off the machine is refused before anything is sent.
    let out = lockctl(
        &["acquire", "pay/ledger/mesh-cli"],
        &[("LOCK_ENDPOINT", "http://192.0.2.1:15001")],
    )
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("loopback"));
}
