//! Every response against every kind of watcher (and none), as the two hubs before issue 51
//! answered them: a head woken by its first event and Broken by a cancel, an Observe told
//! every event, its compaction and the stream's progress.

use super::*;

#[test]
fn every_response_for_every_watcher() {
    use Heard::*;
    let first = Some(Kind::First);
    let every = Some(Kind::Every);
    let events = Events {
        first: 7,
        revision: 9,
    };
    let compacted = Cancelled {
        compact_revision: 4,
    };
    let table = [
        // A creation's acknowledgement tells nobody.
        (Created, first, Route::Ignore),
        (Created, every, Route::Ignore),
        (Created, None, Route::Ignore),
        // A head is woken by its first event's revision; an Observe gets the header's.
        (events, first, Route::Fire(7)),
        (events, every, Route::Forward(9)),
        (events, None, Route::Ignore),
        // etcd's cancel: a head retries its grant, an Observe is told the compaction.
        (compacted, first, Route::Broken),
        (compacted, every, Route::Compacted(4)),
        // The acknowledgement of the hub's own cancel: the watcher has left already.
        (compacted, None, Route::Ignore),
        // Progress is the stream's (id -1 on a recent etcd), for every Observe; an older
        // etcd answers per watch, and a head's copy tells the Observes nothing new.
        (Progress { revision: 5 }, None, Route::Progress(5)),
        (Progress { revision: 5 }, every, Route::Progress(5)),
        (Progress { revision: 5 }, first, Route::Ignore),
    ];
    for (heard, to, want) in table {
        assert_eq!(route(heard, to), want, "{heard:?} for {to:?}");
    }
}
