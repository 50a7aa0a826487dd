//! What lock-admin does once its sign-in checks pass, driven by tests and the gate: its own
//! filing and approval code (lock-force's stores) as etcd's `force` user, with two
//! operators named here. The sign-in itself (OIDC, MFA, the same-person rule through the
//! API) is tested against a real IdP in `tests/force_release.rs` and `tests/epoch_advance.rs`.

use crate::etcd::Access;
use lock_force::advance_store::AdvanceStore;
use lock_force::oidc::Operator;
use lock_force::store::ForceError;
#[cfg(debug_assertions)]
use lock_store::bugs::Bug;
use lock_store::bugs::Bugs;
use lock_store::etcd_tls::{self, EtcdTlsFiles};
use lock_store::layout::EpochRecord;
use std::time::Duration;

/// An operator as the harness names one (issuer "harness").
pub fn operator(who: &str) -> Operator {
    Operator {
        issuer: "harness".into(),
        subject: who.into(),
        name: who.into(),
    }
}

/// etcd as lock-admin reaches it: the `force` user's certificate.
pub async fn force_etcd(etcd: &Access) -> anyhow::Result<lock_store::Etcd> {
    let env: std::collections::HashMap<String, String> =
        etcd.pki.lockctl_env("force").into_iter().collect();
    let file = |name: &str| env.get(name).map(std::path::PathBuf::from);
    let creds = EtcdTlsFiles {
        ca: file("LOCK_ETCD_CA"),
        cert: file("LOCK_ETCD_CERT"),
        key: file("LOCK_ETCD_KEY"),
    };
    let urls: Vec<String> = etcd.urls.split(',').map(str::to_owned).collect();
    let tls = etcd_tls::load(&urls, &creds)?;
    Ok(lock_store::Etcd::connect(&urls, Duration::from_secs(5), tls.as_ref()).await?)
}

/// The two-person epoch advance from `from`: filed by one operator, approved by another.
/// Outer error: lock-admin's etcd could not be reached at all. Inner: the advance's own
/// answer (a refusal, or a store error whose outcome is unknown).
pub async fn advance_epoch(
    etcd: &Access,
    from: u16,
    reason: &str,
) -> anyhow::Result<Result<EpochRecord, ForceError>> {
    advance_epoch_with(etcd, None, from, reason, false).await
}

/// As [`advance_epoch`], with lock-admin given the coord cluster (`coord`, its `--coord`)
/// and, with `old_rule` in a debug build, the deliberate bug `advance-without-coord`: the
/// advance takes E+1 on its own cluster, as lock-admin did before epochs came from the coord
/// cluster on every path (the shard gate shows its check catches it).
pub async fn advance_epoch_with(
    etcd: &Access,
    coord: Option<&Access>,
    from: u16,
    reason: &str,
    old_rule: bool,
) -> anyhow::Result<Result<EpochRecord, ForceError>> {
    let mut store = AdvanceStore::new(force_etcd(etcd).await?, Duration::from_secs(600))
        .with_bugs(bugs(old_rule));
    if let Some(coord) = coord {
        store = store.with_coord(force_etcd(coord).await?);
    }
    Ok(async {
        let req = store.file(from, reason, &operator("requester")).await?;
        store.approve(&req.id, &operator("approver")).await
    }
    .await)
}

/// The two-person force release of `key`'s hold: filed by one operator, approved by
/// another, as lock-admin runs it. Outer error as for [`advance_epoch`]; inner: the
/// release's own answer.
pub async fn force_release(
    etcd: &Access,
    key: &str,
    reason: &str,
) -> anyhow::Result<Result<lock_force::store::Executed, ForceError>> {
    let store =
        lock_force::store::ForceStore::new(force_etcd(etcd).await?, None, Duration::from_secs(600));
    Ok(async {
        let req = store
            .file(key, reason, false, &operator("requester"))
            .await?;
        store.approve(&req.id, &operator("approver")).await
    }
    .await)
}

/// The advance's deliberate bugs: `advance-without-coord` when asked, in debug builds only
/// (a release build has none to switch on).
fn bugs(old_rule: bool) -> Bugs {
    #[cfg(debug_assertions)]
    if old_rule {
        return Bugs::new(vec![Bug::AdvanceWithoutCoord]);
    }
    let _ = old_rule;
    Bugs::default()
}
