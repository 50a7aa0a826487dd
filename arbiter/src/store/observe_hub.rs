//! One etcd watch stream per arbiter for every Observe (issue 35), as `watch_hub.rs` is for
//! queue heads. Each Observe had opened a watch stream of its own: an HTTP/2 stream and its
//! buffers at the arbiter and an etcd watcher, 148 kB of arbiter RSS per Observe (500
//! streams straight at an arbiter, `tests/observe.rs`'s measurement). etcd multiplexes
//! watches on one stream, each with its own start revision and a watch id the client
//! chooses: this task owns the stream, creates a watch per Observe, and routes each
//! response to it by id.
//!
//! What an Observe is told ([`Note`]): a response's events, a progress mark (the stream's
//! answer to the hub's progress request, for every watch on it), or the end of its watch:
//! compacted (etcd cancelled it, `compact_revision`), or broken (the stream failed or
//! answered from another cluster). A broken stream is reopened by the next Observe that
//! asks; the ended ones resume from their last revision, through the client.

use crate::error::ArbiterError;
use crate::store::epoch::Epoch;
use crate::store::watch_hub::StreamSource;
use etcd_client::{Event, WatchOptions, WatchResponse};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;

/// How often the hub asks etcd where the stream is (one request answers every watch).
const PROGRESS_EVERY: Duration = Duration::from_secs(60);

/// Events buffered per Observe before the hub drops its watch (a reader that does not
/// keep up is ended, not waited for: one slow client must not stall every other).
const BUFFER: usize = 256;

/// What the hub tells one Observe.
#[derive(Debug)]
pub enum Note {
    /// The watch's events of one response, and the response header's revision.
    Events(Vec<Event>, i64),
    /// Nothing changed up to this revision.
    Progress(i64),
    /// etcd cancelled the watch: the start revision was compacted (or 0: cancelled).
    Compacted(i64),
    /// The stream broke, answered from another cluster, or this Observe fell behind.
    Broken,
}

enum Cmd {
    Watch {
        id: i64,
        key: String,
        from_revision: i64,
        tx: mpsc::Sender<Note>,
    },
    Cancel {
        id: i64,
    },
}

#[derive(Clone)]
pub struct ObserveHub {
    tx: mpsc::UnboundedSender<Cmd>,
    next_id: Arc<AtomicI64>,
}

/// One Observe's watch; dropping it cancels the watch.
pub struct Observing {
    id: i64,
    hub: mpsc::UnboundedSender<Cmd>,
    rx: mpsc::Receiver<Note>,
}

impl Observing {
    /// The next note; Broken once the hub is gone.
    pub async fn next(&mut self) -> Note {
        self.rx.recv().await.unwrap_or(Note::Broken)
    }
}

impl Drop for Observing {
    fn drop(&mut self) {
        let _ = self.hub.send(Cmd::Cancel { id: self.id });
    }
}

impl ObserveHub {
    /// Starts the stream task (inside a Tokio runtime) over `source`.
    pub fn start(source: impl StreamSource) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(source, rx));
        Self {
            tx,
            next_id: Arc::new(AtomicI64::new(1)),
        }
    }

    /// Watches `holder_key`'s puts and deletes (with previous values) from `from_revision`.
    pub fn watch(&self, holder_key: &str, from_revision: i64) -> Observing {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(BUFFER);
        let _ = self.tx.send(Cmd::Watch {
            id,
            key: holder_key.to_owned(),
            from_revision,
            tx,
        });
        Observing {
            id,
            hub: self.tx.clone(),
            rx,
        }
    }
}

fn options(id: i64, from_revision: i64) -> WatchOptions {
    WatchOptions::new()
        .with_watch_id(id)
        .with_start_revision(from_revision)
        .with_prev_key()
}

/// What one response means for the watch it names (None: nothing to tell, as the
/// creation's acknowledgement). A response with no events that is not a creation is the
/// stream's progress answer.
fn note_of(resp: &WatchResponse) -> Option<Note> {
    let revision = resp.header().map_or(0, |h| h.revision());
    if resp.canceled() {
        return Some(Note::Compacted(resp.compact_revision()));
    }
    if resp.events().is_empty() {
        return (!resp.created()).then_some(Note::Progress(revision));
    }
    Some(Note::Events(resp.events().to_vec(), revision))
}

async fn run(source: impl StreamSource, mut rx: mpsc::UnboundedReceiver<Cmd>) {
    let mut first: Option<Cmd> = None;
    loop {
        let cmd = match first.take() {
            Some(c) => c,
            None => match rx.recv().await {
                Some(c) => c,
                None => return,
            },
        };
        let Cmd::Watch {
            id,
            key,
            from_revision,
            tx,
        } = cmd
        else {
            continue; // a cancel with no stream open: nothing to cancel
        };
        let opened: Result<(Epoch, _), ArbiterError> =
            source.open(&key, options(id, from_revision)).await;
        let (epoch, mut stream) = match opened {
            Ok(s) => s,
            Err(_) => {
                let _ = tx.try_send(Note::Broken);
                continue;
            }
        };
        let mut watches: HashMap<i64, mpsc::Sender<Note>> = HashMap::new();
        watches.insert(id, tx);
        let mut progress =
            tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
        loop {
            tokio::select! {
                cmd = rx.recv() => match cmd {
                    Some(Cmd::Watch { id, key, from_revision, tx }) => {
                        if stream.watch(key.as_str(), Some(options(id, from_revision))).await.is_err() {
                            let _ = tx.try_send(Note::Broken);
                            break;
                        }
                        watches.insert(id, tx);
                    }
                    Some(Cmd::Cancel { id }) => {
                        if watches.remove(&id).is_some() && stream.cancel(id).await.is_err() {
                            break;
                        }
                    }
                    None => return,
                },
                _ = progress.tick() => {
                    if !watches.is_empty() && stream.request_progress().await.is_err() {
                        break;
                    }
                }
                resp = stream.message() => match resp {
                    Ok(Some(resp)) => {
                        if epoch.check_header(resp.header()).is_err() {
                            break;
                        }
                        let Some(note) = note_of(&resp) else { continue };
                        // A progress answer is the stream's, for every watch on it.
                        if let Note::Progress(revision) = note {
                            let behind: Vec<i64> = watches
                                .iter()
                                .filter(|(_, tx)| tx.try_send(Note::Progress(revision)).is_err())
                                .map(|(id, _)| *id)
                                .collect();
                            let mut failed = false;
                            for id in behind {
                                watches.remove(&id);
                                failed |= stream.cancel(id).await.is_err();
                            }
                            if failed {
                                break;
                            }
                            continue;
                        }
                        let id = resp.watch_id();
                        let ended = matches!(note, Note::Compacted(_));
                        let delivered = watches.get(&id).is_some_and(|tx| tx.try_send(note).is_ok());
                        if ended {
                            watches.remove(&id);
                        } else if !delivered && watches.remove(&id).is_some() {
                            // Behind by a whole buffer, or gone: its watch ends here.
                            if stream.cancel(id).await.is_err() {
                                break;
                            }
                        }
                    }
                    Ok(None) | Err(_) => break,
                },
            }
        }
        // Broken: every Observe on this stream ends, and resumes through its client.
        for (_, tx) in watches.drain() {
            let _ = tx.try_send(Note::Broken);
        }
    }
}
