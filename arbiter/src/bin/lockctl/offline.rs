//! Commands that work on files or talk to etcd directly (operators only).

use crate::Failure;
use lock_arbiter::{ArbiterError, Store, epoch, registry_files};
use lock_config::FilterConfig;
use lock_config::registry::Enforcement;
use std::path::Path;
use std::time::Duration;

pub async fn epoch_init(etcd: &[String]) -> Result<(), Failure> {
    let store = Store::connect(etcd, Duration::from_secs(5))
        .await
        .map_err(|e| Failure::unreachable(format!("etcd: {e}")))?;
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

pub fn grants_compile(dir: &Path, region: &str, trust_domains: &[String]) -> Result<(), Failure> {
    let registry = registry_files::load(dir).map_err(|e| Failure::input(e.to_string()))?;
    let config = FilterConfig::from_registry(&registry, region, trust_domains, None);
    // The filter compiles it again in on_configure; compile here so a push never ships a
    // configuration the filter would refuse.
    config
        .compile()
        .map_err(|e| Failure::input(format!("filter configuration: {e}")))?;
    println!("{}", config.to_json());
    Ok(())
}
