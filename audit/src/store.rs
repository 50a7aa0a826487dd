//! Where audit rows live (ADR-21): PostgreSQL here (the records accept it up to tens of
//! millions of events; ClickHouse at larger scale is not installable here), behind a small
//! trait so another store is one impl. Inserts are idempotent on (cluster, revision, key):
//! a tailer that replays revisions after a restart or a failover changes nothing.

use crate::classify::{Kind, Row};
use std::future::Future;
use tokio_postgres::Client;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("audit store: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    #[error("audit store: row with unknown kind {0:?}")]
    UnknownKind(String),
}

/// A stored row with the cluster it came from and when the tailer saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub cluster_id: String,
    pub row: Row,
    /// When the tailer recorded it (milliseconds since the epoch): etcd events carry no time.
    pub observed_at_ms: i64,
}

pub trait AuditStore {
    /// Inserts `rows`; a row already present (same cluster, revision, key) is left as it
    /// is. Returns how many were new.
    fn insert(
        &self,
        cluster_id: &str,
        rows: &[Row],
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;
    /// The last revision every row up to which is stored.
    fn checkpoint(
        &self,
        cluster_id: &str,
    ) -> impl Future<Output = Result<Option<i64>, StoreError>> + Send;
    fn save_checkpoint(
        &self,
        cluster_id: &str,
        revision: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// A key's rows (lock key, or `/s/<lease>`), oldest first, observed at or after `since_ms`.
    fn history(
        &self,
        key: &str,
        since_ms: i64,
    ) -> impl Future<Output = Result<Vec<Stored>, StoreError>> + Send;
    /// Every row observed in [from_ms, to_ms), in (cluster, revision, key) order.
    fn between(
        &self,
        from_ms: i64,
        to_ms: i64,
    ) -> impl Future<Output = Result<Vec<Stored>, StoreError>> + Send;
}

pub struct Postgres {
    client: Client,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS lock_audit (
    cluster_id  text   NOT NULL,
    revision    bigint NOT NULL,
    key         text   NOT NULL,
    kind        text   NOT NULL,
    spiffe_id   text   NOT NULL,
    session     text   NOT NULL,
    class       text   NOT NULL,
    detail      text   NOT NULL,
    observed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster_id, revision, key)
);
CREATE INDEX IF NOT EXISTS lock_audit_key ON lock_audit (key, observed_at);
CREATE INDEX IF NOT EXISTS lock_audit_observed ON lock_audit (observed_at);
CREATE TABLE IF NOT EXISTS lock_audit_checkpoint (
    cluster_id text   PRIMARY KEY,
    revision   bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);";

impl Postgres {
    /// Connects (a `postgres://` URL) and creates the tables if absent.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let store = Self::connect_reader(url).await?;
        store.client.batch_execute(SCHEMA).await?;
        Ok(store)
    }

    /// Connects without touching the schema: for readers (the risk register, `lockctl
    /// audit`) whose database user may only read.
    pub async fn connect_reader(url: &str) -> Result<Self, StoreError> {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::warn!(error = %e, "audit store connection ended");
            }
        });
        Ok(Self { client })
    }

    /// Grants per class (a hold granted by its own transaction or handed on by a release)
    /// observed since `since_ms`: the risk register's count (ADR-01), whatever arbiters
    /// restarted meanwhile.
    pub async fn grants_by_class(&self, since_ms: i64) -> Result<Vec<(String, i64)>, StoreError> {
        let rows = self
            .client
            .query(
                "SELECT class, count(*) FROM lock_audit
                 WHERE kind IN ($1, $2) AND observed_at >= to_timestamp($3::bigint / 1000.0)
                 GROUP BY class ORDER BY class",
                &[&Kind::Grant.as_str(), &Kind::Handoff.as_str(), &since_ms],
            )
            .await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// A key's latest `limit` rows, newest first: the explorer's key page (a bounded read
    /// however busy the key).
    pub async fn recent(&self, key: &str, limit: i64) -> Result<Vec<Stored>, StoreError> {
        let rows = self
            .client
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM lock_audit WHERE key = $1
                     ORDER BY observed_at DESC, revision DESC LIMIT $2"
                ),
                &[&key, &limit],
            )
            .await?;
        rows.iter().map(Self::stored).collect()
    }

    fn stored(r: &tokio_postgres::Row) -> Result<Stored, StoreError> {
        let kind: String = r.get("kind");
        Ok(Stored {
            cluster_id: r.get("cluster_id"),
            observed_at_ms: r.get("observed_ms"),
            row: Row {
                revision: r.get("revision"),
                key: r.get("key"),
                kind: Kind::parse(&kind).ok_or(StoreError::UnknownKind(kind))?,
                spiffe_id: r.get("spiffe_id"),
                session: r.get("session"),
                class: r.get("class"),
                detail: r.get("detail"),
            },
        })
    }
}

const COLUMNS: &str = "cluster_id, revision, key, kind, spiffe_id, session, class, detail, \
     (extract(epoch from observed_at) * 1000)::bigint AS observed_ms";

impl AuditStore for Postgres {
    async fn insert(&self, cluster_id: &str, rows: &[Row]) -> Result<u64, StoreError> {
        if rows.is_empty() {
            return Ok(0);
        }
        // One statement for the batch: unnest the columns.
        let mut cols: [Vec<String>; 6] = Default::default();
        let mut revisions = Vec::with_capacity(rows.len());
        for r in rows {
            revisions.push(r.revision);
            for (col, v) in cols.iter_mut().zip([
                &r.key,
                &r.kind.as_str().to_owned(),
                &r.spiffe_id,
                &r.session,
                &r.class,
                &r.detail,
            ]) {
                col.push(v.clone());
            }
        }
        let [keys, kinds, ids, sessions, classes, details] = &cols;
        let n = self
            .client
            .execute(
                "INSERT INTO lock_audit (cluster_id, revision, key, kind, spiffe_id, session, class, detail)
                 SELECT $1, * FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[])
                 ON CONFLICT (cluster_id, revision, key) DO NOTHING",
                &[&cluster_id, &revisions, keys, kinds, ids, sessions, classes, details],
            )
            .await?;
        Ok(n)
    }

    async fn checkpoint(&self, cluster_id: &str) -> Result<Option<i64>, StoreError> {
        let row = self
            .client
            .query_opt(
                "SELECT revision FROM lock_audit_checkpoint WHERE cluster_id = $1",
                &[&cluster_id],
            )
            .await?;
        Ok(row.map(|r| r.get(0)))
    }

    async fn save_checkpoint(&self, cluster_id: &str, revision: i64) -> Result<(), StoreError> {
        // Never backwards: a deposed tailer's late save cannot undo its successor's.
        self.client
            .execute(
                "INSERT INTO lock_audit_checkpoint (cluster_id, revision) VALUES ($1, $2)
                 ON CONFLICT (cluster_id) DO UPDATE
                 SET revision = GREATEST(lock_audit_checkpoint.revision, EXCLUDED.revision),
                     updated_at = now()",
                &[&cluster_id, &revision],
            )
            .await?;
        Ok(())
    }

    async fn history(&self, key: &str, since_ms: i64) -> Result<Vec<Stored>, StoreError> {
        let rows = self
            .client
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM lock_audit
                     WHERE key = $1 AND observed_at >= to_timestamp($2::bigint / 1000.0)
                     ORDER BY cluster_id, revision"
                ),
                &[&key, &since_ms],
            )
            .await?;
        rows.iter().map(Self::stored).collect()
    }

    async fn between(&self, from_ms: i64, to_ms: i64) -> Result<Vec<Stored>, StoreError> {
        let rows = self
            .client
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM lock_audit
                     WHERE observed_at >= to_timestamp($1::bigint / 1000.0)
                       AND observed_at < to_timestamp($2::bigint / 1000.0)
                     ORDER BY cluster_id, revision, key"
                ),
                &[&from_ms, &to_ms],
            )
            .await?;
        rows.iter().map(Self::stored).collect()
    }
}
