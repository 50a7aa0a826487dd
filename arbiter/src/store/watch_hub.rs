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
//!
//! One stream for both kinds, not one each, though a head's wake is then read behind the
//! Observes' answers by the same task. Measured (`tests/watch_hub.rs`, debug builds on two
//! shared cores, three runs of 40 wakes each way): beside 500 Observes of a key changing
//! ~21 times a second (~10,600 answers/s), a head's wake took p50 44-72 ms on one stream and
//! 46-74 ms on two, p90 156-168 ms and 123-154 ms; alone, 2-3 ms either way. The Observes'
//! load is the cost, whichever stream carries them.
//!
//! | module   | owns                                                                 |
//! |----------|----------------------------------------------------------------------|
//! | `stream` | the task: the stream, its epoch check, its watchers by id             |
//! | `route`  | what one response means for the watcher it names (pure, a table test) |

use crate::error::ArbiterError;
use crate::error::Ended;
use crate::store::epoch::Epoch;
use etcd_client::{Event, WatchFilterType, WatchOptions, WatchStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

mod route;
mod stream;
use route::Kind;

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
        tokio::spawn(stream::run(source, rx));
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
