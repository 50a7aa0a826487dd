//! FIFO waiting (ADR-14, 15; `fairness: fifo`, the default): waiters of a key queue in this
//! arbiter's memory in arrival order (`queue.rs`); only the head talks to etcd. The head
//! runs a grant attempt; when the key is held it watches the holder key from the revision
//! it was seen held at, so no release in between is missed. A notification never grants:
//! every grant is a transaction (`grant.rs`).

use crate::bugs::Bug;
use crate::error::ArbiterError;
use crate::grant::{Attempt, Grant, Granter, mint};
use crate::layout::holder_key;
use crate::queue::{Queues, Ticket};
use crate::release_watch::{self, Wake};
use crate::sessions::Session;
use lock_config::LockKey;
use lock_config::registry::ResolvedClass;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Grants `key` to the session, waiting up to `wait` in the key's queue when it is held.
pub async fn acquire(
    granter: &Granter<'_>,
    queues: &Arc<Queues>,
    session: &Session,
    key: &LockKey,
    class: &ResolvedClass<'_>,
    wait: Duration,
) -> Result<Grant, ArbiterError> {
    // The calls below that talk to etcd are boxed: a queued waiter's future then holds only
    // its ticket, not room for the largest etcd call it might make (measured by `make
    // bench`'s memory row: the size of this future is paid per waiter).
    if wait.is_zero() {
        return match Box::pin(granter.attempt(session, key, class, None)).await? {
            Attempt::Granted(g) => Ok(g),
            Attempt::Held { .. } => Err(ArbiterError::Held),
        };
    }
    // A retried Acquire whose first answer was lost must get its grant back, not queue
    // behind waiters for a key it holds (found by the release gate); a leaked hold is named
    // as one rather than queued (with no queue, the head's first attempt classifies it).
    if queues.len(key.as_str()) > 0
        && let Some(g) = Box::pin(granter.held_by(session, key, class)).await?
    {
        return Ok(g);
    }
    let deadline = Instant::now() + wait;
    let ticket = queues.join(key.as_str());
    if tokio::time::timeout_at(deadline, ticket.until_head())
        .await
        .is_err()
    {
        return Err(ArbiterError::HeldDeadline);
    }
    Box::pin(wait_as_head(
        granter, &ticket, session, key, class, deadline,
    ))
    .await
}

/// The head of a key's queue: attempt, and when held, watch for the release from the
/// revision the key was seen held at.
async fn wait_as_head(
    granter: &Granter<'_>,
    ticket: &Ticket,
    session: &Session,
    key: &LockKey,
    class: &ResolvedClass<'_>,
    deadline: Instant,
) -> Result<Grant, ArbiterError> {
    let hkey = holder_key(key);
    let mut broken_watches = 0u32;
    loop {
        if ticket.held_at().is_none() {
            match granter.attempt(session, key, class, None).await? {
                Attempt::Granted(g) => {
                    // The next head starts by watching, not by a doomed transaction.
                    ticket.saw_held(g.revision);
                    return Ok(g);
                }
                Attempt::Held { revision } => ticket.saw_held(revision),
            }
        }
        let from = ticket.held_at().unwrap_or(0) + 1;
        let watched = release_watch::wait(granter.store, &hkey, from, deadline);
        let wake = match ticket.release_signal() {
            // A release through this arbiter wakes the head without the watch's round
            // trip; a release elsewhere (or an expiry) still arrives by the watch.
            Some(signal) => tokio::select! {
                w = watched => w,
                () = signal.notified() => Wake::Released { revision: 0 },
            },
            None => watched.await,
        };
        match wake {
            Wake::Released { revision } => {
                if granter.bugs.has(Bug::GrantOnWatchEvent) && revision > 0 {
                    let sealed = granter.store.sealed().await?;
                    ticket.saw_held(revision);
                    return mint(sealed.epoch(), revision, class);
                }
                broken_watches = 0;
                ticket.saw_released();
            }
            Wake::Deadline => return Err(ArbiterError::HeldDeadline),
            Wake::Broken => {
                // Watch lost or compacted: retry the transaction and re-watch at once; if
                // the watch keeps failing, poll every second with jitter (ADR-15).
                broken_watches += 1;
                if broken_watches > 1 {
                    let pause = release_watch::poll_interval();
                    if tokio::time::timeout_at(deadline, tokio::time::sleep(pause))
                        .await
                        .is_err()
                    {
                        return Err(ArbiterError::HeldDeadline);
                    }
                }
                ticket.saw_released();
            }
        }
    }
}
