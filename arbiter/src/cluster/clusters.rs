//! Which etcd cluster a request goes to (ADR-07 tiers, ADR-09 shards).
//!
//! One cluster (the default): everything is on it, as before. Sharded (`--shards`): the
//! `--etcd` cluster is the coord cluster — classes of `tier: coord`, the epoch allocator
//! and the shard map — and `tier: entity` keys live on the entity shard the map homes them
//! on. The arbiter holds one client (one `Store`: its own seal, epoch cache, group commit
//! and watch stream) per cluster; shard clients are connected from the map's endpoints on
//! first use, so a shard added by `lockctl shards add` needs no restart.
//!
//! Sessions are per cluster (a session is one etcd lease): their ids carry the cluster's
//! tag, so the keepalive, close and ownership checks go to the right one. An Acquire whose
//! session is on another cluster than the key is answered WRONG_SESSION_PLACE naming the
//! key's cluster; clients open a session for that key and retry, as for WRONG_SESSION_TTL.

use crate::error::ArbiterError;
use crate::ops::bugs::{Bug, Bugs};
use crate::store::etcd::Etcd;
use crate::store::etcd_tls::EtcdTlsFiles;
use crate::store::shard_map::DocCache;
use crate::store::{ShardRole, Store};
use dashmap::DashMap;
use lock_config::LockKey;
use lock_config::registry::Tier;
use lock_config::shards::{COORD, lease_tag, tag_of};
use lock_store::{Absent, MapError, StoreError};
use std::sync::Arc;
use std::time::Duration;

/// A request's cluster: its name (`coord`, or the shard's) and its store.
#[derive(Clone)]
pub struct Route {
    pub cluster: String,
    /// Shared, not copied: a store holds an etcd client (kilobytes), and a queued waiter's
    /// future keeps its route.
    pub store: Arc<Store>,
}

pub struct Clusters {
    coord: Arc<Store>,
    sharded: Option<Sharded>,
}

/// How to reach entity shards: the map document, and what a new client needs.
struct Sharded {
    doc: Arc<DocCache>,
    stores: DashMap<String, Arc<Store>>,
    /// Serialises first connections, so two requests do not open two clients to one shard.
    connecting: tokio::sync::Mutex<()>,
    timeout: Duration,
    tls: EtcdTlsFiles,
    bugs: Bugs,
}

impl Clusters {
    /// Everything on one cluster.
    pub fn single(etcd: Etcd, bugs: Bugs) -> Self {
        Self {
            coord: Arc::new(Store::new(etcd, bugs)),
            sharded: None,
        }
    }

    /// `coord` holds the coord tier and the shard map; entity shards are reached from the
    /// map's endpoints with the same etcd credential (`tls`) and call bound (`timeout`).
    /// Fails when the coord cluster has no shard map (`lockctl shards init`).
    pub async fn sharded(
        coord: Etcd,
        bugs: Bugs,
        timeout: Duration,
        tls: EtcdTlsFiles,
    ) -> Result<Self, ArbiterError> {
        let doc = DocCache::load(coord.clone(), bugs.has(Bug::ShardFenceOff)).await?;
        if doc.get().is_none() {
            return Err(ArbiterError::Store(StoreError::Absent(Absent::ShardMap)));
        }
        tokio::spawn(doc.clone().watch());
        Ok(Self {
            coord: Arc::new(Store::for_cluster(
                coord,
                bugs.clone(),
                lease_tag(COORD),
                None,
            )),
            sharded: Some(Sharded {
                doc,
                stores: DashMap::new(),
                connecting: tokio::sync::Mutex::new(()),
                timeout,
                tls,
                bugs,
            }),
        })
    }

    /// The coord cluster (the only one when not sharded).
    pub fn coord(&self) -> &Store {
        &self.coord
    }

    fn coord_route(&self) -> Route {
        Route {
            cluster: COORD.to_owned(),
            store: self.coord.clone(),
        }
    }

    /// Where `key` of a class of `tier` lives now: the coord cluster, or its shard by the
    /// map this arbiter holds. Grants re-check on the shard itself (`Store::admit`).
    pub async fn for_key(&self, tier: Tier, key: &LockKey) -> Result<Route, ArbiterError> {
        let Some(sharded) = &self.sharded else {
            return Ok(self.coord_route());
        };
        if tier == Tier::Coord {
            return Ok(self.coord_route());
        }
        let doc =
            match sharded.doc.get() {
                Some(d) => d,
                None => sharded.doc.refresh().await?.ok_or_else(|| {
                    ArbiterError::Sealed("no shard map on the coord cluster".into())
                })?,
            };
        let name = doc.current.shard_of(key.as_str()).to_owned();
        sharded.store(&name).await.map(|store| Route {
            cluster: name,
            store,
        })
    }

    /// The cluster of session `lease`, by its tag. An id no cluster here tags is no
    /// session (answered like an expired one).
    pub async fn for_lease(&self, lease: i64) -> Result<Route, ArbiterError> {
        let Some(sharded) = &self.sharded else {
            return Ok(self.coord_route());
        };
        let tag = tag_of(lease);
        if tag == lease_tag(COORD) {
            return Ok(self.coord_route());
        }
        let mut doc = sharded.doc.get();
        for refreshed in [false, true] {
            if refreshed {
                doc = sharded.doc.refresh().await?;
            }
            let name = doc
                .as_deref()
                .and_then(|d| d.shards().find(|s| lease_tag(&s.name) == tag))
                .map(|s| s.name.clone());
            if let Some(name) = name {
                let store = sharded.store(&name).await?;
                return Ok(Route {
                    cluster: name,
                    store,
                });
            }
        }
        Err(ArbiterError::SessionNotFound)
    }

    /// Every cluster this arbiter has a client for (health, start-up checks).
    pub fn all(&self) -> Vec<Route> {
        let mut out = vec![self.coord_route()];
        if let Some(sharded) = &self.sharded {
            out.extend(sharded.stores.iter().map(|e| Route {
                cluster: e.key().clone(),
                store: e.value().clone(),
            }));
        }
        out
    }
}

impl Sharded {
    /// The store of shard `name`, connected on first use from the map's endpoints.
    async fn store(&self, name: &str) -> Result<Arc<Store>, ArbiterError> {
        if let Some(s) = self.stores.get(name) {
            return Ok(s.clone());
        }
        let _one = self.connecting.lock().await;
        if let Some(s) = self.stores.get(name) {
            return Ok(s.clone());
        }
        let endpoints = self
            .doc
            .get()
            .and_then(|d| d.shards().find(|s| s.name == name).cloned())
            .map(|s| s.endpoints)
            .filter(|e| !e.is_empty())
            .ok_or_else(|| {
                ArbiterError::Store(StoreError::Map(MapError::NoEndpoints(name.to_owned())))
            })?;
        let tls = crate::store::etcd_tls::load(&endpoints, &self.tls)?;
        let etcd =
            crate::store::calls::connect_etcd(&endpoints, self.timeout, tls.as_ref()).await?;
        tracing::info!(shard = name, ?endpoints, "connected to entity shard");
        let store = Arc::new(Store::for_cluster(
            etcd,
            self.bugs.clone(),
            lease_tag(name),
            Some(ShardRole {
                name: name.to_owned(),
                doc: self.doc.clone(),
            }),
        ));
        self.stores.insert(name.to_owned(), store.clone());
        Ok(store)
    }
}
