//! The work of an Acquire and a Release, whatever carried them: the unary calls
//! (`service.rs`) and the messages of a Hold stream (`hold.rs`) run the same functions, so
//! a stream can do nothing a unary call could not.

use crate::error::ArbiterError;
use crate::lock::Asked;
use crate::ops::metrics::METRICS;
use crate::serve::edge::EdgeContext;
use crate::serve::engine::Engine;
use lock_config::proto::v1::*;
use lock_config::status_details::refusal_of;
use lock_config::{FencingToken, Reason};
use std::time::Instant;
use tonic::Status;

/// An Acquire, unary or the first message of a Hold stream: the edge's key must be the
/// message's.
pub async fn acquire(
    engine: &Engine,
    edge: &EdgeContext,
    m: &AcquireRequest,
) -> Result<AcquireResponse, ArbiterError> {
    let who = edge.identity()?;
    let key = edge.keyed(&m.key)?;
    crate::ops::traces::namespace(key.namespace());
    let wait = std::time::Duration::from_millis(m.wait_millis);
    let result = engine
        .acquire(&who, &key, m.session_id, wait, mode_of(m.mode)?)
        .await;
    match &result {
        Ok(g) => tracing::debug!(namespace = key.namespace(), class = g.class, "granted"),
        Err(e) => tracing::debug!(namespace = key.namespace(), error = %e, "refused"),
    }
    let g = result?;
    crate::ops::traces::class(&g.class);
    if engine.bugs().has(crate::ops::bugs::Bug::TokenInSpan) {
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        let token = i64::try_from(g.token.as_u64()).unwrap_or(i64::MAX);
        tracing::Span::current().set_attribute("lock.token", token);
    }
    Ok(AcquireResponse {
        token: g.token.as_u64(),
        parts: Some(TokenParts {
            epoch: u32::from(g.token.epoch()),
            revision: g.token.revision(),
        }),
        class_name: g.class,
        ttl_seconds: g.ttl_seconds,
        permit: g.permit.unwrap_or(0),
    })
}

/// A Release, unary or on a Hold stream.
pub async fn release(
    engine: &Engine,
    edge: &EdgeContext,
    m: &ReleaseRequest,
) -> Result<ReleaseResponse, ArbiterError> {
    let who = edge.identity()?;
    let key = edge.keyed(&m.key)?;
    crate::ops::traces::namespace(key.namespace());
    let token = FencingToken::from_u64(m.token).map_err(|_| ArbiterError::MalformedToken)?;
    let lease = Some(m.session_id).filter(|s| *s != 0);
    let released_at_revision = engine
        .release(&who, &key, token, lease, mode_of(m.mode)?)
        .await?;
    tracing::debug!(namespace = key.namespace(), "released");
    Ok(ReleaseResponse {
        released_at_revision,
    })
}

/// The wire's hold mode: SHARED, PERMIT, or exclusive (unspecified or EXCLUSIVE). A number
/// this arbiter does not know is refused (MALFORMED_REQUEST), as every unknown enum value
/// is: a client that asked for a mode it believes exists must not be granted another.
fn mode_of(mode: i32) -> Result<Asked, ArbiterError> {
    match HoldMode::try_from(mode) {
        Ok(HoldMode::Shared) => Ok(Asked::Shared),
        Ok(HoldMode::Permit) => Ok(Asked::Permit),
        Ok(HoldMode::Exclusive | HoldMode::Unspecified) => Ok(Asked::Exclusive),
        Err(_) => Err(ArbiterError::UnknownMode(mode)),
    }
}

/// An AcquireAll: the edge's set must be the message's.
pub async fn acquire_all(
    engine: &Engine,
    edge: &EdgeContext,
    m: &AcquireAllRequest,
) -> Result<AcquireAllResponse, ArbiterError> {
    let who = edge.identity()?;
    let set = edge.keyed_set(&m.keys)?;
    crate::ops::traces::namespace(set.first().namespace());
    let wait = std::time::Duration::from_millis(m.wait_millis);
    let g = engine.acquire_all(&who, &set, m.session_id, wait).await?;
    tracing::debug!(
        namespace = set.first().namespace(),
        keys = set.len(),
        "set granted"
    );
    Ok(AcquireAllResponse {
        token: g.token.as_u64(),
        parts: Some(TokenParts {
            epoch: u32::from(g.token.epoch()),
            revision: g.token.revision(),
        }),
        keys: set.names(),
        ttl_seconds: g.ttl_seconds,
    })
}

/// A ReleaseAll.
pub async fn release_all(
    engine: &Engine,
    edge: &EdgeContext,
    m: &ReleaseAllRequest,
) -> Result<ReleaseAllResponse, ArbiterError> {
    let who = edge.identity()?;
    let set = edge.keyed_set(&m.keys)?;
    crate::ops::traces::namespace(set.first().namespace());
    let token = FencingToken::from_u64(m.token).map_err(|_| ArbiterError::MalformedToken)?;
    let lease = Some(m.session_id).filter(|s| *s != 0);
    let released = engine.release_all(&who, &set, token, lease).await?;
    tracing::debug!(
        namespace = set.first().namespace(),
        keys = released.keys.len(),
        "set released"
    );
    Ok(ReleaseAllResponse {
        released_at_revision: released.revision,
        released_keys: released.keys,
    })
}

/// The count and latency of one operation, whatever carried it (a unary call or a message
/// on a Hold stream).
pub fn record<T>(operation: &'static str, start: Instant, result: &Result<T, Status>) {
    let outcome = match result {
        Ok(_) => Ok(()),
        Err(s) => {
            Err(refusal_of(s.code() as i32, s.details()).map_or(Reason::Internal, |r| r.reason))
        }
    };
    METRICS.request(operation, outcome, start.elapsed());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hold_modes_the_wire_may_carry() {
        for (wire, want) in [
            (0, Some(Asked::Exclusive)),
            (1, Some(Asked::Exclusive)),
            (2, Some(Asked::Shared)),
            (3, Some(Asked::Permit)),
            (4, None),
            (-1, None),
            (i32::MAX, None),
            (i32::MIN, None),
        ] {
            assert_eq!(mode_of(wire).ok(), want, "{wire}");
        }
        assert!(matches!(mode_of(4), Err(ArbiterError::UnknownMode(4))));
    }
}
