//! The checker proven on planted anomalies (issue 17): a history recorded by a clean gate
//! run (`tests/fixtures/clean`: six keys, one of them durable, of `gate run --seconds 25
//! --out DIR` under four faults — their operations, the epoch advances, and the store log's
//! events for those keys, their sessions and the epoch record) passes; each anomaly
//! planted into it is caught — with the linearizability search given its usual budget and
//! with none at all (every key "unchecked"), so the per-key checks are shown to catch each on
//! their own.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use lock_gate::history::{Event, Kind, Phase, revision_bits as revision};
use lock_gate::store_log::StoreEvent;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/clean")
}

fn load() -> (Vec<Event>, Vec<StoreEvent>) {
    let read = |name: &str| std::fs::read_to_string(fixture().join(name)).unwrap();
    let events = read("workers.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let store = read("store.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (events, store)
}

/// The checks that fire on `events` + `store`, with the given linearizability budget.
fn verdict(events: &[Event], store: &[StoreEvent], steps: u64) -> (Vec<&'static str>, usize) {
    let dir = tempfile::tempdir().unwrap();
    let lines = |v: Vec<String>| v.join("\n") + "\n";
    std::fs::write(
        dir.path().join("workers.jsonl"),
        lines(
            events
                .iter()
                .map(|e| serde_json::to_string(e).unwrap())
                .collect(),
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("store.jsonl"),
        lines(
            store
                .iter()
                .map(|e| serde_json::to_string(e).unwrap())
                .collect(),
        ),
    )
    .unwrap();
    let report = lock_gate::check_history(dir.path(), steps).unwrap();
    let mut checks: Vec<&'static str> = report.violations.iter().map(|v| v.check).collect();
    checks.dedup();
    (checks, report.not_linearizable.len())
}

/// One acknowledged grant of the fixture, with the operations that used its token.
#[derive(Debug, Clone)]
struct Grant {
    key: String,
    client: u32,
    op: u64,
    session: i64,
    token: u64,
    invoked: u64,
    acked: u64,
}

/// Acknowledged grants per key, in acknowledgement order.
fn grants(events: &[Event]) -> BTreeMap<String, Vec<Grant>> {
    let mut invoked: BTreeMap<(u32, u64), &Event> = BTreeMap::new();
    let mut out: BTreeMap<String, Vec<Grant>> = BTreeMap::new();
    for e in events {
        match e.ph {
            Phase::Invoke => {
                invoked.insert((e.c, e.op), e);
            }
            Phase::Ok if e.f == Kind::Acquire => {
                let inv = invoked[&(e.c, e.op)];
                let key = inv.key.clone().unwrap();
                out.entry(key.clone()).or_default().push(Grant {
                    key,
                    client: e.c,
                    op: e.op,
                    session: inv.session.unwrap(),
                    token: e.token.unwrap(),
                    invoked: inv.t,
                    acked: e.t,
                });
            }
            _ => {}
        }
    }
    out
}

/// Two grants of one key to different clients, the second asked for after the first was
/// acknowledged: a clean handoff to plant into.
fn handoff(events: &[Event]) -> (Grant, Grant) {
    for gs in grants(events).values() {
        for w in gs.windows(2) {
            if w[0].client != w[1].client && w[0].token < w[1].token && w[1].invoked > w[0].acked {
                return (w[0].clone(), w[1].clone());
            }
        }
    }
    panic!("the fixture has no handoff");
}

/// The operations of client `c` on `key` using `token` after time `from` (writes, release).
fn uses(events: &[Event], g: &Grant) -> Vec<(u32, u64)> {
    events
        .iter()
        .filter(|e| {
            e.ph == Phase::Invoke
                && e.c == g.client
                && e.t > g.acked
                && e.token == Some(g.token)
                && e.key.as_deref() == Some(g.key.as_str())
        })
        .map(|e| (e.c, e.op))
        .collect()
}

fn retoken(events: &mut [Event], g: &Grant, token: u64) {
    let ops = uses(events, g);
    for e in events.iter_mut() {
        if (e.c, e.op) == (g.client, g.op) && e.ph == Phase::Ok
            || (e.ph == Phase::Invoke && ops.contains(&(e.c, e.op)))
        {
            e.token = Some(token);
        }
    }
}

fn release_of(events: &[Event], g: &Grant) -> (u32, u64) {
    uses(events, g)
        .into_iter()
        .find(|id| {
            events
                .iter()
                .any(|e| (e.c, e.op) == *id && e.f == Kind::Release)
        })
        .expect("the grant was released")
}

fn holder(g: &Grant) -> String {
    format!("/l/{}", g.key)
}

type Plant = fn(&mut Vec<Event>, &mut Vec<StoreEvent>, &Grant, &Grant);

#[test]
fn the_clean_history_passes_and_every_planted_anomaly_is_caught() {
    let (events, store) = load();
    assert_eq!(
        verdict(&events, &store, 20_000),
        (vec![], 0),
        "the clean history"
    );
    let (a, b) = handoff(&events);

    let plants: Vec<(&str, &str, Plant)> = vec![
        (
            "duplicate token to two sessions",
            "token-unique",
            |ev, _, a, b| retoken(ev, b, a.token),
        ),
        ("out-of-order token", "token-order", |ev, _, a, b| {
            retoken(ev, b, a.token - 1)
        }),
        ("overlapping holds", "exclusion", |ev, _, a, _| {
            // The first holder never released: it still held when the second was granted.
            let id = release_of(ev, a);
            ev.retain(|e| (e.c, e.op) != id);
        }),
        ("stale fence write accepted", "fence", |ev, _, a, _| {
            let t = ev.iter().map(|e| e.t).max().unwrap() + 1;
            for (ph, dt) in [(Phase::Invoke, 0), (Phase::Ok, 1)] {
                ev.push(Event {
                    c: a.client,
                    op: 1_000_000,
                    t: t + dt,
                    ph,
                    f: Kind::PgWrite,
                    key: (ph == Phase::Invoke).then(|| a.key.clone()),
                    session: Some(a.session),
                    token: (ph == Phase::Invoke).then_some(a.token),
                    why: None,
                    via: None,
                    served: None,
                    rev: None,
                    set: None,
                    shared: false,
                    permit: None,
                });
            }
        }),
        ("equal token accepted twice", "fence", |ev, _, _, b| {
            // The key's highest accepted PgWrite token, accepted once more: only the
            // strictness of the reference fence (`fence < $token`) forbids it.
            let mut invoked: BTreeMap<(u32, u64), &Event> = BTreeMap::new();
            let mut best: Option<(u64, u32, i64)> = None;
            for e in ev.iter() {
                if e.ph == Phase::Invoke {
                    invoked.insert((e.c, e.op), e);
                } else if e.ph == Phase::Ok && e.f == Kind::PgWrite {
                    let inv = invoked[&(e.c, e.op)];
                    if inv.key.as_deref() == Some(b.key.as_str()) {
                        let t = inv.token.unwrap();
                        if best.is_none_or(|(bt, _, _)| t > bt) {
                            best = Some((t, inv.c, inv.session.unwrap()));
                        }
                    }
                }
            }
            let (token, client, session) = best.expect("the key had PostgreSQL writes");
            let t = ev.iter().map(|e| e.t).max().unwrap() + 1;
            for (ph, dt) in [(Phase::Invoke, 0), (Phase::Ok, 1)] {
                ev.push(Event {
                    c: client,
                    op: 1_000_001,
                    t: t + dt,
                    ph,
                    f: Kind::PgWrite,
                    key: (ph == Phase::Invoke).then(|| b.key.clone()),
                    session: Some(session),
                    token: (ph == Phase::Invoke).then_some(token),
                    why: None,
                    via: None,
                    served: None,
                    rev: None,
                    set: None,
                    shared: false,
                    permit: None,
                });
            }
        }),
        ("grant with no store put", "backed", |_, st, _, b| {
            let (k, r) = (holder(b), revision(b.token));
            st.retain(|e| !(e.key == k && e.create_revision == r));
        }),
        ("grant with the wrong lease", "backed", |_, st, _, b| {
            let (k, r) = (holder(b), revision(b.token));
            for e in st
                .iter_mut()
                .filter(|e| e.key == k && e.create_revision == r)
            {
                e.lease ^= 0x5a5a;
            }
        }),
        (
            "holder record naming another identity",
            "backed",
            |_, st, a, b| {
                let (k, r) = (holder(b), revision(b.token));
                let other = lock_integration::registry::gate_id(a.client as usize + 100);
                for e in st
                    .iter_mut()
                    .filter(|e| e.key == k && e.create_revision == r)
                {
                    if e.holder.is_some() {
                        e.holder = Some(other.clone());
                    }
                }
            },
        ),
        ("grant with the wrong epoch", "backed", |ev, _, _, b| {
            retoken(ev, b, b.token + (1 << 48))
        }),
        ("refused own release", "release", |ev, st, _, b| {
            let id = release_of(ev, b);
            for e in ev
                .iter_mut()
                .filter(|e| (e.c, e.op) == id && e.ph != Phase::Invoke)
            {
                e.ph = Phase::Fail;
                e.why = Some("STALE_TOKEN".into());
            }
            // And the hold was never deleted: it was live when the release was refused.
            let (k, r) = (holder(b), revision(b.token));
            st.retain(|e| !(e.key == k && e.create_revision == r && e.delete));
        }),
    ];
    for (name, check, plant) in plants {
        let (mut ev, mut st) = (events.clone(), store.clone());
        plant(&mut ev, &mut st, &a, &b);
        ev.sort_by_key(|e| e.t);
        for steps in [20_000, 0] {
            let (checks, _) = verdict(&ev, &st, steps);
            assert!(
                checks.contains(&check),
                "{name}: expected [{check}], the checker said {checks:?} (linearizability budget {steps})"
            );
        }
    }
}
