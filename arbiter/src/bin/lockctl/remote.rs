//! Commands that talk to the service through Envoy with the workload's SVID.

use crate::{Conn, Failure};
use lock_arbiter::proto::lock_client::LockClient;
use lock_arbiter::remote::{self, ConnectError, Svid};
use lock_config::proto::v1::{AcquireRequest, OpenSessionRequest, ReleaseRequest};
use tonic::transport::Channel;
use tonic_types::StatusExt as _;

async fn connect(conn: &Conn) -> Result<LockClient<Channel>, Failure> {
    let svid = Svid {
        cert: Some(&conn.svid),
        key: Some(&conn.svid_key),
        ca: &conn.ca,
    };
    remote::connect(&conn.endpoint, &svid, &conn.server_name)
        .await
        .map_err(|e| match e {
            ConnectError::Connect { .. } => Failure::unreachable(e.to_string()),
            _ => Failure::input(e.to_string()),
        })
}

/// Prints a refusal as `REASON (code): message [k=v ...]`.
fn refused(status: tonic::Status) -> Failure {
    let (reason, meta) = match status.get_details_error_info() {
        Some(info) => {
            let mut meta: Vec<_> = info
                .metadata
                .into_iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            meta.sort();
            (info.reason, meta.join(" "))
        }
        None => ("UNKNOWN".to_owned(), String::new()),
    };
    let code = status.code();
    if reason == "UNKNOWN" && matches!(code, tonic::Code::Unavailable | tonic::Code::Unknown) {
        return Failure::unreachable(format!("{code:?}: {}", status.message()));
    }
    Failure::refused(
        format!("{reason} ({code:?}): {} {meta}", status.message())
            .trim_end()
            .to_owned(),
    )
}

pub async fn acquire(conn: &Conn, key: &str) -> Result<(), Failure> {
    let mut client = connect(conn).await?;
    let session = client
        .open_session(OpenSessionRequest {
            key: key.to_owned(),
        })
        .await
        .map_err(refused)?
        .into_inner();
    let grant = client
        .acquire(AcquireRequest {
            key: key.to_owned(),
            session_id: session.session_id,
            wait_millis: 0,
        })
        .await
        .map_err(refused)?
        .into_inner();
    let parts = grant.parts.unwrap_or_default();
    println!(
        "token={} epoch={} revision={} session={} class={} ttl={}s",
        grant.token,
        parts.epoch,
        parts.revision,
        session.session_id,
        grant.class_name,
        grant.ttl_seconds
    );
    eprintln!(
        "held until `lockctl release {key} <token>` or until the session lapses ({} s without keepalives)",
        grant.ttl_seconds
    );
    Ok(())
}

pub async fn release(conn: &Conn, key: &str, token: u64) -> Result<(), Failure> {
    let mut client = connect(conn).await?;
    client
        .release(ReleaseRequest {
            key: key.to_owned(),
            token,
            session_id: 0,
        })
        .await
        .map_err(refused)?;
    println!("released {key}");
    Ok(())
}
