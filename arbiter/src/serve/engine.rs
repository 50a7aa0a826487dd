//! The engine: what the gRPC service calls, one method per lock.v1 operation. It holds the
//! parts (the etcd clusters, the registry, the session cache, the FIFO queues) and hands each
//! operation only the parts it needs:
//!
//! - each request goes to one cluster's sealed store (`clusters.rs`: the only one, or by
//!   tier, shard map and session tag);
//! - a grant is `grant.rs` (one transaction and its verdict), reached through `fifo.rs`
//!   (in-memory queues, the default) or `durable.rs` (queues in etcd);
//! - a release is `release.rs`; sessions and their renewals are `sessions.rs`;
//! - every etcd response on these paths has passed the seal in `store/sealed.rs`.

use crate::cluster::clusters::{Clusters, Route};
use crate::error::ArbiterError;
use crate::lock::Asked;
use crate::lock::grant::{Grant, Granter};
use crate::lock::release::{Heads, Releaser};
use crate::lock::sessions::{Keepers, Session, Sessions};
use crate::lock::shared::Mode;
use crate::lock::wait::queue::Queues;
use crate::ops::bugs::Bugs;
use crate::ops::drain::Drain;
use crate::ops::metrics::METRICS;
use crate::serve::observers::Observers;
use crate::store::etcd::Etcd;
use lock_config::registry::Fairness;
use lock_config::{FencingToken, LockKey, Registry};
use std::sync::Arc;
use std::time::Duration;

mod reads;
mod set;
pub use reads::Inspection;
pub use set::SetGranted;

/// Longest wait an Acquire may ask for; longer requests are capped.
pub const MAX_WAIT: Duration = Duration::from_secs(300);

pub struct Engine {
    /// The etcd cluster(s): one, or the coord cluster and entity shards (`clusters.rs`).
    clusters: Clusters,
    /// Swapped whole by a live reload (`registry_reload.rs`); each request reads one
    /// snapshot and keeps it to its end, so a reload applies to new requests only.
    registry: arc_swap::ArcSwap<Registry>,
    sessions: Sessions,
    queues: Arc<Queues>,
    /// Deliberate bugs for the release gate; empty outside debug builds told to inject.
    bugs: Bugs,
    /// Started at SIGTERM: waiters and new requests are answered DRAINING (`drain.rs`).
    drain: Drain,
    /// Open Observe streams against their limit (`observe.rs`).
    observers: Arc<Observers>,
}

impl Engine {
    /// Everything on one etcd cluster.
    pub fn new(etcd: Etcd, registry: Arc<Registry>, bugs: Bugs) -> Self {
        let clusters = Clusters::single(etcd, bugs.clone());
        Self::with_clusters(clusters, registry, bugs)
    }

    pub fn with_clusters(clusters: Clusters, registry: Arc<Registry>, bugs: Bugs) -> Self {
        METRICS.declare(registry.classes().map(|c| c.name));
        METRICS.describe(&registry);
        Self {
            clusters,
            registry: arc_swap::ArcSwap::new(registry),
            sessions: Sessions::default(),
            queues: Arc::new(Queues::default()),
            bugs,
            drain: Drain::default(),
            observers: Observers::new(crate::serve::observers::DEFAULT_MAX_OBSERVERS),
        }
    }

    /// At most `limit` Observe streams at once (`--max-observers`).
    pub fn with_max_observers(mut self, limit: usize) -> Self {
        self.observers = Observers::new(limit);
        self
    }

    pub fn observers(&self) -> &Arc<Observers> {
        &self.observers
    }

    /// The store that owns `key` (by its class's tier and the shard map).
    pub async fn store_for(&self, key: &LockKey) -> Result<Arc<crate::store::Store>, ArbiterError> {
        Ok(self.route(key).await?.store)
    }

    pub fn drain(&self) -> &Drain {
        &self.drain
    }

    pub fn bugs(&self) -> &Bugs {
        &self.bugs
    }

    /// Reads the epoch record and checks the seal (at start-up: a failure is logged, and
    /// requests are refused SEALED until the epoch is usable).
    /// Returns the epoch.
    pub async fn check_epoch(&self) -> Result<u16, ArbiterError> {
        self.clusters
            .coord()
            .resealed()
            .await
            .map(|sealed| sealed.epoch().record.epoch)
    }

    /// The registry new requests see.
    pub fn registry(&self) -> Arc<Registry> {
        self.registry.load_full()
    }

    /// A live reload: new requests get `registry`; requests in flight (waiters included)
    /// finish with the one they started with; queues, sessions and holds stay.
    pub fn replace_registry(&self, registry: Arc<Registry>) {
        METRICS.declare(registry.classes().map(|c| c.name));
        METRICS.describe(&registry);
        self.registry.store(registry);
    }

    fn granter<'a>(&'a self, route: &'a Route) -> Granter<'a> {
        Granter {
            store: &route.store,
            sessions: &self.sessions,
            bugs: &self.bugs,
        }
    }

    /// OpenSession: a session with the TTL of the key's class. Returns it and the class.
    pub async fn open_session(
        &self,
        identity: &str,
        instance: Option<String>,
        key: &LockKey,
    ) -> Result<(Session, String), ArbiterError> {
        let registry = self.registry();
        let class = registry.class_for(key).ok_or(ArbiterError::NoClass)?;
        let route = self.clusters.for_key(class.spec.tier, key).await?;
        let session = self
            .sessions
            .open(&route.store, identity, instance, class.ttl_seconds)
            .await?;
        Ok((session, class.name.to_owned()))
    }

    /// CloseSession: revokes the caller's own session (its holds go with it).
    pub async fn close_session(&self, identity: &str, lease: i64) -> Result<(), ArbiterError> {
        let route = self.clusters.for_lease(lease).await?;
        let session = self.sessions.owned(&route.store, lease, identity).await?;
        self.sessions.close(&route.store, &session).await
    }

    /// One KeepAlive renewal of the caller's own session; the remaining TTL.
    pub async fn renew(
        &self,
        identity: &str,
        lease: i64,
        keepers: &mut Keepers,
    ) -> Result<i64, ArbiterError> {
        let route = self.clusters.for_lease(lease).await?;
        self.sessions
            .renew(&route.store, lease, identity, keepers)
            .await
    }

    /// Acquire: grants `key` to the session, waiting up to `wait` (capped at [`MAX_WAIT`])
    /// in the key's queue when it is held (ADR-14, 15).
    pub async fn acquire(
        &self,
        identity: &str,
        key: &LockKey,
        lease: i64,
        wait: Duration,
        asked: Asked,
    ) -> Result<Grant, ArbiterError> {
        let registry = self.registry();
        let class = registry.class_for(key).ok_or(ArbiterError::NoClass)?;
        if asked == Asked::Shared && !class.spec.shared {
            return Err(ArbiterError::NotShared {
                class: class.name.to_owned(),
            });
        }
        // A semaphore's keys are taken by permit only, and only they are: an exclusive
        // acquire would be one more permit its caller cannot fence by.
        match (class.permits(), asked) {
            (Some(_), Asked::Permit) | (None, Asked::Exclusive | Asked::Shared) => {}
            (None, Asked::Permit) => {
                return Err(ArbiterError::NotSemaphore {
                    class: class.name.to_owned(),
                });
            }
            (Some(permits), _) => {
                return Err(ArbiterError::SemaphoreMode {
                    class: class.name.to_owned(),
                    permits,
                });
            }
        }
        let mode = match asked {
            Asked::Shared => Mode::Shared,
            Asked::Exclusive | Asked::Permit => Mode::Exclusive,
        };
        // Boxed, as every large await here: a queued waiter keeps this future alive, and
        // routing may connect to a shard (`waiter_footprint.rs` bounds the size).
        let route = Box::pin(self.clusters.for_key(class.spec.tier, key)).await?;
        let at = Box::pin(self.clusters.for_lease(lease)).await?;
        let session = Box::pin(self.sessions.owned(&at.store, lease, identity)).await?;
        if session.ttl_seconds != class.ttl_seconds {
            return Err(ArbiterError::WrongSessionTtl {
                class: class.name.to_owned(),
                ttl_seconds: class.ttl_seconds,
            });
        }
        if at.cluster != route.cluster {
            return Err(ArbiterError::WrongSessionPlace {
                cluster: route.cluster,
            });
        }
        let wait = wait.min(MAX_WAIT);
        let started = std::time::Instant::now();
        let granter = self.granter(&route);
        let acquire = async {
            if class.spec.shared {
                // Both modes of a shared class: `shared.rs` (validation keeps these memory).
                return Box::pin(crate::lock::shared::acquire(
                    &granter,
                    &session,
                    key,
                    &class,
                    mode,
                    wait,
                    &self.drain,
                ))
                .await;
            }
            match class.spec.fairness {
                Fairness::Durable => {
                    Box::pin(crate::lock::wait::durable::acquire(
                        &granter,
                        &session,
                        key,
                        &class,
                        wait,
                        &self.drain,
                    ))
                    .await
                }
                Fairness::Memory => {
                    let fifo = crate::lock::wait::fifo::acquire(
                        &granter,
                        &self.queues,
                        &session,
                        key,
                        &class,
                        wait,
                        &self.drain,
                    );
                    Box::pin(fifo).await
                }
            }
        };
        // A drain ends waits at their next waiting point, never a transaction in flight
        // (`wait_end.rs`): a waiter answered DRAINING holds nothing.
        let result = acquire.await;
        if result.is_ok() {
            METRICS.with_class(class.name, |m| {
                m.grants.inc();
                m.acquire_seconds.observe(started.elapsed().as_secs_f64());
            });
        }
        result
    }

    /// Release: ends the grant named by `token` (see `release.rs`); unless that handed the
    /// key on, wakes the key's next FIFO waiter here without waiting for the watch. Returns
    /// the store revision of the delete or the handoff.
    pub async fn release(
        &self,
        identity: &str,
        key: &LockKey,
        token: FencingToken,
        lease: Option<i64>,
        asked: Asked,
    ) -> Result<i64, ArbiterError> {
        // A key with no class (the registry changed under a hold) is released plainly.
        let registry = self.registry();
        let class = registry.class_for(key);
        if let Some(c) = &class
            && let Some(permits) = c.permits()
            && asked != Asked::Permit
        {
            return Err(ArbiterError::SemaphoreMode {
                class: c.name.to_owned(),
                permits,
            });
        }
        let mode = match asked {
            Asked::Shared => Mode::Shared,
            Asked::Exclusive | Asked::Permit => Mode::Exclusive,
        };
        let tier = class.as_ref().map(|c| c.spec.tier).unwrap_or_default();
        let route = self.clusters.for_key(tier, key).await?;
        if mode == Mode::Shared {
            // Released by its own record, whatever the class says now (a reload may have
            // taken `shared` away under a hold).
            let revision =
                crate::lock::shared::release(&self.granter(&route), identity, key, token, lease)
                    .await?;
            if let Some(c) = &class {
                METRICS.with_class(c.name, |m| {
                    m.releases.inc();
                });
            }
            return Ok(revision);
        }
        let heads = match &class {
            Some(c) if c.spec.fairness == Fairness::Durable => Heads::Durable { class: c.name },
            Some(_) => Heads::Fifo(&self.queues),
            None => Heads::None,
        };
        let releaser = Releaser {
            store: &route.store,
            sessions: &self.sessions,
            bugs: &self.bugs,
            heads,
            delay: class
                .as_ref()
                .is_some_and(|c| c.lock_delay_seconds().is_some()),
            // By the mode it was taken in, whatever the class says now (as for shared).
            permits: asked == Asked::Permit,
        };
        let outcome = releaser.release(identity, key, token, lease).await?;
        if let Some(c) = &class {
            METRICS.with_class(c.name, |m| {
                m.releases.inc();
                if outcome.handed_on {
                    m.handoffs.inc();
                }
            });
        }
        // A handoff left the key held by the head, which has its answer: waking the next
        // waiter would only cost it a doomed grant transaction.
        if !outcome.handed_on {
            self.queues.released(key.as_str());
        }
        Ok(outcome.revision)
    }
}

impl Engine {
    /// The cluster of `key` by its class's tier (a key with no class: the entity tier).
    async fn route(&self, key: &LockKey) -> Result<Route, ArbiterError> {
        let tier = self
            .registry()
            .class_for(key)
            .map(|c| c.spec.tier)
            .unwrap_or_default();
        self.clusters.for_key(tier, key).await
    }
}
