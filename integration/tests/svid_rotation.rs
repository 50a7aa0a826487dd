//! Envoy picks up a re-issued SVID through file-based SDS without a restart: new
//! connections are served the new certificate and workloads keep working.

use lock_config::proto::v1::InspectRequest;
use lock_integration::pki::LEDGER;
use lock_integration::process::eventually;
use lock_integration::{Stack, StackOptions};
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The certificate Envoy serves to a new TLS connection, as PEM.
fn served_certificate(stack: &Stack) -> anyhow::Result<String> {
    let svid = stack.pki.files("ledger");
    let mut child = Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &stack.envoy.listen.to_string(),
            "-alpn",
            "h2",
        ])
        .arg("-cert")
        .arg(&svid.cert)
        .arg("-key")
        .arg(&svid.key)
        .arg("-CAfile")
        .arg(&svid.ca)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    // Close stdin so s_client ends after the handshake.
    child.stdin.take().map(|mut s| s.write_all(b""));
    let out = child.wait_with_output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let begin = text
        .find("-----BEGIN CERTIFICATE-----")
        .ok_or_else(|| anyhow::anyhow!("no certificate: {text}"))?;
    let end = text
        .find("-----END CERTIFICATE-----")
        .ok_or_else(|| anyhow::anyhow!("truncated"))?;
    Ok(text[begin..end + "-----END CERTIFICATE-----".len()].to_owned())
}

#[tokio::test]
async fn envoy_serves_a_rotated_svid_without_restart() {
    let stack = Stack::start(StackOptions::default()).await.unwrap();
    stack.pki.svid("ledger", LEDGER).unwrap();
    let before = served_certificate(&stack).unwrap();
    let pid = stack.envoy.proc.pid();
    let updates = stack
        .envoy
        .stat("sds.envoy_svid.update_success")
        .unwrap()
        .unwrap_or(0);

    let rotated = stack.pki.rotate_envoy_svid().unwrap();
    assert_ne!(rotated.trim(), before.trim());
    eventually(Duration::from_secs(20), || async {
        let now = served_certificate(&stack)?;
        anyhow::ensure!(now.trim() == rotated.trim(), "still the old certificate");
        Ok(())
    })
    .await
    .unwrap();
    assert!(
        stack
            .envoy
            .stat("sds.envoy_svid.update_success")
            .unwrap()
            .unwrap_or(0)
            > updates
    );
    assert_eq!(stack.envoy.proc.pid(), pid, "no restart");

    // Workloads connect and are served as before.
    let mut c = stack.workload(LEDGER).await.unwrap();
    c.inspect(InspectRequest {
        key: "pay/ledger/1".into(),
    })
    .await
    .unwrap();
}

/// The certificate an arbiter serves to a new connection from the edge, as DER.
async fn arbiter_certificate(stack: &Stack) -> anyhow::Result<Vec<u8>> {
    let tls = lock_integration::h2raw::tls_connect(
        stack.arbiters[0].addr,
        Some(&stack.pki.edge_svid()),
        &stack.pki.bundle(),
        "localhost",
    )
    .await?;
    let certs = tls
        .get_ref()
        .1
        .peer_certificates()
        .ok_or_else(|| anyhow::anyhow!("no server certificate"))?;
    Ok(certs[0].to_vec())
}

fn der(pem: &str) -> Vec<u8> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

/// The arbiter's listener re-reads its SVID on new connections: a rotated arbiter SVID is
/// served, and a rotated Envoy SVID (same SPIFFE ID) is still admitted, without a restart.
#[tokio::test]
async fn arbiter_serves_and_admits_rotated_svids_without_restart() {
    let stack = Stack::start(StackOptions {
        arbiters: 1,
        ..StackOptions::default()
    })
    .await
    .unwrap();
    let pid = stack.arbiters[0].proc.pid();
    let before = arbiter_certificate(&stack).await.unwrap();
    let rotated = der(&stack.pki.rotate_arbiter_svid().unwrap());
    assert_ne!(before, rotated);
    eventually(Duration::from_secs(20), || async {
        anyhow::ensure!(
            arbiter_certificate(&stack).await? == rotated,
            "still the old certificate"
        );
        Ok(())
    })
    .await
    .unwrap();

    stack.pki.rotate_envoy_svid().unwrap();
    let mut direct = stack.arbiter_direct(0).await.unwrap();
    direct
        .inspect(lock_integration::as_from_edge(
            InspectRequest {
                key: "pay/ledger/1".into(),
            },
            Some("pay/ledger/1"),
            Some(LEDGER),
        ))
        .await
        .expect("the rotated edge SVID is admitted");
    let mut c = stack.workload(LEDGER).await.unwrap();
    c.inspect(InspectRequest {
        key: "pay/ledger/1".into(),
    })
    .await
    .unwrap();
    assert_eq!(stack.arbiters[0].proc.pid(), pid, "no restart");
}
