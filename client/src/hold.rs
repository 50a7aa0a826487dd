//! A hold: the token, the two-stage liveness of its session, and release.

use crate::error::LockError;
use crate::session::Session;
use crate::state::Inner;
use lock_config::FencingToken;
use std::sync::Arc;
use std::time::Duration;

/// A granted lock. Pass [`Hold::token`] to the guarded write; check [`Hold::can_start`]
/// before each unit of work. Dropping a hold releases it in a background task on the
/// current Tokio runtime (without one it lapses at the session's TTL); prefer
/// [`Hold::release`] to see the outcome, and [`crate::LockClient::shutdown`] before
/// exiting. A hold keeps its client's shared state alive (it is a handle to the client).
pub struct Hold {
    client: Arc<Inner>,
    key: String,
    id: u64,
    token: FencingToken,
    session: Arc<Session>,
    done: bool,
}

impl Hold {
    pub(crate) fn new(
        client: Arc<Inner>,
        key: &str,
        id: u64,
        token: FencingToken,
        session: Arc<Session>,
    ) -> Self {
        Self {
            client,
            key: key.to_owned(),
            id,
            token,
            session,
            done: false,
        }
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    /// The fencing token: compare it in the resource's own conditional write.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// False from the first failed renewal on: finish in-flight work, start nothing new.
    pub fn can_start(&self) -> bool {
        self.session.can_start()
    }

    /// Time left before the local deadline at which the hold is fenced.
    pub fn remaining_ttl(&self) -> Duration {
        self.session.remaining()
    }

    /// The hold was fenced (its `on_fence` ran): it is dead.
    pub fn is_fenced(&self) -> bool {
        self.session.is_fenced()
    }

    /// True if the hold has covered every instant from its grant until now: call it when
    /// the guarded work ends, before [`Hold::release`]. False when the session passed its
    /// local deadline at any point, even if the renewal task has not fenced yet (a process
    /// frozen past the TTL wakes and may finish its work first): that work may not have
    /// been exclusive, and only the resource's fence check kept it safe.
    pub fn was_continuous(&self) -> bool {
        self.session.lapse().is_none()
    }

    /// Why the hold was not continuous ([`Hold::was_continuous`]), if it was not.
    pub fn lapse(&self) -> Option<crate::liveness::Lapse> {
        self.session.lapse()
    }

    /// Releases this acquire. Only the outermost hold of a key calls the service.
    pub async fn release(mut self) -> Result<(), LockError> {
        self.done = true;
        finish(&self.client, &self.key, self.id, self.token, &self.session).await
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let (client, key, id, token, session) = (
            self.client.clone(),
            std::mem::take(&mut self.key),
            self.id,
            self.token,
            self.session.clone(),
        );
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = finish(&client, &key, id, token, &session).await;
            });
        }
    }
}

async fn finish(
    client: &Inner,
    key: &str,
    id: u64,
    token: FencingToken,
    session: &Arc<Session>,
) -> Result<(), LockError> {
    session.detach(id);
    let last = {
        let mut holds = crate::state::locked(&client.holds);
        match holds.get_mut(key) {
            Some(e) if e.count > 1 => {
                e.count -= 1;
                None
            }
            Some(_) => holds.remove(key).map(|e| (e.link, Some(e.grant))),
            None => None,
        }
    };
    let Some((link, grant)) = last else {
        return Ok(());
    };
    if session.is_fenced() {
        // The lease is gone or about to be: nothing to release, and the caller must know
        // its work may not have been exclusive.
        return Err(LockError::Fenced);
    }
    // The hold ends here for its owner, whatever the release call answers: a release the
    // service refuses (STALE_TOKEN) or does not hear lapses with the session's TTL.
    if let Some(grant) = grant {
        session.released(grant);
    }
    if let Some(link) = link
        && let Some(done) = crate::hold_stream::release(link, key, token, session.id).await
    {
        return done;
    }
    client.release_rpc(key, token, session.id).await
}
