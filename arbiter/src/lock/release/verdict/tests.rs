//! The release's verdicts, case by case: a refused handoff, a token's epoch, a plain release.

use super::*;

#[test]
fn handoff_table() {
    use HeadTold::{NotNow, SessionGone};
    let cases = [
        // (epoch unchanged, head's session bound, head holds a permit, head told, verdict)
        (false, true, false, NotNow, Released::EpochMoved),
        (false, false, false, NotNow, Released::EpochMoved), // the moved epoch explains all
        (false, true, true, NotNow, Released::EpochMoved),
        (true, false, false, SessionGone, Released::Retry), // plain release decides
        (true, false, true, SessionGone, Released::Retry),
        // A semaphore's head that got a permit of its own meanwhile: never a second one
        // (found by the gate: one session held two permits of a key).
        (true, true, true, NotNow, Released::Retry),
        (true, true, false, NotNow, Released::Stale), // the releaser's grant is gone
    ];
    for (epoch, head, holds, told, released) in cases {
        assert_eq!(
            handoff_verdict(epoch, head, holds),
            (told, released),
            "{epoch} {head} {holds}"
        );
    }
}

#[test]
fn token_epoch_table() {
    use Released::{EpochMoved, Stale};
    let cases = [
        // (token's epoch, cached epoch, cache just re-read, verdict)
        (2, 2, false, Ok(())),
        (2, 2, true, Ok(())),
        (1, 2, false, Err(Stale)), // from before an advance
        (1, 2, true, Err(Stale)),
        (3, 2, false, Err(EpochMoved)), // the cache is behind: re-read, do not refuse
        (3, 2, true, Err(Stale)),       // re-read and still ahead: no epoch of ours
    ];
    for (token, cached, fresh, want) in cases {
        assert_eq!(
            token_epoch_verdict(token, cached, fresh),
            want,
            "{token} {cached} {fresh}"
        );
    }
}

#[test]
fn release_verdict_table() {
    let cases = [
        // (committed, epoch record's mod revision read back, compared, verdict)
        (Some(12), None, 5, Ok(Released::Done(12))),
        (None, Some(5), 5, Err("stale")), // same epoch: not this token's grant
        (None, Some(9), 5, Ok(Released::EpochMoved)), // advanced: retry
        (None, None, 5, Ok(Released::EpochMoved)), // record gone: re-read it
    ];
    for (committed, seen, compared, want) in cases {
        let got = release_verdict(committed, seen, compared);
        match (got, want) {
            (Ok(g), Ok(w)) => assert_eq!(g, w),
            (Err(ArbiterError::StaleToken), Err(_)) => {}
            (g, w) => panic!("{committed:?} {seen:?} {compared}: got {g:?}, want {w:?}"),
        }
    }
}
