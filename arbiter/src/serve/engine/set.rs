//! AcquireAll and ReleaseAll on the engine: a set refused before etcd when it cannot be one
//! transaction's (a shared or durable class, mixed TTLs, keys on more than one store), then
//! `lock/set.rs`; each released key's FIFO waiters woken here.

use super::{Engine, MAX_WAIT};
use crate::error::ArbiterError;
use crate::ops::metrics::METRICS;
use lock_config::registry::Fairness;
use lock_config::{FencingToken, KeySet};
use std::time::Duration;

/// A granted set: one token for every key, and the session's TTL.
#[derive(Debug, Clone, Copy)]
pub struct SetGranted {
    pub token: FencingToken,
    pub ttl_seconds: u32,
}

impl Engine {
    /// AcquireAll: grants every key of `set` to the session in one transaction, waiting up
    /// to `wait` (capped at [`MAX_WAIT`]) until all are free at once (`lock/set.rs`).
    /// Refused before etcd when the set cannot be one transaction's: a key of a durable
    /// class or of one with a lock-delay, keys on more than one store, or a class whose TTL is not the session's.
    pub async fn acquire_all(
        &self,
        identity: &str,
        set: &KeySet,
        lease: i64,
        wait: Duration,
    ) -> Result<SetGranted, ArbiterError> {
        let registry = self.registry();
        let at = Box::pin(self.clusters.for_lease(lease)).await?;
        let session = Box::pin(self.sessions.owned(&at.store, lease, identity)).await?;
        let mut classes = Vec::with_capacity(set.len());
        let mut routes = Vec::with_capacity(set.len());
        for key in set.keys() {
            let class = registry.class_for(key).ok_or(ArbiterError::NoClass)?;
            if class.spec.shared {
                return Err(ArbiterError::KeySetRefused {
                    why: "shared-class",
                    detail: format!(
                        "a key is of class {}, whose keys are also held shared; a set takes exclusive holds of plain classes only",
                        class.name
                    ),
                });
            }
            if class.spec.fairness == Fairness::Durable {
                return Err(ArbiterError::KeySetRefused {
                    why: "durable-class",
                    detail: format!(
                        "a key is of class {}, whose waiters queue in etcd (fairness: durable): a set would overtake them",
                        class.name
                    ),
                });
            }
            if class.permits().is_some() {
                return Err(ArbiterError::KeySetRefused {
                    why: "semaphore-class",
                    detail: format!(
                        "a key is of class {}, a semaphore: a set takes exclusive holds of plain classes only",
                        class.name
                    ),
                });
            }
            if class.lock_delay_seconds().is_some() {
                return Err(ArbiterError::KeySetRefused {
                    why: "delayed-class",
                    detail: format!(
                        "a key is of class {}, which has a lock-delay; a set would not honour it (take its keys one by one)",
                        class.name
                    ),
                });
            }
            if classes
                .first()
                .is_some_and(|c: &lock_config::registry::ResolvedClass<'_>| {
                    c.ttl_seconds != class.ttl_seconds
                })
            {
                return Err(ArbiterError::KeySetRefused {
                    why: "mixed-ttl",
                    detail: "its keys are of classes with different TTLs; one session (one TTL) holds a set".into(),
                });
            }
            if class.ttl_seconds != session.ttl_seconds {
                return Err(ArbiterError::WrongSessionTtl {
                    class: class.name.to_owned(),
                    ttl_seconds: class.ttl_seconds,
                });
            }
            routes.push(Box::pin(self.clusters.for_key(class.spec.tier, key)).await?);
            classes.push(class);
        }
        let route = &routes[0];
        if routes.iter().any(|r| r.cluster != route.cluster) {
            return Err(ArbiterError::KeySetRefused {
                why: "spans-stores",
                detail: "its keys live on more than one etcd cluster (tiers or shards); one transaction cannot hold them".into(),
            });
        }
        if at.cluster != route.cluster {
            return Err(ArbiterError::WrongSessionPlace {
                cluster: route.cluster.clone(),
            });
        }
        let wait = wait.min(MAX_WAIT);
        let started = std::time::Instant::now();
        let granter = self.granter(route);
        let granted = Box::pin(crate::lock::set::acquire(
            &granter,
            &session,
            set,
            &classes,
            wait,
            &self.drain,
        ))
        .await?;
        for class in &classes {
            METRICS.with_class(class.name, |m| {
                m.grants.inc();
                m.acquire_seconds.observe(started.elapsed().as_secs_f64());
            });
        }
        Ok(SetGranted {
            token: granted.token,
            ttl_seconds: session.ttl_seconds,
        })
    }

    /// ReleaseAll: ends the set grant `token` names on every key of `set` still that grant
    /// (`lock/set.rs`), and wakes each released key's FIFO waiters here.
    pub async fn release_all(
        &self,
        identity: &str,
        set: &KeySet,
        token: FencingToken,
        lease: Option<i64>,
    ) -> Result<crate::lock::set::SetReleased, ArbiterError> {
        let route = self.route(set.first()).await?;
        let granter = self.granter(&route);
        let released = crate::lock::set::release(&granter, identity, set, token, lease).await?;
        let registry = self.registry();
        for key in set
            .keys()
            .iter()
            .filter(|k| released.keys.iter().any(|r| r == k.as_str()))
        {
            if let Some(c) = registry.class_for(key) {
                METRICS.with_class(c.name, |m| {
                    m.releases.inc();
                });
            }
            self.queues.released(key.as_str());
        }
        Ok(released)
    }
}
