//! The hub's task: the one stream, opened with the first watch and reopened after a break,
//! every response checked against its epoch and handed to the watcher(s) it is for.

use super::route::{Heard, Kind, Route, route};
use super::{Cmd, Note, PROGRESS_EVERY, StreamSource, Wake, Watcher};
use crate::store::epoch::Epoch;
use etcd_client::{WatchResponse, WatchStream};
use std::collections::HashMap;
use tokio::sync::mpsc;

/// A response as plain data, for [`route`].
fn heard(resp: &WatchResponse) -> Heard {
    if resp.canceled() {
        return Heard::Cancelled {
            compact_revision: resp.compact_revision(),
        };
    }
    let revision = resp.header().map_or(0, |h| h.revision());
    match resp.events().first() {
        None if resp.created() => Heard::Created,
        None => Heard::Progress { revision },
        Some(first) => Heard::Events {
            first: first.kv().map_or(0, |kv| kv.mod_revision()),
            revision,
        },
    }
}

pub(super) async fn run(source: impl StreamSource, mut rx: mpsc::UnboundedReceiver<Cmd>) {
    while let Some(cmd) = rx.recv().await {
        let Cmd::Watch { id, watch, watcher } = cmd else {
            continue; // a cancel with no stream open: nothing to cancel
        };
        // The stream is opened with the first watcher's watch, under the current epoch.
        let (epoch, mut stream) = match source.open(&watch.key, watch.options(id)).await {
            Ok(s) => s,
            Err(_) => {
                watcher.broken();
                continue;
            }
        };
        let mut watchers: HashMap<i64, Watcher> = HashMap::from([(id, watcher)]);
        let reopen = serve(&epoch, &mut stream, &mut watchers, &mut rx).await;
        // Broken: every watch on this stream ends; heads retry their grants and Observes
        // resume through their clients, and the next to ask opens a stream again.
        for (_, watcher) in watchers.drain() {
            watcher.broken();
        }
        if !reopen {
            return;
        }
    }
}

/// Serves one open stream until it breaks (true: open another for the next watcher) or the
/// hub is dropped (false).
async fn serve(
    epoch: &Epoch,
    stream: &mut WatchStream,
    watchers: &mut HashMap<i64, Watcher>,
    rx: &mut mpsc::UnboundedReceiver<Cmd>,
) -> bool {
    let mut progress =
        tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
    loop {
        tokio::select! {
            cmd = rx.recv() => match cmd {
                Some(Cmd::Watch { id, watch, watcher }) => {
                    if stream.watch(watch.key.as_str(), Some(watch.options(id))).await.is_err() {
                        watcher.broken();
                        return true;
                    }
                    watchers.insert(id, watcher);
                }
                Some(Cmd::Cancel { id }) => {
                    if watchers.remove(&id).is_some() && stream.cancel(id).await.is_err() {
                        return true;
                    }
                }
                None => return false,
            },
            _ = progress.tick() => {
                let observed = watchers.values().any(|w| w.kind() == Kind::Every);
                if observed && stream.request_progress().await.is_err() {
                    return true;
                }
            }
            resp = stream.message() => match resp {
                Ok(Some(resp)) => {
                    if epoch.check_header(resp.header()).is_err() {
                        return true;
                    }
                    if !answer(&resp, stream, watchers).await {
                        return true;
                    }
                }
                Ok(None) | Err(_) => return true,
            },
        }
    }
}

/// Hands one response to the watcher(s) it is for. False: a cancel could not be sent, and
/// the stream is broken.
async fn answer(
    resp: &WatchResponse,
    stream: &mut WatchStream,
    watchers: &mut HashMap<i64, Watcher>,
) -> bool {
    let id = resp.watch_id();
    let mut gone = Vec::new();
    match route(heard(resp), watchers.get(&id).map(Watcher::kind)) {
        Route::Ignore => {}
        Route::Progress(revision) => {
            // The stream's answer, for every Observe on it; those a buffer behind end here.
            for (id, watcher) in watchers.iter() {
                if let Watcher::Every(tx) = watcher
                    && tx.try_send(Note::Progress(revision)).is_err()
                {
                    gone.push(*id);
                }
            }
        }
        Route::Fire(revision) => {
            if let Some(Watcher::First(head)) = watchers.remove(&id) {
                let _ = head.send(Wake::Released { revision });
            }
            // Fired: its watch is cancelled (one etcd cancelled is gone already: `Broken`).
            gone.push(id);
        }
        Route::Broken => {
            if let Some(watcher) = watchers.remove(&id) {
                watcher.broken();
            }
        }
        Route::Forward(revision) => {
            let note = Note::Events(resp.events().to_vec(), revision);
            if let Some(Watcher::Every(tx)) = watchers.get(&id)
                && tx.try_send(note).is_err()
            {
                // Behind by a whole buffer, or gone: its watch ends here.
                gone.push(id);
            }
        }
        Route::Compacted(compact_revision) => {
            if let Some(Watcher::Every(tx)) = watchers.remove(&id) {
                let _ = tx.try_send(Note::Compacted(compact_revision));
            }
        }
    }
    let mut sent = true;
    for id in gone {
        watchers.remove(&id);
        sent &= stream.cancel(id).await.is_ok();
    }
    sent
}
