//! The rim (I/O): a kube client, one watch + reflector per kind in one namespace, and the
//! loop that on every change (and every minute: dates expire) snapshots the stores, asks
//! [`decide`] and carries the answer out — write the folder, or keep it and say why.

use super::decide::{Decision, Object, View, decide};
use super::folder;
use super::metrics::{KindLabel, METRICS, ReasonLabel};
use crate::crd::{GROUP, VERSION, kinds};
use anyhow::Context as _;
use futures_util::StreamExt as _;
use kube::Api;
use kube::api::{ApiResource, DynamicObject};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

/// A kube client from `kubeconfig`, or the pod's service account (in-cluster) without one.
pub async fn client(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?
        }
        None => kube::Config::incluster().context("in-cluster config (no --kubeconfig)")?,
    };
    Ok(kube::Client::try_from(config)?)
}

/// The API resource of a registry kind (`lock.dev/v1alpha1`, namespaced).
pub fn api_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: format!("{GROUP}/{VERSION}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// One kind's store and whether it has been listed once.
struct Watched {
    kind: &'static str,
    store: Store<DynamicObject>,
    synced: Arc<AtomicBool>,
}

fn watch(
    client: &kube::Client,
    namespace: &str,
    kind: &'static str,
    plural: &'static str,
    changed: Arc<Notify>,
) -> Watched {
    let ar = api_resource(kind, plural);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
    let writer = reflector::store::Writer::new(ar);
    let store = writer.as_reader();
    let synced = Arc::new(AtomicBool::new(false));
    let flag = synced.clone();
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default()).default_backoff(),
    );
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                // A (re)list in progress: the store swaps in the whole list at InitDone.
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
                Ok(watcher::Event::InitDone) => {
                    flag.store(true, Ordering::SeqCst);
                    changed.notify_one();
                }
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => changed.notify_one(),
                Err(e) => {
                    METRICS
                        .watch_errors
                        .get_or_create(&KindLabel { kind })
                        .inc();
                    tracing::warn!(kind, error = %e, "watch failed; retrying with backoff");
                }
            }
        }
    });
    Watched {
        kind,
        store,
        synced,
    }
}

fn view(namespace: &str, watched: &[Watched]) -> View {
    let mut objects = Vec::new();
    for w in watched {
        let held = w.store.state();
        METRICS
            .objects
            .get_or_create(&KindLabel { kind: w.kind })
            .set(i64::try_from(held.len()).unwrap_or(i64::MAX));
        objects.extend(held.iter().map(|o| Object {
            kind: w.kind.to_owned(),
            name: o.metadata.name.clone().unwrap_or_default(),
            spec: o.data.get("spec").cloned(),
        }));
    }
    View {
        namespace: namespace.to_owned(),
        synced: watched.iter().all(|w| w.synced.load(Ordering::SeqCst)),
        objects,
    }
}

/// How long a burst of changes (`kubectl apply -f folder/`) is let settle before judging.
const SETTLE: Duration = Duration::from_millis(300);
/// Re-judged this often without a change: a pause-test result or a waiver expires by date.
const REJUDGE: Duration = Duration::from_secs(60);

/// Watches `namespace` and keeps `out` holding its last valid set, until the process ends.
pub async fn run(client: kube::Client, namespace: String, out: PathBuf) -> anyhow::Result<()> {
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let foreign = folder::foreign(&out)?;
    anyhow::ensure!(
        foreign.is_empty(),
        "{} holds registry files this controller did not write ({}): the arbiters would \
         merge them into its set; give it a folder of its own",
        out.display(),
        foreign
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let changed = Arc::new(Notify::new());
    let watched: Vec<Watched> = kinds()
        .into_iter()
        .map(|k| watch(&client, &namespace, k.kind, k.plural, changed.clone()))
        .collect();
    let mut last_refusal: Option<String> = None;
    let mut rejudge = tokio::time::interval(REJUDGE);
    loop {
        tokio::select! {
            _ = changed.notified() => tokio::time::sleep(SETTLE).await,
            _ = rejudge.tick() => {}
        }
        let v = view(&namespace, &watched);
        METRICS.synced.set(i64::from(v.synced));
        let on_disk = match folder::read(&out) {
            Ok(t) => t,
            Err(e) => {
                METRICS.write_errors.inc();
                tracing::error!(out = %out.display(), error = %e, "cannot read the registry folder");
                continue;
            }
        };
        match decide(&v, on_disk.as_deref(), lock_store::registry_files::today()) {
            Decision::Wait => {}
            Decision::Unchanged => {
                settled(&mut last_refusal, on_disk.as_deref());
            }
            Decision::Write(text) => match folder::write(&out, &text) {
                Ok(()) => {
                    METRICS.writes.inc();
                    let version = settled(&mut last_refusal, Some(&text));
                    tracing::info!(
                        objects = v.objects.len(),
                        version = %lock_config::ecds::version_text(version),
                        "registry set written"
                    );
                }
                Err(e) => {
                    METRICS.write_errors.inc();
                    tracing::error!(out = %out.display(), error = %e, "writing the registry set failed; the folder keeps the last good set");
                }
            },
            Decision::Refuse(why) => {
                METRICS.refused.set(1);
                let line = why.to_string();
                // Once per distinct refusal, not on every re-judge.
                if last_refusal.as_deref() != Some(line.as_str()) {
                    METRICS
                        .refusals
                        .get_or_create(&ReasonLabel {
                            reason: why.reason(),
                        })
                        .inc();
                    tracing::error!(reason = why.reason(), problems = %line, "registry set refused; the folder keeps the last good set");
                    last_refusal = Some(line);
                }
            }
        }
    }
}

/// The folder holds the cluster's set: clears a refusal, sets the version gauge.
fn settled(last_refusal: &mut Option<String>, text: Option<&str>) -> u64 {
    if last_refusal.take().is_some() {
        tracing::info!("the cluster's set is valid again");
    }
    METRICS.refused.set(0);
    let version = text.map_or(0, |t| {
        lock_config::registry::sources_version(&[lock_config::registry::Source {
            name: String::new(),
            text: t.to_owned(),
        }])
    });
    METRICS.version.set(i64::try_from(version).unwrap_or(0));
    version
}
