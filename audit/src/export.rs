//! A day's audit rows to Parquet (the records keep a year of events; the database keeps
//! what is queried, the files what is retained). One file per UTC day,
//! `lock-audit-<day>.parquet`, to a local folder (written to a temp name and renamed, so a
//! reader never sees half a file) or to an object-store URL through `object_store`
//! (`s3://bucket/prefix` with the usual `AWS_*` variables, which also reach MinIO and other
//! S3-compatible stores; `file:///path`): one PUT of the whole file, which object stores
//! make visible atomically. Tested against a real S3-compatible server (moto) and
//! `file://`. Force releases also go, alone, to a write-once bucket kept seven years
//! (`Selection::Force`, `retention.rs`).

use crate::classify::Kind;
use crate::store::{AuditStore, Stored};
use parquet::basic::Compression;
use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::writer::SerializedFileWriter;
use parquet::record::RowAccessor;
use parquet::schema::parser::parse_message_type;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const SCHEMA: &str = "message lock_audit {
    REQUIRED BYTE_ARRAY cluster_id (UTF8);
    REQUIRED INT64 revision;
    REQUIRED BYTE_ARRAY key (UTF8);
    REQUIRED BYTE_ARRAY kind (UTF8);
    REQUIRED BYTE_ARRAY spiffe_id (UTF8);
    REQUIRED BYTE_ARRAY session (UTF8);
    REQUIRED BYTE_ARRAY class (UTF8);
    REQUIRED BYTE_ARRAY detail (UTF8);
    REQUIRED INT64 observed_at_ms (TIMESTAMP(MILLIS,true));
}";

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("not a day (YYYY-MM-DD): {0}")]
    Day(String),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}: unknown kind in the file")]
    Kind(String),
    #[error("object store: {0}")]
    Url(String),
}

/// `--day` as the UTC date it names: `YYYY-MM-DD` as given, or `yesterday` / `today`
/// relative to `now_unix_seconds`. The export CronJobs say `--day yesterday`: the images
/// carry no shell to compute a date with.
pub fn resolve_day(day: &str, now_unix_seconds: i64) -> Result<String, ExportError> {
    let back = match day {
        "today" => 0,
        "yesterday" => 1,
        _ => {
            day_bounds(day)?;
            return Ok(day.to_owned());
        }
    };
    let format = time::macros::format_description!("[year]-[month]-[day]");
    let date = time::OffsetDateTime::from_unix_timestamp(now_unix_seconds - back * 86_400)
        .map_err(|_| ExportError::Day(day.to_owned()))?
        .date();
    date.format(format)
        .map_err(|_| ExportError::Day(day.to_owned()))
}

/// The UTC day `YYYY-MM-DD` as [from, to) in milliseconds since the epoch.
pub fn day_bounds(day: &str) -> Result<(i64, i64), ExportError> {
    let format = time::macros::format_description!("[year]-[month]-[day]");
    let date = time::Date::parse(day, format).map_err(|_| ExportError::Day(day.to_owned()))?;
    let from = date.midnight().assume_utc().unix_timestamp() * 1000;
    Ok((from, from + 86_400_000))
}

/// Writes the rows observed on `day` to `dir/lock-audit-<day>.parquet`; returns the path
/// and the number of rows.
pub async fn export_day<S: AuditStore>(
    store: &S,
    day: &str,
    dir: &Path,
) -> Result<(PathBuf, usize), ExportError> {
    let (from, to) = day_bounds(day)?;
    let rows = store.between(from, to).await?;
    let path = dir.join(format!("lock-audit-{day}.parquet"));
    write(&path, &rows)?;
    Ok((path, rows.len()))
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> ExportError + '_ {
    move |source| ExportError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Writes `rows` as one row group.
pub fn write(path: &Path, rows: &[Stored]) -> Result<(), ExportError> {
    let tmp = path.with_extension("parquet.tmp");
    let file = std::fs::File::create(&tmp).map_err(io(&tmp))?;
    encode(file, rows)?;
    std::fs::rename(&tmp, path).map_err(io(path))?;
    Ok(())
}

/// Where an export goes: a local folder, or an object-store URL (`scheme://...`).
pub fn is_url(out: &str) -> bool {
    out.split_once("://").is_some_and(|(scheme, _)| {
        !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric())
    })
}

/// Which rows an export takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    /// Every row of the day: `lock-audit-<day>.parquet`, the year's archive.
    All,
    /// Force releases and their requests only: `lock-force-<day>.parquet`, for the
    /// write-once bucket that keeps them seven years (ADR-20).
    Force,
}

impl Selection {
    fn takes(self, kind: Kind) -> bool {
        match self {
            Selection::All => true,
            Selection::Force => matches!(kind, Kind::ForceRelease | Kind::ForceRequest),
        }
    }

    pub fn file_name(self, day: &str) -> String {
        match self {
            Selection::All => format!("lock-audit-{day}.parquet"),
            Selection::Force => format!("lock-force-{day}.parquet"),
        }
    }
}

/// Writes the rows observed on `day` to `<url>/lock-audit-<day>.parquet` in an object
/// store; returns the object's URL and the number of rows.
pub async fn export_day_to_url<S: AuditStore>(
    store: &S,
    day: &str,
    url: &str,
) -> Result<(String, usize), ExportError> {
    export_selection_to_url(store, day, url, Selection::All).await
}

/// [`export_day_to_url`] of the rows `selection` takes, under its file name.
pub async fn export_selection_to_url<S: AuditStore>(
    store: &S,
    day: &str,
    url: &str,
    selection: Selection,
) -> Result<(String, usize), ExportError> {
    let (bytes, n) = encode_selection(store, day, selection).await?;
    let parsed = url::Url::parse(url).map_err(|e| ExportError::Url(format!("{url}: {e}")))?;
    // Credentials and endpoints from the environment (AWS_ACCESS_KEY_ID, AWS_ENDPOINT...).
    // Lower-cased: parse_url_opts matches only object_store's lower-case keys and skips
    // the rest without a word (found against a real S3 server: the upper-case names were
    // ignored and it asked the EC2 metadata service for credentials).
    let env = std::env::vars().map(|(k, v)| (k.to_ascii_lowercase(), v));
    let (objects, prefix) = object_store::parse_url_opts(&parsed, env)
        .map_err(|e| ExportError::Url(format!("{url}: {e}")))?;
    let name = selection.file_name(day);
    let path = prefix.child(name.as_str());
    objects
        .put(&path, bytes.into())
        .await
        .map_err(|e| ExportError::Url(format!("{url}: {e}")))?;
    Ok((format!("{}/{name}", url.trim_end_matches('/')), n))
}

/// The Parquet file of the rows `selection` takes from `day`, and how many.
pub async fn encode_selection<S: AuditStore>(
    store: &S,
    day: &str,
    selection: Selection,
) -> Result<(Vec<u8>, usize), ExportError> {
    let (from, to) = day_bounds(day)?;
    let mut rows = store.between(from, to).await?;
    rows.retain(|r| selection.takes(r.row.kind));
    let mut bytes = Vec::new();
    encode(&mut bytes, &rows)?;
    Ok((bytes, rows.len()))
}

/// Parquet of `rows` into `sink`.
fn encode<W: std::io::Write + Send>(sink: W, rows: &[Stored]) -> Result<(), ExportError> {
    let file = sink;
    let schema = Arc::new(parse_message_type(SCHEMA)?);
    let props = Arc::new(
        WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .build(),
    );
    let mut writer = SerializedFileWriter::new(file, schema, props)?;
    let mut group = writer.next_row_group()?;
    let text = |f: fn(&Stored) -> &str| -> Vec<ByteArray> {
        rows.iter().map(|r| ByteArray::from(f(r))).collect()
    };
    let longs = |f: fn(&Stored) -> i64| -> Vec<i64> { rows.iter().map(f).collect() };
    enum Col {
        Text(Vec<ByteArray>),
        Long(Vec<i64>),
    }
    let columns = [
        Col::Text(text(|r| &r.cluster_id)),
        Col::Long(longs(|r| r.row.revision)),
        Col::Text(text(|r| &r.row.key)),
        Col::Text(text(|r| r.row.kind.as_str())),
        Col::Text(text(|r| &r.row.spiffe_id)),
        Col::Text(text(|r| &r.row.session)),
        Col::Text(text(|r| &r.row.class)),
        Col::Text(text(|r| &r.row.detail)),
        Col::Long(longs(|r| r.observed_at_ms)),
    ];
    for col in columns {
        let Some(mut w) = group.next_column()? else {
            break;
        };
        match col {
            Col::Text(v) => {
                w.typed::<ByteArrayType>().write_batch(&v, None, None)?;
            }
            Col::Long(v) => {
                w.typed::<Int64Type>().write_batch(&v, None, None)?;
            }
        }
        w.close()?;
    }
    group.close()?;
    writer.close()?;
    Ok(())
}

/// Reads an exported file back (tests, and anyone checking an archive).
pub fn read(path: &Path) -> Result<Vec<Stored>, ExportError> {
    let file = std::fs::File::open(path).map_err(io(path))?;
    let reader = SerializedFileReader::new(file)?;
    let mut out = Vec::new();
    for row in reader.get_row_iter(None)? {
        let row = row?;
        let kind = row.get_string(3)?.clone();
        out.push(Stored {
            cluster_id: row.get_string(0)?.clone(),
            observed_at_ms: row.get_timestamp_millis(8)?,
            row: crate::classify::Row {
                revision: row.get_long(1)?,
                key: row.get_string(2)?.clone(),
                kind: Kind::parse(&kind).ok_or(ExportError::Kind(kind))?,
                spiffe_id: row.get_string(4)?.clone(),
                session: row.get_string(5)?.clone(),
                class: row.get_string(6)?.clone(),
                detail: row.get_string(7)?.clone(),
            },
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::{Row, gap};

    #[test]
    fn a_day_is_a_date_or_relative_to_now() {
        // 2026-12-07T00:30:00Z
        let now = 1_796_603_400;
        for (given, want) in [
            ("2026-12-01", Some("2026-12-01")),
            ("today", Some("2026-12-07")),
            ("yesterday", Some("2026-12-06")),
            ("2026-13-01", None),
            ("tomorrow", None),
            ("", None),
        ] {
            assert_eq!(resolve_day(given, now).ok().as_deref(), want, "{given}");
        }
        // Across a year's end.
        assert_eq!(
            resolve_day("yesterday", 1_767_225_600).unwrap(),
            "2025-12-31"
        );
    }

    #[test]
    fn day_bounds_are_utc_days() {
        assert_eq!(
            day_bounds("1970-01-02").ok(),
            Some((86_400_000, 172_800_000))
        );
        assert!(day_bounds("2026-13-01").is_err());
        assert!(day_bounds("yesterday").is_err());
    }

    #[test]
    fn rows_survive_the_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.parquet");
        let rows = vec![
            Stored {
                cluster_id: "c1".into(),
                observed_at_ms: 1_700_000_000_123,
                row: Row {
                    revision: 42,
                    key: "pay/ledger/ünï".into(),
                    kind: Kind::Handoff,
                    spiffe_id: "spiffe://t/b".into(),
                    session: "b2".into(),
                    class: "ledger".into(),
                    detail: r#"{"from_session":"a1"}"#.into(),
                },
            },
            Stored {
                cluster_id: "c1".into(),
                observed_at_ms: 1_700_000_000_124,
                row: gap(43, 50),
            },
        ];
        write(&path, &rows).unwrap();
        assert_eq!(read(&path).unwrap(), rows);
        // Empty days write a valid, empty file.
        write(&path, &[]).unwrap();
        assert!(read(&path).unwrap().is_empty());
    }
}
