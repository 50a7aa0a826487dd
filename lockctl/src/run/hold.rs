//! What a run holds: one key (exclusive, shared or a semaphore's permit) or a set, taken
//! with a wait that means
//! what `--wait` says, and given back on every way out, bounded, before lockctl exits.

use crate::keys::{self, Mode, Take};
use lock_client::{HeldSet, Hold, LockClient, LockError, Permit, SharedHold};
use std::time::{Duration, Instant};

/// Bound on the release and the session close on the way out.
const FINISH_TIMEOUT: Duration = Duration::from_secs(5);
/// A hold `run` took: of one key (exclusive or shared) or of a set.
pub(super) enum Held {
    One(Hold),
    Shared(SharedHold),
    Permit(Permit),
    Set(HeldSet),
}

impl Held {
    pub(super) fn token(&self) -> u64 {
        match self {
            Held::One(h) => h.token(),
            Held::Shared(h) => h.token(),
            Held::Permit(h) => h.token(),
            Held::Set(h) => h.token(),
        }
        .as_u64()
    }

    /// A semaphore's permit number (None for every other hold).
    pub(super) fn permit(&self) -> Option<u32> {
        match self {
            Held::Permit(h) => Some(h.permit()),
            _ => None,
        }
    }

    fn is_fenced(&self) -> bool {
        match self {
            Held::One(h) => h.is_fenced(),
            Held::Shared(h) => h.is_fenced(),
            Held::Permit(h) => h.is_fenced(),
            Held::Set(h) => h.is_fenced(),
        }
    }

    /// Why the hold did not cover every instant since its grant, if it did not.
    pub(super) fn lapse(&self) -> Option<String> {
        match self {
            Held::One(h) => h.lapse().map(|l| l.to_string()),
            Held::Shared(h) => (!h.was_continuous()).then(|| LAPSED.to_owned()),
            Held::Permit(h) => (!h.was_continuous()).then(|| LAPSED.to_owned()),
            Held::Set(h) => (!h.was_continuous()).then(|| LAPSED.to_owned()),
        }
    }

    async fn release(self) -> Result<(), LockError> {
        match self {
            Held::One(h) => h.release().await,
            Held::Shared(h) => h.release().await,
            Held::Permit(h) => h.release().await,
            Held::Set(h) => h.release().await,
        }
    }
}

/// The lapse of a shared hold, a permit or a set, whose client does not say by how much.
const LAPSED: &str = "its session passed its local deadline unrenewed";

/// Takes what `take` names, waiting up to `wait`; a wait longer than the service's (300 s)
/// is asked again while the key is still held, so `--wait` means what it says.
pub(super) async fn acquire(
    client: &LockClient,
    take: &Take,
    wait: Duration,
    on_fence: impl Fn() + Clone + Send + Sync + 'static,
) -> Result<Held, LockError> {
    let deadline = Instant::now() + wait;
    loop {
        let ask = keys::service_wait(deadline.saturating_duration_since(Instant::now()));
        let got = match take {
            Take::One {
                key,
                mode: Mode::Exclusive,
            } => client
                .acquire(key, ask, on_fence.clone())
                .await
                .map(Held::One),
            Take::One {
                key,
                mode: Mode::Shared,
            } => client
                .acquire_shared(key, ask, on_fence.clone())
                .await
                .map(Held::Shared),
            Take::One {
                key,
                mode: Mode::Permit,
            } => client
                .acquire_permit(key, ask, on_fence.clone())
                .await
                .map(Held::Permit),
            Take::Set(keys) => client
                .acquire_all(keys, ask, on_fence.clone())
                .await
                .map(Held::Set),
        };
        match got {
            Err(LockError::Held)
                if keys::ask_again(true, deadline.saturating_duration_since(Instant::now())) => {}
            got => return got,
        }
    }
}

/// Releases the hold (if any) and closes the client's sessions, each bounded; failures
/// are reported, not fatal: the session's TTL is the backstop.
pub(super) async fn shutdown(client: &LockClient, hold: Option<Held>) {
    if let Some(hold) = hold
        && !hold.is_fenced()
    {
        match tokio::time::timeout(FINISH_TIMEOUT, hold.release()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => say!("lockctl: release: {e}"),
            Err(_) => say!("lockctl: release timed out"),
        }
    }
    match tokio::time::timeout(FINISH_TIMEOUT, client.shutdown()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => say!("lockctl: closing the session: {e}"),
        Err(_) => say!("lockctl: closing the session timed out"),
    }
}
