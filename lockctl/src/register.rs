//! `lockctl register`: the standing risk register (ADR-01).

use crate::Failure;
use lock_config::registry::Enforcement;
use lock_store::etcd_tls::EtcdTlsFiles;
use lock_store::{Etcd, registry_files};
use std::path::PathBuf;

/// The register's sources: the registry, and optionally etcd (holds now) and the arbiters
/// (grants since they started).
#[derive(clap::Args)]
pub struct RegisterArgs {
    pub dir: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Count the current holds of each class in this store.
    #[arg(long, value_delimiter = ',')]
    pub etcd: Vec<String>,
    #[command(flatten)]
    pub etcd_tls: EtcdTlsFiles,
    /// The arbiters' admin listeners (host:port): grants per class since their start,
    /// summed over them (`lock_arbiter_grants_total`).
    #[arg(long, value_delimiter = ',')]
    pub metrics: Vec<String>,
    /// The audit store (PostgreSQL URL): grants per class over the last `--audit-days`,
    /// counted from the audit trail (whatever arbiters restarted meanwhile).
    #[arg(long, env = "LOCK_AUDIT_DB")]
    pub audit_db: Option<String>,
    /// The window `--audit-db` counts over, in days.
    #[arg(long, default_value_t = 30)]
    pub audit_days: u32,
}

/// The risk register: advisory correctness classes, their owners and waivers, (with etcd)
/// how many holds each has now, and (with the arbiters' admin listeners) how many grants
/// each has had since those arbiters started.
pub async fn register(args: RegisterArgs) -> Result<(), Failure> {
    let RegisterArgs {
        dir,
        json,
        etcd,
        etcd_tls,
        metrics,
        audit_db,
        audit_days,
    } = args;
    use lock_config::registry::Purpose;
    let registry = registry_files::load(&dir).map_err(|e| Failure::input(e.to_string()))?;
    let today = registry_files::today();
    let holds = if etcd.is_empty() {
        None
    } else {
        Some(holds_by_class(&crate::store::connect(&etcd, &etcd_tls).await?).await?)
    };
    let grants = if metrics.is_empty() {
        None
    } else {
        let mut total = std::collections::HashMap::<String, u64>::new();
        for addr in &metrics {
            let text = lock_store::admin::scrape(addr)
                .await
                .map_err(Failure::unreachable)?;
            for (class, n) in lock_store::admin::grants_by_class(&text) {
                *total.entry(class).or_insert(0) += n;
            }
        }
        Some(total)
    };
    let audited = match &audit_db {
        None => None,
        Some(url) => Some(audited_grants(url, audit_days).await?),
    };
    let rows: Vec<serde_json::Value> = registry
        .classes()
        .filter(|c| {
            c.spec.purpose == Purpose::Correctness && c.spec.enforcement == Enforcement::Advisory
        })
        .map(|c| {
            let expires = c.spec.waiver_expires.clone().unwrap_or_default();
            let expired = lock_config::registry::Date::parse(&expires).is_none_or(|d| d < today);
            serde_json::json!({
                "class": c.name,
                "namespace": c.spec.namespace,
                "riskOwner": c.spec.risk_owner.clone().unwrap_or_default(),
                "waiverExpires": expires,
                "expired": expired,
                "holds": holds.as_ref().map(|h| h.get(c.name).copied().unwrap_or(0)),
                "grants": grants.as_ref().map(|g| g.get(c.name).copied().unwrap_or(0)),
                "auditedGrants": audited.as_ref().map(|g| g.get(c.name).copied().unwrap_or(0)),
            })
        })
        .collect();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).unwrap_or_default()
        );
        return Ok(());
    }
    println!(
        "{:<24} {:<12} {:<32} {:<12} {:<8} {:>6} {:>8} {:>8}",
        "CLASS", "NAMESPACE", "RISK OWNER", "WAIVER", "STATUS", "HOLDS", "GRANTS", "AUDITED"
    );
    for r in &rows {
        let count = |v: &serde_json::Value| v.as_i64().map_or("-".to_owned(), |n| n.to_string());
        println!(
            "{:<24} {:<12} {:<32} {:<12} {:<8} {:>6} {:>8} {:>8}",
            r["class"].as_str().unwrap_or_default(),
            r["namespace"].as_str().unwrap_or_default(),
            r["riskOwner"].as_str().unwrap_or_default(),
            r["waiverExpires"].as_str().unwrap_or_default(),
            if r["expired"].as_bool().unwrap_or(true) {
                "EXPIRED"
            } else {
                "ok"
            },
            count(&r["holds"]),
            count(&r["grants"]),
            count(&r["auditedGrants"]),
        );
    }
    println!(
        "{} advisory correctness class(es) on the register{}",
        rows.len(),
        if audit_db.is_some() {
            format!("; AUDITED: grants in the last {audit_days} days, from the audit trail")
        } else {
            String::new()
        }
    );
    Ok(())
}

async fn holds_by_class(store: &Etcd) -> Result<std::collections::HashMap<String, u64>, Failure> {
    let resp = store
        .range(
            lock_store::layout::HOLDER_PREFIX,
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .map_err(|e| Failure::unreachable(e.to_string()))?;
    let mut by_class = std::collections::HashMap::new();
    for kv in resp.kvs() {
        if let Some(h) = lock_store::layout::decode::<lock_store::layout::Holder>(kv.value()) {
            *by_class.entry(h.class).or_insert(0) += 1;
        }
    }
    Ok(by_class)
}

/// Grants per class over the last `days`, from the audit store.
async fn audited_grants(
    url: &str,
    days: u32,
) -> Result<std::collections::HashMap<String, i64>, Failure> {
    let db = lock_audit::store::Postgres::connect_reader(url)
        .await
        .map_err(|e| Failure::unreachable(format!("audit store: {e}")))?;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let since = now_ms.saturating_sub(i64::from(days) * 86_400_000);
    let counts = db
        .grants_by_class(since)
        .await
        .map_err(|e| Failure::unreachable(format!("audit store: {e}")))?;
    Ok(counts.into_iter().collect())
}
