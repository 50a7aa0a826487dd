//! Commands that talk to the service through Envoy with the workload's SVID.

use crate::{Conn, Failure};
use lock_client::proto::lock_client::LockClient;
use lock_client::stub::keyed;
use lock_config::proto::v1::{
    AcquireRequest, InspectRequest, OpenSessionRequest, ReleaseRequest, ValidateTokenRequest,
};
use tonic::transport::Channel;

async fn connect(conn: &Conn) -> Result<LockClient<Channel>, Failure> {
    let channel = conn.config().await?.connect().await.map_err(|e| match e {
        lock_client::LockError::Unavailable(_) => Failure::unreachable(e.to_string()),
        _ => Failure::input(e.to_string()),
    })?;
    Ok(LockClient::new(channel))
}

fn refused(status: tonic::Status) -> Failure {
    crate::refusal::of_status(status)
}

pub async fn acquire(conn: &Conn, key: &str) -> Result<(), Failure> {
    let mut client = connect(conn).await?;
    let open = keyed(
        OpenSessionRequest {
            key: key.to_owned(),
        },
        key,
    );
    // This invocation is a process of its own (its instance ends in its pid): another
    // `lockctl acquire` of the same identity is a contender, not a leak.
    let session = client
        .open_session(lock_client::stub::with_instance(
            open,
            &lock_client::process_instance(),
        ))
        .await
        .map_err(refused)?
        .into_inner();
    let grant = client
        .acquire(keyed(
            AcquireRequest {
                key: key.to_owned(),
                session_id: session.session_id,
                wait_millis: 0,
                ..Default::default()
            },
            key,
        ))
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
        .release(keyed(
            ReleaseRequest {
                key: key.to_owned(),
                token,
                session_id: 0,
                ..Default::default()
            },
            key,
        ))
        .await
        .map_err(refused)?;
    println!("released {key}");
    Ok(())
}

pub async fn inspect(conn: &Conn, key: &str) -> Result<(), Failure> {
    let mut client = connect(conn).await?;
    let i = client
        .inspect(keyed(
            InspectRequest {
                key: key.to_owned(),
            },
            key,
        ))
        .await
        .map_err(refused)?
        .into_inner();
    if i.held {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let held_for = now_ms.saturating_sub(i.acquired_at_unix_ms) as f64 / 1000.0;
        println!(
            "held=true holder={} class={} acquired_at_unix_ms={} held_for={held_for:.1}s waiters={}",
            i.holder_spiffe_id, i.class_name, i.acquired_at_unix_ms, i.waiters
        );
    } else {
        println!("held=false waiters={}", i.waiters);
    }
    Ok(())
}

pub async fn validate(conn: &Conn, key: &str, token: u64) -> Result<(), Failure> {
    let mut client = connect(conn).await?;
    let valid = client
        .validate_token(keyed(
            ValidateTokenRequest {
                key: key.to_owned(),
                token,
            },
            key,
        ))
        .await
        .map_err(refused)?
        .into_inner()
        .valid;
    if valid {
        println!("valid: the current grant of {key}");
        Ok(())
    } else {
        Err(Failure::refused(format!(
            "not valid: not the current grant of {key}"
        )))
    }
}

/// `lockctl observe`: one line per change, never a token (lockctl holds no session).
pub async fn observe(
    conn: &Conn,
    key: &str,
    count: Option<u64>,
    after: Option<(i64, u32)>,
) -> Result<(), Failure> {
    let client = lock_client::LockClient::new(conn.config().await?)
        .map_err(|e| Failure::input(e.to_string()))?;
    let (revision, store_epoch) = after.unwrap_or((0, 0));
    let mut observation = client.observe(key).resume_after(revision, store_epoch);
    let mut seen = 0u64;
    while count.is_none_or(|n| seen < n) {
        let o = observation
            .next()
            .await
            .map_err(|e| crate::refusal::of_lock_error(e, false))?;
        println!("{}", observed_line(&o));
        seen += 1;
    }
    Ok(())
}

/// `revision=.. change=.. held=..` and the holder's fields, for people and scripts.
fn observed_line(o: &lock_client::Observed) -> String {
    let change = format!("{:?}", o.change).to_lowercase();
    let mut line = format!(
        "revision={} store_epoch={} change={change} held={}",
        o.revision, o.store_epoch, o.held
    );
    if o.gap {
        line.push_str(" gap=true");
    }
    if let Some(h) = &o.holder {
        line.push_str(&format!(
            " holder={} instance={} class={} acquired_at_unix_ms={} epoch={} grant_revision={}",
            h.spiffe_id,
            h.instance.as_deref().unwrap_or("-"),
            h.class,
            h.acquired_at_unix_ms,
            h.epoch,
            h.grant_revision
        ));
    }
    line
}

/// `REVISION@STORE_EPOCH` (`812@1`), as `lockctl observe` prints them.
pub fn parse_resume(s: &str) -> Result<(i64, u32), String> {
    let (revision, epoch) = s
        .split_once('@')
        .ok_or_else(|| format!("{s:?}: expected REVISION@STORE_EPOCH, e.g. 812@1"))?;
    let revision = revision
        .parse::<i64>()
        .map_err(|e| format!("{revision:?}: {e}"))?;
    let epoch = epoch
        .parse::<u32>()
        .map_err(|e| format!("{epoch:?}: {e}"))?;
    Ok((revision, epoch))
}
