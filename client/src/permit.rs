//! Semaphores: one of the N permits of a key of a `permits: N` class. Up to N sessions
//! hold the key at once, each on its own permit (numbered 0..N-1) with its own token. A
//! resource fences per permit: it keeps the last token seen for each (key, permit) and
//! accepts a write only under a greater one
//! (`UPDATE ... SET fence = $token WHERE key = $k AND permit = $p AND fence < $token`), so
//! a paused permit holder's late write is refused once its permit has been given again.
//!
//! Re-entrancy follows the exclusive hold's rule: a client that holds a permit of a key and
//! asks again gets the same permit back, nested, and the service hears one release, the
//! last one (a session holds at most one permit of a key).

use crate::client::LockClient;
use crate::error::LockError;
use crate::session::{FenceFn, Session};
use crate::shared::ModeHold;
use crate::state::Inner;
use lock_config::FencingToken;
use lock_config::proto::v1::HoldMode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A held permit of a semaphore. Renewed with its session and fenced with it, as any hold;
/// dropping it releases it in a background task (prefer [`Permit::release`]).
pub struct Permit {
    client: Arc<Inner>,
    key: String,
    id: u64,
    permit: u32,
    token: FencingToken,
    session: Arc<Session>,
    done: bool,
}

/// The outermost permit grant of a key on this client, and how many [`Permit`]s share it.
pub(crate) struct PermitEntry {
    count: usize,
    permit: u32,
    outer: ModeHold,
}

impl Permit {
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Which of the key's permits this is (0..N-1): the resource fences per permit.
    pub fn permit(&self) -> u32 {
        self.permit
    }

    /// This permit grant's token: strictly above every earlier grant of the same permit,
    /// and unlike every other grant of the key.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// False from the first failed renewal on: finish in-flight work, start nothing new.
    pub fn can_start(&self) -> bool {
        self.session.can_start()
    }

    pub fn is_fenced(&self) -> bool {
        self.session.is_fenced()
    }

    /// True if the hold covered every instant from its grant until now.
    pub fn was_continuous(&self) -> bool {
        self.session.lapse().is_none()
    }

    /// Releases this permit; the service hears it when the last nested one goes.
    pub async fn release(mut self) -> Result<(), LockError> {
        self.done = true;
        finish(&self.client, &self.key, self.id, &self.session).await
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let (client, key, id, session) = (
            self.client.clone(),
            std::mem::take(&mut self.key),
            self.id,
            self.session.clone(),
        );
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = finish(&client, &key, id, &session).await;
            });
        }
    }
}

/// One [`Permit`] ends: a nested one only detaches; the last releases the grant.
async fn finish(
    client: &Inner,
    key: &str,
    id: u64,
    session: &Arc<Session>,
) -> Result<(), LockError> {
    // A poisoned map still holds its entries: the release must not be skipped.
    let outer = {
        let mut permits = client.permits.lock().unwrap_or_else(|p| p.into_inner());
        match permits.get_mut(key) {
            Some(e) if e.count > 1 => {
                e.count -= 1;
                None
            }
            Some(_) => permits.remove(key).map(|e| e.outer),
            None => None,
        }
    };
    match outer {
        // The outermost grant's own release detaches its id; a nested id goes here.
        Some(outer) => {
            if outer.id() != id {
                session.detach(id);
            }
            outer.release().await
        }
        None => {
            session.detach(id);
            Ok(())
        }
    }
}

impl LockClient {
    /// Takes one permit of `key`, a key of a semaphore class (`permits: N`), waiting up to
    /// `wait` in the key's FIFO queue while all N are held. Asked again while this client
    /// holds a permit of the key, it returns that permit, nested (released on the last
    /// release). Any other class is [`LockError::InvalidRequest`]. `on_fence` runs if the
    /// permit is lost.
    pub async fn acquire_permit(
        &self,
        key: &str,
        wait: Duration,
        on_fence: impl Fn() + Send + Sync + 'static,
    ) -> Result<Permit, LockError> {
        let on_fence: FenceFn = Arc::new(on_fence);
        if let Some(p) = self.reenter_permit(key, on_fence.clone()) {
            return Ok(p);
        }
        let (outer, permit) = self
            .acquire_in_mode(key, wait, on_fence, HoldMode::Permit)
            .await?;
        let held = Permit {
            client: self.inner.clone(),
            key: key.to_owned(),
            id: outer.id(),
            permit,
            token: outer.token,
            session: outer.session.clone(),
            done: false,
        };
        let mut permits = self.inner.permits.lock().unwrap_or_else(|p| p.into_inner());
        permits.insert(
            key.to_owned(),
            PermitEntry {
                count: 1,
                permit,
                outer,
            },
        );
        Ok(held)
    }

    /// The permit this client holds of `key`, nested once more (None: none, or fenced).
    fn reenter_permit(&self, key: &str, on_fence: FenceFn) -> Option<Permit> {
        let mut permits = self.inner.permits.lock().unwrap_or_else(|p| p.into_inner());
        let entry = permits.get_mut(key)?;
        if entry.outer.session.is_fenced() {
            // Fenced: the grant is gone; its Permits still end by their own release.
            return None;
        }
        entry.count += 1;
        let id = self.inner.next_hold.fetch_add(1, Ordering::Relaxed);
        entry.outer.session.attach(id, on_fence);
        Some(Permit {
            client: self.inner.clone(),
            key: key.to_owned(),
            id,
            permit: entry.permit,
            token: entry.outer.token,
            session: entry.outer.session.clone(),
            done: false,
        })
    }
}
