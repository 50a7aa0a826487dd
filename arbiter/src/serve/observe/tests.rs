//! Who sees a hold's token, and the event each end is reported as.

use super::*;

fn holder(spiffe_id: &str, session: &str) -> Holder {
    Holder {
        spiffe_id: spiffe_id.into(),
        instance: Some("replica-a".into()),
        session: session.into(),
        class: "pay".into(),
        acquired_at_ms: 1,
    }
}

/// Who sees the token: the holder's own session, by its own identity, while it holds.
#[test]
fn the_token_goes_to_the_holders_own_session_only() {
    let a = "spiffe://t/ns/pay/sa/a";
    let b = "spiffe://t/ns/pay/sa/b";
    let held = |event| Seen {
        event,
        revision: 9,
        holder: Some(holder(a, "1f")),
        held: event != ObserveEvent::Released,
        epoch: 1,
        grant_revision: 7,
        store_epoch: 1,
    };
    let viewer = |identity: &str, session: Option<&str>| Viewer {
        identity: identity.into(),
        session: session.map(Into::into),
    };
    let token = FencingToken::pack(1, 7).unwrap().as_u64();
    let table = [
        // (what, who, bug, token seen)
        (ObserveEvent::Granted, viewer(a, Some("1f")), false, token),
        (ObserveEvent::Current, viewer(a, Some("1f")), false, token),
        // A sibling replica: the same identity, its own session.
        (ObserveEvent::Granted, viewer(a, Some("2a")), false, 0),
        // The same identity naming no session.
        (ObserveEvent::Granted, viewer(a, None), false, 0),
        // Another identity naming the holder's session.
        (ObserveEvent::Granted, viewer(b, Some("1f")), false, 0),
        // An ended hold's answer carries no token, even to its holder.
        (ObserveEvent::Released, viewer(a, Some("1f")), false, 0),
        // The injected bug hands it to everyone.
        (ObserveEvent::Granted, viewer(b, None), true, token),
    ];
    for (event, v, bug, want) in table {
        let got = answer(&held(event), &v, bug);
        assert_eq!(got.token, want, "{event:?} {v:?} bug {bug}");
        assert_eq!(got.holder_spiffe_id, a);
        assert_eq!(got.holder_instance, "replica-a");
        assert_eq!(got.grant_revision, 7);
    }
    // A free key: nothing to hand anyone.
    let free = Seen {
        event: ObserveEvent::Current,
        revision: 3,
        ..Seen::default()
    };
    let got = answer(&free, &viewer(a, Some("")), true);
    assert_eq!(
        (got.held, got.token, got.holder_spiffe_id.as_str()),
        (false, 0, "")
    );
}

#[test]
fn every_end_has_its_event() {
    let table = [
        (HoldEnd::Released, ObserveEvent::Released),
        (HoldEnd::Expired, ObserveEvent::Expired),
        (HoldEnd::ClosedWithSession, ObserveEvent::Closed),
        (HoldEnd::Forced, ObserveEvent::Forced),
        (HoldEnd::RevokedByAdvance, ObserveEvent::Revoked),
    ];
    for (end, want) in table {
        assert_eq!(event_of(end), want);
    }
}
