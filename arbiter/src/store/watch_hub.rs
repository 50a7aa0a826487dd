//! One etcd watch stream per arbiter for every watch it keeps: every waiting queue head's
//! (issue 18) and every Observe's (issue 35), one hub since issue 51.
//!
//! Each head and each Observe used to open a watch stream of its own: an HTTP/2 stream, its
//! buffers and an etcd watcher (~50 KiB a head by `make bench`'s memory split, 148 kB of
//! arbiter RSS per Observe by `tests/observe.rs`). etcd multiplexes watches on one stream,
//! each with its own start revision, range and filters, named by a watch id the client
//! chooses (etcd ≥ 3.4): this task owns the stream, creates a watch per watcher with its
//! own id ([`Watch`]: the key or prefix, the start, puts or deletes only, previous values)
//! and routes each response to it by id. Two kinds of watcher:
//!
//! - [`WatchHub::first`], a queue head: told the first event at or after its revision
//!   ([`Wake::Released`]), then its watch is cancelled; or Broken when etcd cancelled it
//!   (compaction). The head then runs its grant transaction, which decides.
//! - [`WatchHub::every`], an Observe: told every response's events ([`Note`]) until it drops
//!   its [`Observing`], a progress mark (the stream's answer to the hub's progress request,
//!   once a minute, for every such watcher), or the end of its watch: compacted (etcd
//!   cancelled it, `compact_revision`). One that falls a buffer behind is ended, not waited
//!   for.
//!
//! Every response is checked against the epoch the stream opened under
//! (`Epoch::check_header`). A stream that breaks or answers from another cluster ends every
//! watch on it (Broken: heads retry their grants, whose SEALED answers tell; Observes resume
//! through their clients), and the next watcher that asks reopens it.

use crate::error::ArbiterError;
use crate::error::Ended;
use crate::store::epoch::Epoch;
use etcd_client::{Event, WatchFilterType, WatchOptions, WatchResponse, WatchStream};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

mod route;
use route::{Heard, Kind, Route, route};

/// How often the hub asks etcd where the stream is (one request answers every watch), while
/// an Observe watches.
const PROGRESS_EVERY: Duration = Duration::from_secs(60);

/// Events buffered per Observe before the hub drops its watch (a reader that does not
/// keep up is ended, not waited for: one slow client must not stall every other watch).
const BUFFER: usize = 256;

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

/// What an Observe is told.
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

/// What one watch asks etcd for.
#[derive(Debug)]
pub struct Watch {
    key: String,
    from_revision: i64,
    /// `key` is a prefix: every key under it (a semaphore's permits).
    prefix: bool,
    /// Puts too, not only deletes.
    puts: bool,
    /// Each event with the key's value before it.
    prev_kv: bool,
}

impl Watch {
    /// The deletes of `key` at or after `from_revision`.
    pub fn deletes(key: &str, from_revision: i64) -> Self {
        Self {
            key: key.to_owned(),
            from_revision,
            prefix: false,
            puts: false,
            prev_kv: false,
        }
    }

    /// The puts and deletes of `key` at or after `from_revision`.
    pub fn changes(key: &str, from_revision: i64) -> Self {
        Self {
            puts: true,
            ..Self::deletes(key, from_revision)
        }
    }

    /// Every key under `key`, a prefix.
    pub fn under_prefix(self) -> Self {
        Self {
            prefix: true,
            ..self
        }
    }

    /// Each event carries the key's previous value.
    pub fn with_prev_kv(self) -> Self {
        Self {
            prev_kv: true,
            ..self
        }
    }

    fn options(&self, id: i64) -> WatchOptions {
        let mut options = WatchOptions::new()
            .with_watch_id(id)
            .with_start_revision(self.from_revision);
        if self.prefix {
            options = options.with_prefix();
        }
        if !self.puts {
            options = options.with_filters([WatchFilterType::NoPut]);
        }
        if self.prev_kv {
            options = options.with_prev_key();
        }
        options
    }
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

/// Where the hub answers one watcher.
enum Watcher {
    First(oneshot::Sender<Wake>),
    Every(mpsc::Sender<Note>),
}

impl Watcher {
    fn kind(&self) -> Kind {
        match self {
            Self::First(_) => Kind::First,
            Self::Every(_) => Kind::Every,
        }
    }

    /// Its watch is over: the stream broke, or could not take it.
    fn broken(self) {
        match self {
            Self::First(tx) => {
                let _ = tx.send(Wake::Broken);
            }
            Self::Every(tx) => {
                let _ = tx.try_send(Note::Broken);
            }
        }
    }
}

enum Cmd {
    Watch {
        id: i64,
        watch: Watch,
        watcher: Watcher,
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
    /// The first event of the watch (or Broken).
    pub async fn next(&mut self) -> Wake {
        (&mut self.answer).await.unwrap_or(Wake::Broken)
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        let _ = self.hub.send(Cmd::Cancel { id: self.id });
    }
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

    /// A queue head's watch: the first event of `watch`, then it is cancelled.
    pub fn first(&self, watch: Watch) -> Watching {
        let (reply, answer) = oneshot::channel();
        let id = self.send(watch, Watcher::First(reply));
        Watching {
            id,
            hub: self.tx.clone(),
            answer,
        }
    }

    /// An Observe's watch: every event of `watch` until the [`Observing`] is dropped.
    pub fn every(&self, watch: Watch) -> Observing {
        let (tx, rx) = mpsc::channel(BUFFER);
        let id = self.send(watch, Watcher::Every(tx));
        Observing {
            id,
            hub: self.tx.clone(),
            rx,
        }
    }

    fn send(&self, watch: Watch, watcher: Watcher) -> i64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let _ = self.tx.send(Cmd::Watch { id, watch, watcher });
        id
    }
}

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

async fn run(source: impl StreamSource, mut rx: mpsc::UnboundedReceiver<Cmd>) {
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
