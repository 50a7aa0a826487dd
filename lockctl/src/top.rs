//! `lockctl top`: what is held now, read straight from the store as the operator (issue
//! 36; the read model is `lock-explorer`). Without `--namespace`, the namespaces that hold
//! any key and how many; with it, a page of that namespace's holds: holder identity and
//! instance, class, held for, the session's TTL left, durable waiters, shared holds, and
//! what looks wrong. Never a token. In a terminal it is a live view (`tui`, its keys in
//! `screen`); `--once` prints one table for scripts and runbooks.

mod screen;
mod tui;

use crate::Failure;
use crate::store::EtcdArgs;
use lock_config::registry::{Enforcement, Purpose};
use lock_explorer::{MAX_PAGE, Row, Rules};
use lock_store::registry_files;
use screen::Screen;
use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(clap::Args)]
pub struct TopArgs {
    /// The namespace whose held keys to show (without it: the namespaces holding any key).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Print one table and exit, for scripts and runbooks (without it: the live view, in
    /// a terminal).
    #[arg(long)]
    pub once: bool,
    /// The live view reads the store again every this many seconds.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub every: u64,
    /// Start after this key (or namespace): the table's last line names where to go on.
    #[arg(long)]
    pub after: Option<String>,
    /// Rows per page (1 to 500).
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// Order of the page's rows (a page is read in key order, then sorted).
    #[arg(long, value_enum, default_value_t = Sort::HeldFor)]
    pub sort: Sort,
    /// The registry: flags holds older than their class's `maxHoldSeconds` (or, for a
    /// class with none, `--held-over-ttls` times its TTL), and advisory classes past their
    /// waiver.
    #[arg(long)]
    pub registry: Option<PathBuf>,
    /// For classes without `maxHoldSeconds`: a hold older than this many TTLs is flagged.
    #[arg(long, default_value_t = 10)]
    pub held_over_ttls: u64,
    /// Flag sessions with fewer seconds than this left.
    #[arg(long, default_value_t = 3)]
    pub expiring_below: i64,
    /// JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub store: EtcdArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Sort {
    /// Longest held first.
    HeldFor,
    /// Most durable waiters first.
    Waiters,
    /// Key order.
    Key,
}

pub async fn top(args: TopArgs) -> Result<(), Failure> {
    if args.limit == 0 || args.limit > MAX_PAGE {
        return Err(Failure::input(format!(
            "--limit: 1 to {MAX_PAGE}, not {}",
            args.limit
        )));
    }
    let interactive = !args.once;
    if interactive && !std::io::stdout().is_terminal() {
        return Err(Failure::input(
            "lockctl top: not a terminal (--once prints one table for scripts)",
        ));
    }
    let rules = match &args.registry {
        Some(dir) => rules(dir, args.held_over_ttls, args.expiring_below)?,
        None => Rules {
            expiring_below_s: args.expiring_below,
            ..Rules::default()
        },
    };
    let etcd = crate::store::connect(&args.store.etcd, &args.store.tls).await?;
    let reader = Reader {
        rules,
        limit: args.limit,
    };
    let mut screen = Screen::new(args.namespace.clone(), args.sort);
    screen.after = args.after.clone();
    if interactive {
        return tui::run(etcd, screen, reader, Duration::from_secs(args.every)).await;
    }
    reader.read(&etcd, &mut screen).await?;
    match &screen.namespace {
        None if args.json => {
            let rows: Vec<_> = screen
                .namespaces
                .iter()
                .map(|(n, held, shared)| serde_json::json!({"namespace": n, "held": held, "shared": shared}))
                .collect();
            let out = serde_json::json!({"namespaces": rows, "next": screen.next});
            println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        }
        None => print_namespaces(&screen.namespaces, screen.next.as_deref()),
        Some(ns) if args.json => {
            let out = serde_json::json!({
                "namespace": ns,
                "rows": screen.rows,
                "next": screen.next,
            });
            println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        }
        Some(ns) => print_rows(ns, &screen.rows, screen.next.as_deref()),
    }
    Ok(())
}

/// Reads what the screen shows: the namespaces, or the namespace's page from its cursor.
pub struct Reader {
    rules: Rules,
    limit: usize,
}

impl Reader {
    async fn read(&self, etcd: &lock_store::Etcd, screen: &mut Screen) -> Result<(), Failure> {
        let failed = |e: lock_explorer::ReadError| match e {
            lock_explorer::ReadError::Store(e) => crate::store::failed(e),
            e => Failure::input(e.to_string()),
        };
        let after = screen.after.as_deref();
        let Some(ns) = &screen.namespace else {
            let (names, next) = lock_explorer::namespaces(etcd, after, self.limit)
                .await
                .map_err(failed)?;
            let mut counted = Vec::new();
            for n in names {
                let (held, shared) = lock_explorer::held_count(etcd, &n).await.map_err(failed)?;
                counted.push((n, held, shared));
            }
            screen.show_namespaces(counted, next);
            return Ok(());
        };
        let page = lock_explorer::page(etcd, ns, after, self.limit, now_ms())
            .await
            .map_err(failed)?;
        screen.show_rows(lock_explorer::rows(&page.seen, &self.rules), page.next);
        Ok(())
    }
}

/// A page is read in key order (exclusive holds, then shared), then ordered for reading.
fn sort_rows(rows: &mut [Row], sort: Sort) {
    match sort {
        Sort::HeldFor => rows.sort_by_key(|r| std::cmp::Reverse(r.held_for_ms)),
        Sort::Waiters => {
            rows.sort_by_key(|r| std::cmp::Reverse((r.durable_waiters, r.writer_waiting)));
        }
        Sort::Key => rows.sort_by(|a, b| a.key.cmp(&b.key)),
    }
}

/// The rules from the registry: each class's bound, and the advisory classes whose waiver
/// has expired.
fn rules(dir: &std::path::Path, ttls: u64, expiring_below: i64) -> Result<Rules, Failure> {
    let registry = registry_files::load(dir).map_err(|e| Failure::input(e.to_string()))?;
    let today = registry_files::today();
    let mut rules = Rules {
        expiring_below_s: expiring_below,
        ..Rules::default()
    };
    for c in registry.classes() {
        // The class's own bound where it declares one (the alert's), else N x its TTL.
        let bound_s = c
            .spec
            .max_hold_seconds
            .map_or(u64::from(c.ttl_seconds) * ttls, u64::from);
        rules.held_over_ms.insert(c.name.to_owned(), bound_s * 1000);
        let advisory =
            c.spec.purpose == Purpose::Correctness && c.spec.enforcement == Enforcement::Advisory;
        let expires = c.spec.waiver_expires.as_deref().unwrap_or_default();
        if advisory && lock_config::registry::Date::parse(expires).is_none_or(|d| d < today) {
            rules.waiver_expired.insert(c.name.to_owned());
        }
    }
    Ok(rules)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `1h02m`, `3m05s`, `12.3s`: short enough for a column.
pub fn human(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{:.1}s", ms as f64 / 1000.0),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

fn print_namespaces(names: &[(String, u64, u64)], next: Option<&str>) {
    // SHARED counts the shared run's entries: readers' holds and writers' waiting marks.
    println!("{:<32} {:>8} {:>8}", "NAMESPACE", "HELD", "SHARED");
    for (n, held, shared) in names {
        println!("{n:<32} {held:>8} {shared:>8}");
    }
    match next {
        Some(after) => println!("more namespaces: --after {after}"),
        None => println!("{} namespace(s) hold keys", names.len()),
    }
}

fn print_rows(ns: &str, rows: &[Row], next: Option<&str>) {
    let cells: Vec<[String; 10]> = rows
        .iter()
        .map(|r| {
            let flags: Vec<&str> = r.flags.iter().map(lock_explorer::Flag::word).collect();
            [
                r.key.clone(),
                r.mode.word().to_owned(),
                r.identity.clone(),
                r.instance.clone().unwrap_or_else(|| "-".into()),
                r.class.clone(),
                human(r.held_for_ms),
                r.ttl_left_s.map_or("gone".to_owned(), |s| format!("{s}s")),
                r.durable_waiters.to_string(),
                format!(
                    "{}{}",
                    r.shared_holders,
                    if r.writer_waiting { "+w" } else { "" }
                ),
                if flags.is_empty() {
                    "-".to_owned()
                } else {
                    flags.join(",")
                },
            ]
        })
        .collect();
    let head = [
        "KEY", "MODE", "HOLDER", "INSTANCE", "CLASS", "HELD FOR", "TTL LEFT", "WAITERS", "SHARED",
        "FLAGS",
    ];
    // Each column as wide as its widest cell: identities and instances vary by deployment.
    let mut width: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for row in &cells {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |row: &[String]| {
        let mut out = String::new();
        for (i, (c, w)) in row.iter().zip(&width).enumerate() {
            // Text left, numbers (held for .. shared) right; no padding after the last.
            match i {
                9 => out.push_str(c),
                5..=8 => out.push_str(&format!("{c:>w$}  ")),
                _ => out.push_str(&format!("{c:<w$}  ")),
            }
        }
        out
    };
    println!("{}", line(&head.map(str::to_owned)));
    for row in &cells {
        println!("{}", line(row));
    }
    match next {
        Some(after) => println!("more in {ns}: --after {after}"),
        None => println!("{} hold(s) in {ns}", rows.len()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn held_for_reads_at_a_glance() {
        for (ms, want) in [
            (0, "0.0s"),
            (12_345, "12.3s"),
            (185_000, "3m05s"),
            (3_725_000, "1h02m"),
        ] {
            assert_eq!(super::human(ms), want);
        }
    }
}
