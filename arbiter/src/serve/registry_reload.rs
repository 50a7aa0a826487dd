//! Live reload of the registry (ADR-24): the arbiter polls its registry folder, and a new
//! version that passes the one validation function replaces the served set for new
//! requests, atomically; queues, sessions and holds stay. An invalid one is refused: the
//! last good set keeps serving, and the refusal is reported (metric, log, `/status`) until a
//! valid version arrives.
//!
//! Polling rather than inotify: a Kubernetes ConfigMap changes by swapping a symlink, which
//! file watchers see inconsistently; a content hash every couple of seconds sees exactly
//! what matters.
//!
//! A class's new TTL applies to sessions opened after the reload. Sessions opened before
//! keep their lease's TTL and their holds: renewals and releases work as before, and a new
//! Acquire on them for a class whose TTL changed is answered WRONG_SESSION_TTL (with the
//! new TTL), so clients open a session with the new TTL for their next grant.

use crate::ops::metrics::METRICS;
use crate::ops::registry_files;
use crate::serve::engine::Engine;
use lock_config::registry::{Registry, sources_version};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// What to do with the version found in the folder (pure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The served version, or the one already refused: nothing to do.
    Keep,
    /// A version not seen yet: validate it.
    Try,
}

pub fn verdict(served: u64, refused: Option<u64>, found: u64) -> Verdict {
    if found == served || refused == Some(found) {
        Verdict::Keep
    } else {
        Verdict::Try
    }
}

/// Polls `dir` every `every` until the process ends. `served` is the version loaded at start.
pub async fn run(engine: Arc<Engine>, dir: PathBuf, served: u64, every: Duration) {
    let mut served = served;
    let mut refused: Option<u64> = None;
    loop {
        tokio::time::sleep(every).await;
        let sources = match registry_files::read_sources(&dir) {
            Ok(s) => s,
            Err(e) => {
                // A folder mid-swap or unreadable: try again next round, keep serving.
                tracing::warn!(error = %e, "registry folder unreadable; serving the last good set");
                continue;
            }
        };
        let found = sources_version(&sources);
        if verdict(served, refused, found) == Verdict::Keep {
            continue;
        }
        match Registry::load(&sources, registry_files::today()) {
            Ok(registry) => {
                engine.replace_registry(Arc::new(registry));
                METRICS.registry_version.set(as_gauge(found));
                METRICS.registry_refused_version.set(0);
                tracing::info!(
                    from = %lock_config::ecds::version_text(served),
                    to = %lock_config::ecds::version_text(found),
                    "registry reloaded"
                );
                served = found;
                refused = None;
            }
            Err(errors) => {
                METRICS.registry_reloads_refused.inc();
                METRICS.registry_refused_version.set(as_gauge(found));
                tracing::error!(
                    version = %lock_config::ecds::version_text(found),
                    %errors,
                    "registry reload refused; serving the last good set"
                );
                refused = Some(found);
            }
        }
    }
}

fn as_gauge(version: u64) -> i64 {
    i64::try_from(version).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_table() {
        use Verdict::*;
        let cases = [
            (1, None, 1, Keep),
            (1, None, 2, Try),
            (1, Some(2), 2, Keep),
            (1, Some(2), 3, Try),
            (1, Some(2), 1, Keep),
        ];
        for (served, refused, found, want) in cases {
            assert_eq!(
                verdict(served, refused, found),
                want,
                "{served} {refused:?} {found}"
            );
        }
    }
}
