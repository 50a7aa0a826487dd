//! The reference fence for PostgreSQL (ADR-16), and two deliberately broken fences the
//! pause-test kit must catch.
//!
//! The reference is one statement: the check and the write are the same `UPDATE`, and the
//! comparison is strictly-less, so each token writes a record at most once (a replayed
//! delivery is refused too). Copy [`REFERENCE_SCHEMA`] and [`REFERENCE_WRITE`]:
//!
//! ```sql
//! UPDATE fenced_resource SET value = $2, fence = $3 WHERE id = $1 AND fence < $3
//! ```
//!
//! `fence` is a `BIGINT`: tokens are below 2^63 by construction. 0 rows updated means a newer
//! holder has written: stop, the lock is lost.

use tokio_postgres::Client;

pub const REFERENCE_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS fenced_resource (
    id BIGINT PRIMARY KEY,
    value TEXT NOT NULL,
    fence BIGINT NOT NULL DEFAULT 0
)";

/// The guarded write and its fence in one statement.
pub const REFERENCE_WRITE: &str =
    "UPDATE fenced_resource SET value = $2, fence = $3 WHERE id = $1 AND fence < $3";

/// How a resource applies the fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fence {
    /// The reference: one statement, strictly-less.
    Reference,
    /// Broken: checks the fence in one statement and writes in another. A holder frozen
    /// between the two writes after a newer holder.
    SplitCheckThenWrite,
    /// Broken: `fence <= $token`, so a replayed delivery with a used token is accepted.
    LessOrEqual,
    /// The owner's own statements on the owner's own table ([`OwnerSql`]): the kit drives
    /// the pause against the write path the service really uses.
    Owner,
}

/// The resource owner's statements, for `Fence::Owner`. Parameters: the write takes
/// `$1` the record id (BIGINT), `$2` the value (TEXT), `$3` the token (BIGINT) and accepts
/// by updating one row; the read takes `$1` and returns (value TEXT, token BIGINT); the
/// reset takes `$1` and `$2` and leaves the record holding `$2` under token 0 (creating it
/// if needed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnerSql {
    pub write: String,
    pub read: String,
    pub reset: String,
}

/// Creates the table (once: concurrent `CREATE TABLE IF NOT EXISTS` races in PostgreSQL).
pub async fn create_schema(db: &Client) -> Result<(), tokio_postgres::Error> {
    db.execute(REFERENCE_SCHEMA, &[]).await.map(drop)
}

const RESET: &str = "INSERT INTO fenced_resource (id, value, fence) VALUES ($1, $2, 0)
         ON CONFLICT (id) DO UPDATE SET value = $2, fence = 0";
const READ: &str = "SELECT value, fence FROM fenced_resource WHERE id = $1";

/// Creates or resets the record `id` to `initial` with fence 0 (the owner's reset for
/// `Fence::Owner`).
pub async fn prepare(
    db: &Client,
    owner: &OwnerSql,
    fence: Fence,
    id: i64,
    initial: &str,
) -> Result<(), tokio_postgres::Error> {
    let sql = if fence == Fence::Owner {
        owner.reset.as_str()
    } else {
        RESET
    };
    db.execute(sql, &[&id, &initial]).await?;
    Ok(())
}

/// The record's value and fence.
pub async fn read(
    db: &Client,
    owner: &OwnerSql,
    fence: Fence,
    id: i64,
) -> Result<(String, i64), tokio_postgres::Error> {
    let sql = if fence == Fence::Owner {
        owner.read.as_str()
    } else {
        READ
    };
    let row = db.query_one(sql, &[&id]).await?;
    Ok((row.try_get(0)?, row.try_get(1)?))
}

/// A fenced write of `value` under `token`. `checked` runs after the fence was checked and
/// before the write lands (where the kit freezes the holder); for the one-statement fences
/// that is before the statement. Ok(true): the resource accepted the write.
pub async fn write<F: std::future::Future<Output = ()>>(
    db: &Client,
    owner: &OwnerSql,
    fence: Fence,
    id: i64,
    value: &str,
    token: i64,
    checked: F,
) -> Result<bool, tokio_postgres::Error> {
    match fence {
        Fence::Reference => {
            checked.await;
            Ok(db.execute(REFERENCE_WRITE, &[&id, &value, &token]).await? == 1)
        }
        Fence::Owner => {
            checked.await;
            Ok(db
                .execute(owner.write.as_str(), &[&id, &value, &token])
                .await?
                == 1)
        }
        Fence::LessOrEqual => {
            checked.await;
            let n = db
                .execute(
                    "UPDATE fenced_resource SET value = $2, fence = $3 WHERE id = $1 AND fence <= $3",
                    &[&id, &value, &token],
                )
                .await?;
            Ok(n == 1)
        }
        Fence::SplitCheckThenWrite => {
            let (_, current) = read(db, owner, fence, id).await?;
            if current >= token {
                return Ok(false);
            }
            checked.await;
            let n = db
                .execute(
                    "UPDATE fenced_resource SET value = $2, fence = $3 WHERE id = $1",
                    &[&id, &value, &token],
                )
                .await?;
            Ok(n == 1)
        }
    }
}
