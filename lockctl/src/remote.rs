//! Commands that talk to the service through Envoy with the workload's SVID.

use crate::keys::{self, Mode, Release, Take};
use crate::{Conn, Failure};
use lock_client::proto::lock_client::LockClient;
use lock_client::stub::keyed;
use lock_config::proto::v1::{
    AcquireAllRequest, AcquireRequest, HoldMode, InspectRequest, KeepAliveRequest,
    OpenSessionRequest, ReleaseAllRequest, ReleaseRequest, ValidateTokenRequest,
};
use std::time::{Duration, Instant};
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

/// `lockctl acquire`: opens a session for the (first) key's class and takes one key,
/// exclusive or shared, or a set of keys (AcquireAll), waiting up to `wait` in the
/// service's queue. While it waits, lockctl renews the session; once granted it stops (the
/// hold lasts the session's TTL from the last renewal, as without a wait).
pub async fn acquire(conn: &Conn, take: &Take, wait: Duration) -> Result<(), Failure> {
    let mut client = connect(conn).await?;
    let first = take.keys().into_iter().min().unwrap_or_default().to_owned();
    let open = keyed(OpenSessionRequest { key: first.clone() }, &first);
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
    let id = session.session_id;
    let ttl = Duration::from_secs(u64::from(session.ttl_seconds.max(1)));
    let deadline = Instant::now() + wait;
    let renewer = (!wait.is_zero()).then(|| tokio::spawn(renew(client.clone(), id, ttl)));
    let granted = match take {
        Take::One { key, mode } => {
            let mode = hold_mode(*mode);
            asking(deadline, |ask| {
                let mut client = client.clone();
                let req = AcquireRequest {
                    key: key.clone(),
                    session_id: id,
                    wait_millis: ask,
                    mode: mode.into(),
                };
                let req_mode = req.mode;
                async move {
                    let g = client.acquire(keyed(req, key)).await?.into_inner();
                    let parts = g.parts.unwrap_or_default();
                    // A permit's number is what its resource fences by: printed with it.
                    let what = match HoldMode::try_from(req_mode) {
                        Ok(HoldMode::Permit) => {
                            format!("class={} permit={}", g.class_name, g.permit)
                        }
                        _ => format!("class={}", g.class_name),
                    };
                    Ok(Granted {
                        token: g.token,
                        epoch: parts.epoch,
                        revision: parts.revision,
                        what,
                        ttl_seconds: g.ttl_seconds,
                    })
                }
            })
            .await
        }
        Take::Set(keys) => {
            asking(deadline, |ask| {
                let mut client = client.clone();
                // A set request carries no `lock-key` metadata: the edge decides a set on
                // every key of its body.
                let req = tonic::Request::new(AcquireAllRequest {
                    keys: keys.clone(),
                    session_id: id,
                    wait_millis: ask,
                });
                async move {
                    let g = client.acquire_all(req).await?.into_inner();
                    let parts = g.parts.unwrap_or_default();
                    Ok(Granted {
                        token: g.token,
                        epoch: parts.epoch,
                        revision: parts.revision,
                        what: format!("keys={}", g.keys.join(",")),
                        ttl_seconds: g.ttl_seconds,
                    })
                }
            })
            .await
        }
    };
    if let Some(r) = renewer {
        r.abort();
    }
    let g = granted.map_err(|status| {
        let waited = !wait.is_zero();
        // The queue's wait ended: HELD as the service answers a wait's end.
        if waited
            && lock_client::refusal(&status).is_some_and(|r| r.reason == lock_client::Reason::Held)
        {
            return crate::refusal::of_lock_error(lock_client::LockError::Held, true);
        }
        refused(status)
    })?;
    if !wait.is_zero() {
        // The hold lasts the session's TTL from now, as an acquire without a wait does.
        let _ = renew_once(&mut client.clone(), id).await;
    }
    let mode = match take {
        Take::One {
            mode: Mode::Shared, ..
        } => " mode=shared",
        Take::One {
            mode: Mode::Permit, ..
        } => " mode=permit",
        _ => "",
    };
    println!(
        "token={} epoch={} revision={} session={id} {}{mode} ttl={}s",
        g.token, g.epoch, g.revision, g.what, g.ttl_seconds
    );
    let release = match take {
        Take::One {
            key,
            mode: Mode::Exclusive,
        } => format!("lockctl release {key} <token>"),
        Take::One { key, mode } => format!("lockctl release {} {key} <token>", mode.flag()),
        Take::Set(keys) => format!("lockctl release --token <token> {}", keys.join(" ")),
    };
    eprintln!(
        "held until `{release}` or until the session lapses ({} s without keepalives)",
        g.ttl_seconds
    );
    Ok(())
}

/// The wire's mode for how a key is held.
fn hold_mode(mode: Mode) -> HoldMode {
    match mode {
        Mode::Exclusive => HoldMode::Exclusive,
        Mode::Shared => HoldMode::Shared,
        Mode::Permit => HoldMode::Permit,
    }
}

/// What a grant printed.
struct Granted {
    token: u64,
    epoch: u32,
    revision: u64,
    /// `class=..` of a key, `keys=..` of a set.
    what: String,
    ttl_seconds: u32,
}

/// Calls `call(wait_millis)` until it grants, is refused, or the caller's wait (to
/// `deadline`) is over: the service waits at most [`crate::keys::SERVICE_MAX_WAIT`] per
/// call, so a longer wait is asked again, in the queue again.
async fn asking<T, F, Fut>(deadline: Instant, mut call: F) -> Result<T, tonic::Status>
where
    F: FnMut(u64) -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let status = match call(keys::wait_millis(keys::service_wait(left))).await {
            Ok(t) => return Ok(t),
            Err(s) => s,
        };
        let held =
            lock_client::refusal(&status).is_some_and(|r| r.reason == lock_client::Reason::Held);
        if !keys::ask_again(held, deadline.saturating_duration_since(Instant::now())) {
            return Err(status);
        }
    }
}

/// Renews session `id` every TTL/3 until aborted; a failed renewal is tried again at the
/// next turn (an expired session shows in the acquire's own answer).
async fn renew(client: LockClient<Channel>, id: i64, ttl: Duration) {
    let period = ttl / 3;
    loop {
        tokio::time::sleep(period).await;
        let _ = tokio::time::timeout(period, renew_once(&mut client.clone(), id)).await;
    }
}

/// One keepalive of session `id` on a stream of its own.
async fn renew_once(client: &mut LockClient<Channel>, id: i64) -> Result<(), tonic::Status> {
    let ask = tonic::codegen::tokio_stream::iter([KeepAliveRequest { session_id: id }]);
    let mut replies = client.keep_alive(ask).await?.into_inner();
    replies.message().await?;
    Ok(())
}

/// `lockctl release`: one key (Release, SHARED if the hold is shared) or a set (ReleaseAll).
pub async fn release(conn: &Conn, what: &Release) -> Result<(), Failure> {
    let mut client = connect(conn).await?;
    match what {
        Release::One { key, token, mode } => {
            let mode = hold_mode(*mode);
            client
                .release(keyed(
                    ReleaseRequest {
                        key: key.clone(),
                        token: *token,
                        session_id: 0,
                        mode: mode.into(),
                    },
                    key,
                ))
                .await
                .map_err(refused)?;
            println!("released {key}");
        }
        Release::Set { keys, token } => {
            let r = client
                .release_all(tonic::Request::new(ReleaseAllRequest {
                    keys: keys.clone(),
                    token: *token,
                    session_id: 0,
                }))
                .await
                .map_err(refused)?
                .into_inner();
            println!("released {}", r.released_keys.join(" "));
            let gone: Vec<&str> = keys
                .iter()
                .filter(|k| !r.released_keys.contains(k))
                .map(String::as_str)
                .collect();
            if !gone.is_empty() {
                eprintln!(
                    "already ended alone (released or forced before): {}",
                    gone.join(" ")
                );
            }
        }
    }
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
    if i.permits > 0 {
        // A semaphore: how many of its permits are held (no one holder to name).
        println!(
            "held={} permits_held={} permits={} class={} waiters={}",
            i.held, i.permits_held, i.permits, i.class_name, i.waiters
        );
    } else if i.held {
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
