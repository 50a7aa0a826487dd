//! The arbiter's bound on Observe streams (`--max-observers`): a count of open streams
//! against a limit, a place per admitted stream that frees itself when dropped.

use crate::error::ArbiterError;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Streams one arbiter serves at once, unless `--max-observers` says otherwise.
pub const DEFAULT_MAX_OBSERVERS: usize = 1024;

/// The arbiter's count of open Observe streams against its limit.
pub struct Observers {
    limit: usize,
    open: AtomicUsize,
}

/// One admitted stream's place; dropping it frees the place.
pub struct Slot(Arc<Observers>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Observers {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            open: AtomicUsize::new(0),
        })
    }

    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    pub fn admit(self: &Arc<Self>) -> Result<Slot, ArbiterError> {
        let limit = self.limit;
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .map(|_| Slot(self.clone()))
            .map_err(|_| ArbiterError::ObserversFull { limit })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_admits_and_frees() {
        let o = Observers::new(2);
        let a = o.admit().unwrap();
        let _b = o.admit().unwrap();
        assert!(matches!(
            o.admit(),
            Err(ArbiterError::ObserversFull { limit: 2 })
        ));
        drop(a);
        assert_eq!(o.open(), 1);
        o.admit().unwrap();
    }
}
