//! `lockctl audit KEY`: a key's history from the audit store (ADR-21).

use crate::Failure;

/// Where to read and what to print.
#[derive(clap::Args)]
pub struct AuditArgs {
    /// A lock key, or `/s/<lease>` for a session.
    pub key: String,
    /// Only events observed in this last stretch (e.g. 30m, 12h, 7d).
    #[arg(long)]
    pub since: Option<String>,
    /// The audit store (PostgreSQL URL).
    #[arg(long, env = "LOCK_AUDIT_DB")]
    pub db: String,
    /// Print JSON lines instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// A duration like `30m`, `12h`, `7d` or `90s`, in milliseconds.
fn parse_since(s: &str) -> Option<i64> {
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit())?);
    let n: i64 = n.parse().ok()?;
    let ms = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    n.checked_mul(ms)
}

/// `lockctl audit KEY [--since D]`: the key's rows from the audit store.
pub async fn audit(args: AuditArgs) -> Result<(), Failure> {
    let AuditArgs {
        key,
        since,
        db,
        json,
    } = args;
    use lock_audit::store::{AuditStore, Postgres};
    let since_ms = match since.as_deref() {
        None => 0,
        Some(s) => {
            let back = parse_since(s)
                .ok_or_else(|| Failure::input(format!("--since {s:?}: give e.g. 30m, 12h, 7d")))?;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
            now - back
        }
    };
    let store = Postgres::connect(&db)
        .await
        .map_err(|e| Failure::unreachable(e.to_string()))?;
    let rows = store
        .history(&key, since_ms)
        .await
        .map_err(|e| Failure::unreachable(e.to_string()))?;
    if !json {
        println!(
            "{:<10} {:<24} {:<20} {:<48} {:<18} {:<14} DETAIL",
            "REVISION", "OBSERVED (UTC)", "EVENT", "HOLDER", "SESSION", "CLASS"
        );
    }
    for s in &rows {
        let r = &s.row;
        if json {
            let line = serde_json::json!({
                "cluster_id": s.cluster_id,
                "revision": r.revision,
                "observed_at_ms": s.observed_at_ms,
                "kind": r.kind.as_str(),
                "spiffe_id": r.spiffe_id,
                "session": r.session,
                "class": r.class,
                "detail": r.detail,
            });
            println!("{line}");
        } else {
            println!(
                "{:<10} {:<24} {:<20} {:<48} {:<18} {:<14} {}",
                r.revision,
                observed(s.observed_at_ms),
                r.kind.as_str(),
                r.spiffe_id,
                r.session,
                r.class,
                r.detail
            );
        }
    }
    Ok(())
}

fn observed(ms: i64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let f = time::macros::format_description!(
        "[year]-[month]-[day] [hour]:[minute]:[second].[subsecond digits:3]"
    );
    t.format(&f).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::parse_since;

    #[test]
    fn since_table() {
        let cases = [
            ("90s", Some(90_000)),
            ("30m", Some(1_800_000)),
            ("12h", Some(43_200_000)),
            ("7d", Some(604_800_000)),
            ("7", None),
            ("h", None),
            ("1w", None),
            ("-1h", None),
            ("99999999999999999d", None),
        ];
        for (s, want) in cases {
            assert_eq!(parse_since(s), want, "{s}");
        }
    }
}
