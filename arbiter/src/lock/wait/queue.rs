//! In-memory FIFO wait queues per key (ADR-14).
//!
//! Envoy's ring hash brings every waiter of a key to one arbiter, which queues them in
//! arrival order. Only the head of a key's queue talks to etcd (watches and grant
//! transactions), so one release causes one grant attempt. A waiter holds a [`Ticket`];
//! dropping it (granted, deadline, error, or the request future dropped because the caller
//! cancelled) leaves the queue and wakes the next waiter. No I/O here.

use crate::store::epoch::Epoch;
use crate::store::layout::Holder;
use dashmap::DashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{Notify, oneshot};

/// A waiter's standing offer to take the key in the transaction that releases it (issue
/// 18): the release and the grant commit as one write. Every waiter stands one from the
/// moment it joins (so a release that comes before the next head has woken still hands
/// on); a release takes only the first waiter's, and must answer it.
pub struct Offer {
    /// The head's session lease, and the create revision of its `/s/` binding (the
    /// handoff compares it: a session that ended gets nothing).
    pub lease: i64,
    pub session_create_revision: i64,
    /// The head's holder record (the releaser stamps the time it takes the key).
    pub holder: Holder,
    pub reply: oneshot::Sender<Handed>,
}

/// What became of an offer a release took.
#[derive(Debug)]
pub enum Handed {
    /// The key is the head's, written at `revision` in `epoch` (a semaphore's: that
    /// `permit`, the releaser's).
    Granted {
        revision: i64,
        epoch: Epoch,
        permit: Option<u32>,
    },
    /// The head's session had ended: the release went ahead without it.
    SessionGone,
    /// Not handed on (the releaser's token was stale, or the epoch moved): keep waiting.
    NotNow,
}

struct Slot {
    id: u64,
    wake: Arc<Notify>,
    offer: Option<Offer>,
}

#[derive(Default)]
struct KeyQueue {
    waiters: VecDeque<Slot>,
    /// The last revision at which the key was seen held (by a failed grant or a grant
    /// made from this queue). A new head watches for the release after it instead of
    /// spending a transaction on a key it knows is taken.
    held_at: Option<i64>,
    /// Woken when a release of this key commits through this arbiter, so the head tries
    /// at once instead of waiting for etcd's watch event to come round.
    released: Arc<Notify>,
}

#[derive(Default)]
pub struct Queues {
    keys: DashMap<String, Arc<Mutex<KeyQueue>>>,
    next_id: AtomicU64,
}

impl Queues {
    /// Joins the queue of `key` at the tail.
    pub fn join(self: &Arc<Self>, key: &str) -> Ticket {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let wake = Arc::new(Notify::new());
        // Push while holding the map entry (shard lock): `leave` removes an empty queue
        // under the same lock, so a waiter can never join a queue that was just dropped.
        let entry = self.keys.entry(key.to_owned()).or_default();
        let mut length_on_join = 0;
        if let Ok(mut q) = entry.lock() {
            q.waiters.push_back(Slot {
                id,
                wake: wake.clone(),
                offer: None,
            });
            length_on_join = q.waiters.len();
        }
        drop(entry);
        Ticket {
            queues: self.clone(),
            key: key.to_owned(),
            id,
            wake,
            length_on_join,
            _counted: crate::ops::metrics::GaugeGuard::new(
                &crate::ops::metrics::METRICS.queue_depth,
            ),
        }
    }

    /// Waiters currently queued for `key`.
    pub fn len(&self, key: &str) -> usize {
        self.keys
            .get(key)
            .and_then(|q| q.lock().ok().map(|q| q.waiters.len()))
            .unwrap_or(0)
    }

    /// A release of `key` committed here: wake its queue's head, if there is a queue.
    /// A hint only, like the watch: the head still runs a full grant transaction.
    pub fn released(&self, key: &str) {
        if let Some(q) = self.queue(key)
            && let Ok(q) = q.lock()
        {
            // Only a head waiting right now: no stored permit that would cost a later head
            // a doomed attempt (a head mid-attempt still has the watch).
            q.released.notify_waiters();
        }
    }

    /// Takes the first waiter's offer for `key`, if it has one standing. The taker must
    /// answer it.
    pub fn take_offer(&self, key: &str) -> Option<Offer> {
        let q = self.queue(key)?;
        let mut q = q.lock().ok()?;
        q.waiters.front_mut()?.offer.take()
    }

    /// Waiters across all keys (tests only).
    #[cfg(test)]
    pub fn total(&self) -> usize {
        self.keys
            .iter()
            .filter_map(|e| e.value().lock().ok().map(|q| q.waiters.len()))
            .sum()
    }

    fn queue(&self, key: &str) -> Option<Arc<Mutex<KeyQueue>>> {
        self.keys.get(key).map(|q| q.clone())
    }

    fn leave(&self, key: &str, id: u64) {
        let Some(q) = self.queue(key) else { return };
        let Ok(mut q) = q.lock() else { return };
        let was_head = q.waiters.front().is_some_and(|s| s.id == id);
        q.waiters.retain(|s| s.id != id);
        if was_head && let Some(next) = q.waiters.front() {
            // notify_one stores a permit, so a head that is not yet waiting still wakes.
            next.wake.notify_one();
        }
        if q.waiters.is_empty() {
            drop(q);
            // Never hold a map guard and a queue lock at once in the other order.
            self.keys.remove_if(key, |_, q| {
                q.lock().map(|q| q.waiters.is_empty()).unwrap_or(false)
            });
        }
    }
}

/// A place in a key's queue. Dropping it leaves the queue.
pub struct Ticket {
    queues: Arc<Queues>,
    key: String,
    id: u64,
    wake: Arc<Notify>,
    /// The queue's length just after this waiter joined (itself included).
    pub length_on_join: usize,
    /// `lock_arbiter_queue_depth` counts this waiter while the ticket lives.
    _counted: crate::ops::metrics::GaugeGuard,
}

impl Ticket {
    /// Runs `f` on this ticket's key queue (None if the lock is poisoned).
    fn with_queue<R>(&self, f: impl FnOnce(&mut KeyQueue) -> R) -> Option<R> {
        let q = self.queues.queue(&self.key)?;
        let mut q = q.lock().ok()?;
        Some(f(&mut q))
    }

    pub fn is_head(&self) -> bool {
        self.with_queue(|q| q.waiters.front().is_some_and(|s| s.id == self.id))
            .unwrap_or(false)
    }

    /// Resolves when this ticket is the head of its queue.
    pub async fn until_head(&self) {
        while !self.is_head() {
            self.wake.notified().await;
        }
    }

    /// Records that the key was seen held at `revision`.
    pub fn saw_held(&self, revision: i64) {
        self.with_queue(|q| q.held_at = Some(q.held_at.map_or(revision, |r| r.max(revision))));
    }

    /// The last revision the key was seen held, if any waiter of this queue saw it.
    pub fn held_at(&self) -> Option<i64> {
        self.with_queue(|q| q.held_at).flatten()
    }

    /// The notification [`Queues::released`] sends for this ticket's key.
    pub fn release_signal(&self) -> Option<Arc<Notify>> {
        self.with_queue(|q| q.released.clone())
    }

    /// Forgets the held-at revision (the key was seen released).
    pub fn saw_released(&self) {
        self.with_queue(|q| q.held_at = None);
    }

    /// Stands this ticket's offer to take the key from its releaser (replacing an earlier
    /// one of its own).
    pub fn offer(&self, offer: Offer) {
        self.with_queue(|q| {
            if let Some(s) = q.waiters.iter_mut().find(|s| s.id == self.id) {
                s.offer = Some(offer);
            }
        });
    }

    /// Takes this ticket's offer back. False if a release has taken it (its answer is on
    /// the way, and must be waited for: the key may be this ticket's already).
    pub fn withdraw(&self) -> bool {
        self.with_queue(|q| {
            q.waiters
                .iter_mut()
                .find(|s| s.id == self.id)
                .and_then(|s| s.offer.take())
                .is_some()
        })
        .unwrap_or(false)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.queues.leave(&self.key, self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn heads_in_arrival_order_and_cancellation_leaves() {
        let q = Arc::new(Queues::default());
        let a = q.join("k");
        let b = q.join("k");
        let c = q.join("k");
        assert!(a.is_head() && !b.is_head());
        assert_eq!(q.len("k"), 3);
        // Cancelling a middle waiter removes it without disturbing the order.
        drop(b);
        assert_eq!(q.len("k"), 2);
        let waiter = tokio::spawn(async move {
            c.until_head().await;
            c
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        drop(a);
        let c = tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .unwrap()
            .unwrap();
        assert!(c.is_head());
        drop(c);
        assert_eq!(q.len("k"), 0);
        assert!(q.keys.is_empty(), "empty queues are removed");
    }

    #[tokio::test]
    async fn wake_before_wait_is_not_lost() {
        let q = Arc::new(Queues::default());
        let a = q.join("k");
        let b = q.join("k");
        drop(a); // b is woken before it starts waiting
        tokio::time::timeout(Duration::from_secs(1), b.until_head())
            .await
            .unwrap();
    }

    #[test]
    fn held_at_is_shared_and_monotonic() {
        let q = Arc::new(Queues::default());
        let a = q.join("k");
        let b = q.join("k");
        a.saw_held(10);
        a.saw_held(7);
        assert_eq!(b.held_at(), Some(10));
        b.saw_released();
        assert_eq!(a.held_at(), None);
        assert_eq!(q.total(), 2);
    }
}
