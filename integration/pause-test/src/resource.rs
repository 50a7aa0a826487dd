//! The resource a kit run proves: a PostgreSQL table or an S3 bucket, with the fence under
//! test. The kit's cycle (`main.rs`) is the same for both; only these four calls differ.

use crate::fence::{self, Fence, OwnerSql};
use crate::s3_fence::{S3Fence, S3Store};
use anyhow::{Context as _, bail};
use std::future::Future;

/// A fence by its `--fence` name: which resource it is for, and how it applies the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pg(Fence),
    S3(S3Fence),
}

/// Every fence the kit knows, by name; the first of each resource is its reference.
pub const KINDS: [(&str, Kind); 8] = [
    ("reference", Kind::Pg(Fence::Reference)),
    ("split", Kind::Pg(Fence::SplitCheckThenWrite)),
    ("le", Kind::Pg(Fence::LessOrEqual)),
    ("owner", Kind::Pg(Fence::Owner)),
    ("s3", Kind::S3(S3Fence::Reference)),
    ("s3-unconditional", Kind::S3(S3Fence::Unconditional)),
    ("s3-client-compare", Kind::S3(S3Fence::ClientCompare)),
    ("s3-etag-of-value", Kind::S3(S3Fence::EtagOfValue)),
];

impl Kind {
    pub fn name(self) -> &'static str {
        KINDS
            .iter()
            .find(|(_, k)| *k == self)
            .map_or("?", |(n, _)| n)
    }
}

impl std::str::FromStr for Kind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        KINDS
            .iter()
            .find(|(n, _)| *n == s)
            .map(|(_, k)| *k)
            .ok_or_else(|| {
                let names: Vec<&str> = KINDS.iter().map(|(n, _)| *n).collect();
                format!("unknown fence {s:?} ({})", names.join(", "))
            })
    }
}

/// Where the records live: `--db` for PostgreSQL, `--s3` and `--bucket` for S3.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Target {
    /// PostgreSQL connection string (the PostgreSQL fences).
    #[arg(long)]
    pub db: Option<String>,
    /// S3-compatible endpoint URL, path-style (the s3 fences); credentials from
    /// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, region from AWS_REGION.
    #[arg(long)]
    pub s3: Option<String>,
    /// The bucket (created when missing).
    #[arg(long, default_value = "fenced-resource")]
    pub bucket: String,
    /// `--fence owner`: the service's own guarded write ($1 id, $2 value, $3 token; one
    /// row updated = accepted).
    #[arg(long)]
    pub write_sql: Option<String>,
    /// `--fence owner`: reads a record ($1 id) as (value TEXT, token BIGINT).
    #[arg(long)]
    pub read_sql: Option<String>,
    /// `--fence owner`: resets a record ($1 id) to a value ($2) under token 0.
    #[arg(long)]
    pub reset_sql: Option<String>,
}

impl Target {
    /// The flags that name this target again (for the holder processes).
    pub fn args(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(db) = &self.db {
            out.extend(["--db".into(), db.clone()]);
        }
        if let Some(s3) = &self.s3 {
            out.extend([
                "--s3".into(),
                s3.clone(),
                "--bucket".into(),
                self.bucket.clone(),
            ]);
        }
        for (flag, sql) in [
            ("--write-sql", &self.write_sql),
            ("--read-sql", &self.read_sql),
            ("--reset-sql", &self.reset_sql),
        ] {
            if let Some(sql) = sql {
                out.extend([flag.into(), sql.clone()]);
            }
        }
        out
    }

    /// The owner's statements, all three or none.
    fn owner_sql(&self, fence: Fence) -> anyhow::Result<OwnerSql> {
        match (&self.write_sql, &self.read_sql, &self.reset_sql) {
            (Some(w), Some(r), Some(z)) if fence == Fence::Owner => Ok(OwnerSql {
                write: w.clone(),
                read: r.clone(),
                reset: z.clone(),
            }),
            (None, None, None) if fence != Fence::Owner => Ok(OwnerSql::default()),
            _ if fence == Fence::Owner => {
                bail!("--fence owner needs --write-sql, --read-sql and --reset-sql")
            }
            _ => bail!("--write-sql, --read-sql and --reset-sql go with --fence owner"),
        }
    }
}

pub enum Resource {
    Pg {
        db: tokio_postgres::Client,
        fence: Fence,
        owner: OwnerSql,
    },
    S3 {
        store: S3Store,
        fence: S3Fence,
    },
}

impl Resource {
    pub async fn open(kind: Kind, target: &Target) -> anyhow::Result<Self> {
        match kind {
            Kind::Pg(fence) => {
                let url = target.db.as_deref().context("this fence needs --db")?;
                let owner = target.owner_sql(fence)?;
                Ok(Resource::Pg {
                    db: crate::connect(url).await?,
                    fence,
                    owner,
                })
            }
            Kind::S3(fence) => {
                let url = target.s3.as_deref().context("this fence needs --s3")?;
                Ok(Resource::S3 {
                    store: S3Store::new(url, &target.bucket)?,
                    fence,
                })
            }
        }
    }

    /// The table or the bucket, once per run (the owner's table is the owner's).
    pub async fn setup(&self) -> anyhow::Result<()> {
        match self {
            Resource::Pg {
                fence: Fence::Owner,
                ..
            } => Ok(()),
            Resource::Pg { db, .. } => Ok(fence::create_schema(db).await?),
            Resource::S3 { store, .. } => store.create_bucket().await,
        }
    }

    /// Creates or resets record `id` to `initial` under token 0.
    pub async fn prepare(&self, id: i64, initial: &str) -> anyhow::Result<()> {
        match self {
            Resource::Pg { db, fence, owner } => {
                Ok(fence::prepare(db, owner, *fence, id, initial).await?)
            }
            Resource::S3 { store, fence } => store.prepare(*fence, id, initial).await,
        }
    }

    /// A fenced write; `checked` runs between the fence's check and the write landing.
    pub async fn write<F: Future<Output = ()>>(
        &self,
        id: i64,
        value: &str,
        token: i64,
        checked: F,
    ) -> anyhow::Result<bool> {
        match self {
            Resource::Pg { db, fence, owner } => {
                Ok(fence::write(db, owner, *fence, id, value, token, checked).await?)
            }
            Resource::S3 { store, fence } => store.write(*fence, id, value, token, checked).await,
        }
    }

    /// The record's value and token.
    pub async fn read(&self, id: i64) -> anyhow::Result<(String, i64)> {
        match self {
            Resource::Pg { db, fence, owner } => Ok(fence::read(db, owner, *fence, id).await?),
            Resource::S3 { store, .. } => store.read(id).await,
        }
    }
}

/// Refuses a target that names both resources or neither.
pub fn check(target: &Target) -> anyhow::Result<()> {
    match (&target.db, &target.s3) {
        (Some(_), Some(_)) => bail!("--db and --s3 name two resources: one run proves one"),
        (None, None) => bail!("name the resource: --db (PostgreSQL) or --s3 (S3-compatible)"),
        _ => Ok(()),
    }
}
