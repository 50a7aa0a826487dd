//! Commands that work on files or talk to etcd directly (operators only).

use crate::Failure;
use lock_arbiter::etcd_tls::EtcdTlsFiles;
use lock_arbiter::{ArbiterError, Etcd, epoch, registry_files};
use lock_config::FilterConfig;
use lock_config::registry::Enforcement;
use std::path::Path;
use std::time::Duration;

pub(crate) async fn connect(etcd: &[String], tls: &EtcdTlsFiles) -> Result<Etcd, Failure> {
    let tls = lock_arbiter::etcd_tls::load(etcd, tls).map_err(|e| Failure::input(e.to_string()))?;
    Etcd::connect(etcd, Duration::from_secs(5), tls.as_ref())
        .await
        .map_err(|e| Failure::unreachable(format!("etcd: {e}")))
}

/// `lockctl roles show|apply`: reads etcd's users and roles, prints the plan to reach
/// `etcd_roles::ROLES`/`USERS`, and with `apply` makes it and enables auth.
pub async fn roles(etcd: &[String], tls: &EtcdTlsFiles, apply: bool) -> Result<(), Failure> {
    use lock_arbiter::etcd_roles;
    let store = connect(etcd, tls).await?;
    let mut auth = store.auth_client();
    let failed = |e: etcd_client::Error| Failure::unreachable(format!("etcd: {e}"));
    let current = etcd_roles::read(&mut auth).await.map_err(failed)?;
    for (user, roles) in &current.users {
        let roles: Vec<&str> = roles.iter().map(String::as_str).collect();
        let ours = etcd_roles::USERS.iter().any(|u| u.name == user);
        println!(
            "user {user}: {}{}",
            roles.join(", "),
            if ours { "" } else { "  (not managed here)" }
        );
    }
    let changes = etcd_roles::plan(&current, etcd_roles::ROLES, etcd_roles::USERS);
    if changes.is_empty() {
        println!("users and roles as wanted");
    }
    for c in &changes {
        println!("{}{c}", if apply { "" } else { "would " });
    }
    if apply {
        etcd_roles::apply(&mut auth, &changes)
            .await
            .map_err(failed)?;
        println!("auth enabled");
    }
    Ok(())
}

pub async fn epoch_advance(
    etcd: &[String],
    tls: &EtcdTlsFiles,
    from: u16,
    next: Option<u16>,
) -> Result<(), Failure> {
    let store = connect(etcd, tls).await?;
    let advanced = match next {
        Some(next) => epoch::advance_to(&store, from, next).await,
        None => epoch::advance(&store, from).await,
    };
    match advanced {
        Ok(rec) => {
            println!(
                "epoch advanced {from} -> {}, bound to cluster {}; every hold and durable waiter deleted",
                rec.epoch, rec.cluster_id
            );
            Ok(())
        }
        Err(ArbiterError::NoQuorum) => {
            Err(Failure::unreachable("etcd unreachable or without quorum"))
        }
        Err(e) => Err(Failure::refused(e.to_string())),
    }
}

pub struct RestoreArgs {
    pub snapshot: std::path::PathBuf,
    pub data_dir: std::path::PathBuf,
    pub name: String,
    pub initial_cluster: String,
    pub initial_advertise_peer_urls: String,
    pub etcdutl: std::path::PathBuf,
    pub cluster_token: Option<String>,
}

pub fn restore(a: &RestoreArgs) -> Result<(), Failure> {
    if a.data_dir.exists() {
        return Err(Failure::input(format!(
            "{} exists: restore into a new folder",
            a.data_dir.display()
        )));
    }
    let token = a.cluster_token.clone().unwrap_or_else(fresh_cluster_token);
    let out = std::process::Command::new(&a.etcdutl)
        .args(["snapshot", "restore"])
        .arg(&a.snapshot)
        .arg("--data-dir")
        .arg(&a.data_dir)
        .args(["--name", &a.name])
        .args(["--initial-cluster", &a.initial_cluster])
        .args([
            "--initial-advertise-peer-urls",
            &a.initial_advertise_peer_urls,
        ])
        .args(["--initial-cluster-token", &token])
        .output()
        .map_err(|e| Failure::input(format!("running {}: {e}", a.etcdutl.display())))?;
    if !out.status.success() {
        return Err(Failure::refused(format!(
            "etcdutl snapshot restore failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    println!(
        "restored {} into {} with cluster token {token}",
        a.snapshot.display(),
        a.data_dir.display()
    );
    println!(
        "start the member(s) on it; arbiters answer SEALED until `lockctl epoch advance --from <epoch>`"
    );
    Ok(())
}

/// A cluster token no earlier cluster used: the cluster ID is derived from it and the
/// member URLs, so a new token means a new cluster ID (ADR-03, DESIGN 8).
fn fresh_cluster_token() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("lock-restore-{nanos:x}-{}", std::process::id())
}

pub async fn epoch_init(etcd: &[String], tls: &EtcdTlsFiles) -> Result<(), Failure> {
    let store = connect(etcd, tls).await?;
    match epoch::init(&store).await {
        Ok((rec, true)) => {
            println!(
                "epoch {} created, bound to cluster {}",
                rec.epoch, rec.cluster_id
            );
            Ok(())
        }
        Ok((rec, false)) => {
            println!(
                "epoch {} already exists, bound to cluster {}",
                rec.epoch, rec.cluster_id
            );
            Ok(())
        }
        Err(ArbiterError::NoQuorum) => {
            Err(Failure::unreachable("etcd unreachable or without quorum"))
        }
        Err(e) => Err(Failure::refused(e.to_string())),
    }
}

pub fn registry_check(dir: &Path, sessions: u64) -> Result<(), Failure> {
    let registry = registry_files::load(dir).map_err(|e| Failure::input(e.to_string()))?;
    println!(
        "{:<24} {:<12} {:<12} {:<10} {:>6} {:>18} {:>10}",
        "CLASS", "NAMESPACE", "PURPOSE", "ENFORCE", "TTL", "KEEPALIVES/S", "LIVENESS"
    );
    for c in registry.classes() {
        // One keepalive per session every TTL/3 (ADR-10, 11).
        let per_second = sessions as f64 * 3.0 / f64::from(c.ttl_seconds);
        println!(
            "{:<24} {:<12} {:<12} {:<10} {:>5}s {:>10.1} ({} sess) {:>9}s",
            c.name,
            c.spec.namespace,
            format!("{:?}", c.spec.purpose).to_lowercase(),
            if c.spec.enforcement == Enforcement::Fenced {
                "fenced"
            } else {
                "advisory"
            },
            c.ttl_seconds,
            per_second,
            sessions,
            c.ttl_seconds
        );
    }
    println!(
        "ok: {} namespaces, {} classes, {} identities with grants",
        registry.namespaces().count(),
        registry.classes().count(),
        registry.grants().count()
    );
    Ok(())
}

/// The filter configuration for `region`, validated with the same code the filter runs.
fn filter_config(
    dir: &Path,
    region: &str,
    trust_domains: &[String],
) -> Result<FilterConfig, Failure> {
    let registry = registry_files::load(dir).map_err(|e| Failure::input(e.to_string()))?;
    let config = FilterConfig::from_registry(&registry, region, trust_domains, None);
    // The filter compiles it again in on_configure; compile here so a push never ships a
    // configuration the filter would refuse.
    config
        .compile()
        .map_err(|e| Failure::input(format!("filter configuration: {e}")))?;
    Ok(config)
}

pub fn grants_compile(dir: &Path, region: &str, trust_domains: &[String]) -> Result<(), Failure> {
    println!("{}", filter_config(dir, region, trust_domains)?.to_json());
    Ok(())
}

pub fn grants_push(
    dir: &Path,
    region: &str,
    trust_domains: &[String],
    out: &Path,
    wasm: &Path,
) -> Result<(), Failure> {
    let config = filter_config(dir, region, trust_domains)?;
    // What the push changes against what is live (the file Envoy watches).
    let live = std::fs::read(out)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|doc| lock_config::ecds::configuration_of(&doc));
    match &live {
        Some(live) => {
            let changes = lock_config::registry::diff::diff_filter(live, &config);
            if changes.is_empty() {
                println!("no change to grants or namespaces against what is live");
            }
            for c in changes {
                println!("{c}{}", if c.risky() { "   [widens]" } else { "" });
            }
        }
        None => println!("nothing live at {} yet: every grant is new", out.display()),
    }
    let doc = lock_config::ecds::discovery_response(&config, &wasm.display().to_string());
    let text = serde_json::to_string_pretty(&doc).map_err(|e| Failure::input(e.to_string()))?;
    let tmp = out.with_extension("tmp");
    let write = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, out));
    write.map_err(|e| Failure::input(format!("{}: {e}", out.display())))?;
    println!(
        "pushed {} grants for region {region} to {} (version {})",
        config.grants.len(),
        out.display(),
        doc["version_info"].as_str().unwrap_or_default()
    );
    Ok(())
}

/// The risk register: advisory correctness classes, their owners and waivers, (with etcd)
/// how many holds each has now, and (with the arbiters' admin listeners) how many grants
/// each has had since those arbiters started.
pub async fn register(
    dir: &Path,
    json: bool,
    etcd: &[String],
    etcd_tls: &EtcdTlsFiles,
    metrics: &[String],
) -> Result<(), Failure> {
    use lock_config::registry::Purpose;
    let registry = registry_files::load(dir).map_err(|e| Failure::input(e.to_string()))?;
    let today = registry_files::today();
    let holds = if etcd.is_empty() {
        None
    } else {
        Some(holds_by_class(&connect(etcd, etcd_tls).await?).await?)
    };
    let grants = if metrics.is_empty() {
        None
    } else {
        let mut total = std::collections::HashMap::<String, u64>::new();
        for addr in metrics {
            let text = lock_arbiter::admin::scrape(addr)
                .await
                .map_err(Failure::unreachable)?;
            for (class, n) in lock_arbiter::metrics::grants_by_class(&text) {
                *total.entry(class).or_insert(0) += n;
            }
        }
        Some(total)
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
        "{:<24} {:<12} {:<32} {:<12} {:<8} {:>6} {:>8}",
        "CLASS", "NAMESPACE", "RISK OWNER", "WAIVER", "STATUS", "HOLDS", "GRANTS"
    );
    for r in &rows {
        println!(
            "{:<24} {:<12} {:<32} {:<12} {:<8} {:>6} {:>8}",
            r["class"].as_str().unwrap_or_default(),
            r["namespace"].as_str().unwrap_or_default(),
            r["riskOwner"].as_str().unwrap_or_default(),
            r["waiverExpires"].as_str().unwrap_or_default(),
            if r["expired"].as_bool().unwrap_or(true) {
                "EXPIRED"
            } else {
                "ok"
            },
            r["holds"]
                .as_u64()
                .map_or("-".to_owned(), |n| n.to_string()),
            r["grants"]
                .as_u64()
                .map_or("-".to_owned(), |n| n.to_string()),
        );
    }
    println!(
        "{} advisory correctness class(es) on the register",
        rows.len()
    );
    Ok(())
}

async fn holds_by_class(store: &Etcd) -> Result<std::collections::HashMap<String, u64>, Failure> {
    let resp = store
        .range(
            lock_arbiter::layout::HOLDER_PREFIX,
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .map_err(|e| Failure::unreachable(e.to_string()))?;
    let mut by_class = std::collections::HashMap::new();
    for kv in resp.kvs() {
        if let Some(h) = lock_arbiter::layout::decode::<lock_arbiter::layout::Holder>(kv.value()) {
            *by_class.entry(h.class).or_insert(0) += 1;
        }
    }
    Ok(by_class)
}

/// A duration like `30m`, `12h`, `7d` or `90s`, in milliseconds.
pub fn parse_since(s: &str) -> Option<i64> {
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
pub async fn audit(key: &str, since: Option<&str>, db: &str, json: bool) -> Result<(), Failure> {
    use lock_audit::store::{AuditStore, Postgres};
    let since_ms = match since {
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
    let store = Postgres::connect(db)
        .await
        .map_err(|e| Failure::unreachable(e.to_string()))?;
    let rows = store
        .history(key, since_ms)
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
mod audit_tests {
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

/// Which changes make `lockctl registry diff` exit 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FailOn {
    /// Any change (like diff(1)).
    Any,
    /// Only changes that widen access or weaken a guarantee.
    Risky,
}

/// Reads a registry from a directory or, for `REV:DIR` that is not a path, from git.
fn registry_at(spec: &str) -> Result<lock_config::Registry, Failure> {
    let sources = match spec.split_once(':') {
        Some((rev, dir)) if !Path::new(spec).exists() => git_sources(rev, dir)?,
        _ => registry_files::read_sources(Path::new(spec))
            .map_err(|e| Failure::input(e.to_string()))?,
    };
    lock_config::Registry::load(&sources, registry_files::today())
        .map_err(|e| Failure::input(format!("{spec}: {e}")))
}

/// Every `*.yaml`/`*.yml` directly in `dir` at git revision `rev` (in the current repo).
fn git_sources(rev: &str, dir: &str) -> Result<Vec<lock_config::registry::Source>, Failure> {
    let git = |args: &[&str]| -> Result<String, Failure> {
        let out = std::process::Command::new("git")
            .args(args)
            .output()
            .map_err(|e| Failure::input(format!("git: {e}")))?;
        if !out.status.success() {
            return Err(Failure::input(format!(
                "git {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let dir = dir.trim_end_matches('/');
    let listing = git(&["ls-tree", "--name-only", rev, &format!("{dir}/")])?;
    let mut names: Vec<&str> = listing
        .lines()
        .filter(|n| n.ends_with(".yaml") || n.ends_with(".yml"))
        .collect();
    names.sort_unstable();
    if names.is_empty() {
        return Err(Failure::input(format!("{rev}:{dir}: no *.yaml documents")));
    }
    names
        .into_iter()
        .map(|name| {
            Ok(lock_config::registry::Source {
                name: format!("{rev}:{name}"),
                text: git(&["show", &format!("{rev}:{name}")])?,
            })
        })
        .collect()
}

/// `lockctl registry diff OLD NEW`: prints the changes; Ok(true) when the exit status is 1.
pub fn registry_diff(
    old: &str,
    new: &str,
    sessions: u64,
    fail_on: FailOn,
) -> Result<bool, Failure> {
    use lock_config::registry::diff::{Change, diff, keepalives_per_second};
    let (before, after) = (registry_at(old)?, registry_at(new)?);
    let changes = diff(&before, &after);
    if changes.is_empty() {
        println!("no change");
        return Ok(false);
    }
    let mut touched = std::collections::BTreeMap::new();
    for c in &changes {
        println!("{c}{}", if c.risky() { "   [risk]" } else { "" });
        if let Change::ClassChanged { name, ttl, .. } = c {
            touched.insert(name.clone(), *ttl);
        }
    }
    for (name, (from, to)) in touched {
        println!(
            "  {name}: keepalives/s for {sessions} sessions {:.1} -> {:.1}; liveness bound {from}s -> {to}s",
            keepalives_per_second(sessions, from),
            keepalives_per_second(sessions, to),
        );
    }
    let risky = changes.iter().filter(|c| c.risky()).count();
    println!("{} change(s), {risky} risky", changes.len());
    Ok(match fail_on {
        FailOn::Any => true,
        FailOn::Risky => risky > 0,
    })
}

/// What one component serves, as `registry status` finds it.
enum Served {
    Version(u64),
    Unreachable(String),
}

/// `lockctl registry status`: Ok(true) when the exit status is 1 (something stale).
pub async fn registry_status(
    dir: &Path,
    region: &str,
    trust_domains: &[String],
    envoys: &[String],
    arbiters: &[String],
) -> Result<bool, Failure> {
    use lock_config::ecds::{config_version, version_text};
    let config = filter_config(dir, region, trust_domains)?;
    let filter_want = config_version(
        serde_json::to_string(&config)
            .map_err(|e| Failure::input(e.to_string()))?
            .as_bytes(),
    );
    let sources = registry_files::read_sources(dir).map_err(|e| Failure::input(e.to_string()))?;
    let arbiter_want = lock_config::registry::sources_version(&sources);
    let mut rows = Vec::new();
    for addr in envoys {
        let path = "/stats?filter=^wasmcustom.lock_edge.config_version$";
        let served = match lock_arbiter::admin::get(addr, path).await {
            Ok(body) => body
                .lines()
                .find_map(|l| l.strip_prefix("wasmcustom.lock_edge.config_version: "))
                .and_then(|v| v.trim().parse().ok())
                .map_or(
                    Served::Unreachable(
                        "no lock_edge.config_version gauge (no configuration accepted?)".into(),
                    ),
                    Served::Version,
                ),
            Err(e) => Served::Unreachable(e),
        };
        rows.push(("envoy", addr, served, filter_want));
    }
    for addr in arbiters {
        let served = match lock_arbiter::admin::get(addr, "/status").await {
            Ok(body) => serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| u64::from_str_radix(v["registry_version"].as_str()?, 16).ok())
                .map_or(
                    Served::Unreachable("no registry_version in /status".into()),
                    Served::Version,
                ),
            Err(e) => Served::Unreachable(e),
        };
        rows.push(("arbiter", addr, served, arbiter_want));
    }
    println!(
        "{:<8} {:<24} {:<14} {:<14} STATE",
        "ROLE", "ADMIN", "SERVES", "EXPECTED"
    );
    let (mut stale, mut unreachable) = (0, 0);
    for (role, addr, served, want) in &rows {
        let (serves, state) = match served {
            Served::Version(v) if v == want => (version_text(*v), "current".to_owned()),
            Served::Version(v) => {
                stale += 1;
                (version_text(*v), "STALE".to_owned())
            }
            Served::Unreachable(e) => {
                unreachable += 1;
                ("-".to_owned(), format!("UNREACHABLE: {e}"))
            }
        };
        println!(
            "{role:<8} {addr:<24} {serves:<14} {:<14} {state}",
            version_text(*want)
        );
    }
    if unreachable > 0 {
        return Err(Failure::unreachable(format!(
            "{unreachable} component(s) did not answer"
        )));
    }
    Ok(stale > 0)
}

/// `lockctl registry crds`: writes the generated CRDs to `out`, or (check) reports the
/// files that differ from what would be written. Ok(true): some differ.
pub fn registry_crds(out: &Path, check: bool) -> Result<bool, Failure> {
    let io = |e: std::io::Error| Failure::input(format!("{}: {e}", out.display()));
    let mut differ = false;
    if !check {
        std::fs::create_dir_all(out).map_err(io)?;
    }
    for (name, text) in lock_kube::crd::files() {
        let path = out.join(&name);
        if check {
            if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                println!(
                    "{}: differs from the document types; run `lockctl registry crds`",
                    path.display()
                );
                differ = true;
            }
        } else {
            std::fs::write(&path, text).map_err(io)?;
            println!("wrote {}", path.display());
        }
    }
    if check && !differ {
        println!("the CRDs in {} match the document types", out.display());
    }
    Ok(differ)
}

/// `lockctl shards simulate`: what adding one shard moves, and the balance after.
pub fn shards_simulate(keys: usize, namespaces: usize, shards: &[usize], depth: u8) {
    use lock_config::shards::{sample_keys, simulate_add};
    let sample = sample_keys(keys, namespaces);
    println!("{keys} keys over {namespaces} namespaces, home depth {depth}; one shard added to N");
    println!("     N   moved   moved/keys  ideal 1/(N+1)  between old  max/mean  min/mean");
    for &n in shards {
        let s = simulate_add(n, &sample, depth);
        println!(
            "{:>6}  {:>6}  {:>10.4}  {:>13.4}  {:>11}  {:>8.3}  {:>8.3}",
            s.shards,
            s.moved,
            s.fraction,
            s.ideal,
            s.moved_between_old,
            s.max_over_mean,
            s.min_over_mean
        );
    }
}
