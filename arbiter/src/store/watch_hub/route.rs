//! What one watch response means for the watcher it names: a pure step on plain data, so
//! the rules are a table (`tests.rs`) rather than a reading of the stream loop.

/// The two kinds of watcher on the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// A queue head: the first event, then the watch is cancelled.
    First,
    /// An Observe: every event until it drops its watch.
    Every,
}

/// A response as the hub reads it (`heard`, from etcd's struct).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Heard {
    /// A watch's creation acknowledged.
    Created,
    /// etcd cancelled the watch (its start revision compacted: `compact_revision`, else 0),
    /// or acknowledged the hub's own cancel.
    Cancelled { compact_revision: i64 },
    /// No events: the stream's answer to a progress request, at the header's revision.
    Progress { revision: i64 },
    /// The watch's events: the first one's revision and the header's.
    Events { first: i64, revision: i64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    /// Nothing to tell: a creation, a response for a watch already gone, a head's own
    /// progress mark (an older etcd answers a progress request once per watch).
    Ignore,
    /// Every Observe on the stream is told the stream's progress.
    Progress(i64),
    /// The head is told its key was released at this revision; its watch is cancelled.
    Fire(i64),
    /// etcd cancelled the head's watch: it is told Broken (its grant decides).
    Broken,
    /// The Observe is told the response's events, at the header's revision.
    Forward(i64),
    /// etcd cancelled the Observe's watch: it is told Compacted and leaves.
    Compacted(i64),
}

/// The route of a response for the watcher its id names (`None`: no watcher, or the
/// stream-wide id a progress answer carries).
pub(super) fn route(heard: Heard, to: Option<Kind>) -> Route {
    match (heard, to) {
        (Heard::Progress { revision }, None | Some(Kind::Every)) => Route::Progress(revision),
        (_, None) | (Heard::Created, _) | (Heard::Progress { .. }, Some(Kind::First)) => {
            Route::Ignore
        }
        (Heard::Cancelled { .. }, Some(Kind::First)) => Route::Broken,
        (Heard::Cancelled { compact_revision }, Some(Kind::Every)) => {
            Route::Compacted(compact_revision)
        }
        (Heard::Events { first, .. }, Some(Kind::First)) => Route::Fire(first),
        (Heard::Events { revision, .. }, Some(Kind::Every)) => Route::Forward(revision),
    }
}

#[cfg(test)]
mod tests;
