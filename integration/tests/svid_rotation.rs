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
