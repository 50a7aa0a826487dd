//! One etcd watch stream per arbiter for every waiting queue head (issue 18).
//!
//! A queue head waits for its key's holder record to be deleted. Each head used to open a
//! watch stream of its own (an HTTP/2 stream, its buffers and an etcd watcher goroutine:
//! ~50 KiB a head by `make bench`'s memory split). etcd multiplexes watches on one stream,
//! each named by a watch id the client may choose (etcd ≥ 3.4): this task owns one stream,
//! creates a watch per waiting head with the head's own id, hands the first delete to that
//! head and cancels the watch.
//!
//! What a head is told is unchanged (`release_watch::Wake`): the first delete at or after
//! its revision, or Broken when its watch was cancelled (compaction) or the stream broke or
//! answered from another cluster; the head then runs its grant transaction, which decides.
//! A broken stream is reopened by the next head that asks.

use crate::error::ArbiterError;
use crate::error::Ended;
use crate::store::epoch::Epoch;
use etcd_client::{WatchFilterType, WatchOptions, WatchResponse, WatchStream};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use tokio::sync::{mpsc, oneshot};

/// What a waiting head is told.
pub enum Wake {
    /// The holder key was deleted (release, session expiry or epoch advance) at `revision`,
    /// or, for a watch that asked for overwrites, handed on by a release at `revision`.
    Released { revision: i64 },
    /// The wait is over: the caller's deadline passed, or the arbiter is draining.
    Ended(Ended),
    /// The watch could not be created, was cancelled (e.g. compaction) or broke.
    Broken,
}

/// Where the hub opens its stream: on the current epoch's cluster, with the epoch to check
/// every response against. The store is the source (`sealed.rs`); the hub does not know it.
pub trait StreamSource: Send + Sync + 'static {
    fn open(
        &self,
        key: &str,
        options: WatchOptions,
    ) -> impl Future<Output = Result<(Epoch, WatchStream), ArbiterError>> + Send;
}

enum Cmd {
    Watch {
        id: i64,
        key: String,
        from_revision: i64,
        overwrites: bool,
        /// `key` is a prefix: every key under it (a semaphore's permits).
        prefix: bool,
        reply: oneshot::Sender<Wake>,
    },
    Cancel {
        id: i64,
    },
}

#[derive(Clone)]
pub struct WatchHub {
    tx: mpsc::UnboundedSender<Cmd>,
    next_id: Arc<AtomicI64>,
}

/// A head's watch: dropping it (deadline, handed the key) cancels the watch.
pub struct Watching {
    id: i64,
    hub: mpsc::UnboundedSender<Cmd>,
    answer: oneshot::Receiver<Wake>,
}

impl Watching {
    /// The first delete of the key at or after the revision asked for (or Broken).
    pub async fn next(&mut self) -> Wake {
        (&mut self.answer).await.unwrap_or(Wake::Broken)
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        let _ = self.hub.send(Cmd::Cancel { id: self.id });
    }
}

impl WatchHub {
    /// Starts the stream task (inside a Tokio runtime) over `source`.
    pub fn start(source: impl StreamSource) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(source, rx));
        Self {
            tx,
            next_id: Arc::new(AtomicI64::new(1)),
        }
    }

    /// Watches `holder_key` for its first delete at or after `from_revision`; with
    /// `overwrites`, for its first put too (a durable head: a release may hand the key on
    /// to it by overwriting the record, and that is a release for whoever waits).
    pub fn watch(&self, holder_key: &str, from_revision: i64, overwrites: bool) -> Watching {
        self.watch_any(holder_key, from_revision, overwrites, false)
    }

    /// Watches every key under `prefix` for the first delete at or after `from_revision`
    /// (a semaphore's head: any permit's end may let it in).
    pub fn watch_prefix(&self, prefix: &str, from_revision: i64) -> Watching {
        self.watch_any(prefix, from_revision, false, true)
    }

    fn watch_any(&self, key: &str, from_revision: i64, overwrites: bool, prefix: bool) -> Watching {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (reply, answer) = oneshot::channel();
        let _ = self.tx.send(Cmd::Watch {
            id,
            key: key.to_owned(),
            from_revision,
            overwrites,
            prefix,
            reply,
        });
        Watching {
            id,
            hub: self.tx.clone(),
            answer,
        }
    }
}

fn options(id: i64, from_revision: i64, overwrites: bool, prefix: bool) -> WatchOptions {
    let options = WatchOptions::new()
        .with_watch_id(id)
        .with_start_revision(from_revision);
    let options = if prefix {
        options.with_prefix()
    } else {
        options
    };
    if overwrites {
        options
    } else {
        options.with_filters([WatchFilterType::NoPut])
    }
}

/// What one response means for the head whose watch it names.
fn wake_of(resp: &WatchResponse) -> Option<Wake> {
    if resp.canceled() {
        return Some(Wake::Broken);
    }
    // Deletes only, unless the watch asked for overwrites too (then puts reach it).
    resp.events().first().map(|e| Wake::Released {
        revision: e.kv().map_or(0, |kv| kv.mod_revision()),
    })
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
            overwrites,
            prefix,
            reply,
        } = cmd
        else {
            continue; // a cancel with no stream open: nothing to cancel
        };
        // The stream is opened with the first head's watch, under the current epoch: a
        // response from another cluster breaks it, and the heads' grants answer SEALED.
        let opened = source
            .open(&key, options(id, from_revision, overwrites, prefix))
            .await;
        let (epoch, mut stream) = match opened {
            Ok(s) => s,
            Err(_) => {
                let _ = reply.send(Wake::Broken);
                continue;
            }
        };
        let mut heads: HashMap<i64, oneshot::Sender<Wake>> = HashMap::new();
        heads.insert(id, reply);
        loop {
            tokio::select! {
                cmd = rx.recv() => match cmd {
                    Some(Cmd::Watch { id, key, from_revision, overwrites, prefix, reply }) => {
                        if stream.watch(key.as_str(), Some(options(id, from_revision, overwrites, prefix))).await.is_err() {
                            let _ = reply.send(Wake::Broken);
                            break;
                        }
                        heads.insert(id, reply);
                    }
                    Some(Cmd::Cancel { id }) => {
                        if heads.remove(&id).is_some() && stream.cancel(id).await.is_err() {
                            break;
                        }
                    }
                    None => return,
                },
                resp = stream.message() => match resp {
                    Ok(Some(resp)) => {
                        if epoch.check_header(resp.header()).is_err() {
                            break;
                        }
                        if let Some(wake) = wake_of(&resp)
                            && let Some(head) = heads.remove(&resp.watch_id())
                        {
                            let _ = head.send(wake);
                            // A cancelled watch is gone already; a fired one is cancelled.
                            if !resp.canceled() && stream.cancel(resp.watch_id()).await.is_err() {
                                break;
                            }
                        }
                    }
                    Ok(None) | Err(_) => break,
                },
            }
        }
        // Broken: every head waiting on this stream retries its grant and asks again.
        for (_, head) in heads.drain() {
            let _ = head.send(Wake::Broken);
        }
    }
}
