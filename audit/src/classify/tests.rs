use super::*;
use lock_store::layout::encode;

fn holder(id: &str, session: &str) -> Vec<u8> {
    encode(&Holder {
        spiffe_id: format!("spiffe://t/{id}"),
        instance: None,
        session: session.into(),
        class: "ledger".into(),
        acquired_at_ms: 1,
    })
}

fn session(id: &str, closing: bool) -> Vec<u8> {
    encode(&SessionRecord {
        spiffe_id: format!("spiffe://t/{id}"),
        instance: None,
        ttl_seconds: 10,
        closing,
    })
}

fn kinds(changes: &[Change]) -> Vec<(String, Kind)> {
    classify(7, changes)
        .into_iter()
        .map(|r| (r.key, r.kind))
        .collect()
}

#[test]
fn table() {
    use Kind::*;
    let s = |k: &str| k.to_owned();
    let a1 = holder("a", "a1");
    let b2 = holder("b", "b2");
    type Case<'a> = (&'a str, Vec<Change>, Vec<(String, Kind)>);
    let cases: Vec<Case> = vec![
        (
            "grant",
            vec![Change::put("/l/pay/1", &a1, None)],
            vec![(s("pay/1"), Grant)],
        ),
        (
            "handoff: the release Txn overwrites the record with the head's",
            vec![Change::put("/l/pay/1", &b2, Some(&a1))],
            vec![(s("pay/1"), Handoff)],
        ),
        (
            "release",
            vec![Change::delete("/l/pay/1", Some(&a1))],
            vec![(s("pay/1"), Release)],
        ),
        (
            "expiry: the record and the holds at one revision, no mark",
            vec![
                Change::delete("/l/pay/1", Some(&a1)),
                Change::delete("/l/pay/2", Some(&a1)),
                Change::delete("/s/a1", Some(&session("a", false))),
            ],
            vec![
                (s("/s/a1"), SessionExpiry),
                (s("pay/1"), Expiry),
                (s("pay/2"), Expiry),
            ],
        ),
        (
            "close: the same deletes, the record marked closing",
            vec![
                Change::delete("/l/pay/1", Some(&a1)),
                Change::delete("/s/a1", Some(&session("a", true))),
            ],
            vec![(s("/s/a1"), SessionClose), (s("pay/1"), ClosedWithSession)],
        ),
        (
            "another session's release at the revision of an expiry is still a release",
            vec![
                Change::delete("/l/pay/1", Some(&b2)),
                Change::delete("/s/a1", Some(&session("a", false))),
            ],
            vec![(s("/s/a1"), SessionExpiry), (s("pay/1"), Release)],
        ),
        (
            "session open",
            vec![Change::put("/s/a1", &session("a", false), None)],
            vec![(s("/s/a1"), SessionOpen)],
        ),
        (
            "the close mark alone is no row (the revoke records the close)",
            vec![Change::put(
                "/s/a1",
                &session("a", true),
                Some(&session("a", false)),
            )],
            vec![],
        ),
        (
            "epoch advance deletes every hold",
            vec![
                Change::put(
                    "/sys/epoch",
                    br#"{"epoch":2,"cluster_id":"c"}"#,
                    Some(br#"{"epoch":1,"cluster_id":"c"}"#),
                ),
                Change::delete("/l/pay/1", Some(&a1)),
                Change::delete("/q/pay/1/b2", Some(b"w")),
            ],
            vec![
                (s("/sys/epoch"), EpochAdvance),
                (s("pay/1"), RevokedByAdvance),
            ],
        ),
        (
            "the first epoch record is its init, not an advance",
            vec![Change::put(
                "/sys/epoch",
                br#"{"epoch":1,"cluster_id":"c"}"#,
                None,
            )],
            vec![(s("/sys/epoch"), EpochInit)],
        ),
        (
            "a move rewrites a shard's fence: no advance, nothing revoked",
            vec![Change::put(
                "/sys/shard-fence",
                br#"{"name":"e1","version":1,"pending":2}"#,
                Some(br#"{"name":"e1","version":1}"#),
            )],
            vec![(s("/sys/shard-fence"), ShardMap)],
        ),
        (
            "force release writes its record with the delete",
            vec![
                Change::put("/sys/force/f1", br#"{"reason":"leak"}"#, None),
                Change::delete("/l/pay/1", Some(&a1)),
            ],
            vec![
                (s("/sys/force/f1"), ForceRelease),
                (s("pay/1"), ForceRelease),
            ],
        ),
        (
            "durable waiters are not audited",
            vec![Change::put("/q/pay/1/b2", b"w", None)],
            vec![],
        ),
        (
            "a force release filed",
            vec![Change::put(
                "/sys/force-request/f1",
                br#"{"reason":"leak"}"#,
                None,
            )],
            vec![(s("/sys/force-request/f1"), ForceRequest)],
        ),
        (
            "a filed request withdrawn, approved or expired is no event",
            vec![Change::delete("/sys/force-request/f1", Some(b"{}"))],
            vec![],
        ),
        (
            "a force record's lease ending is no event",
            vec![Change::delete("/sys/force/f1", Some(b"{}"))],
            vec![],
        ),
    ];
    for (name, changes, want) in cases {
        assert_eq!(kinds(&changes), want, "{name}");
    }
}

#[test]
fn rows_name_holder_session_class_and_never_a_token() {
    let rows = classify(
        9,
        &[Change::put(
            "/l/pay/1",
            &holder("b", "b2"),
            Some(&holder("a", "a1")),
        )],
    );
    let r = &rows[0];
    assert_eq!(
        (
            r.revision,
            r.spiffe_id.as_str(),
            r.session.as_str(),
            r.class.as_str()
        ),
        (9, "spiffe://t/b", "b2", "ledger")
    );
    assert!(
        r.detail.contains("spiffe://t/a") && r.detail.contains("a1"),
        "{}",
        r.detail
    );
    let advance = classify(
        3,
        &[Change::put(
            "/sys/epoch",
            br#"{"epoch":2,"cluster_id":"c"}"#,
            Some(br#"{"epoch":1,"cluster_id":"c"}"#),
        )],
    );
    assert_eq!(advance[0].detail, r#"{"from":1,"to":2}"#);
    // Two operators' advance: both named, from the record itself.
    let approved = classify(
            4,
            &[Change::put(
                "/sys/epoch",
                br#"{"epoch":3,"cluster_id":"c","advanced_by":{"request":"r1","reason":"restore","requester":"alice","approver":"bob","break_glass":false}}"#,
                Some(br#"{"epoch":2,"cluster_id":"c"}"#),
            )],
        );
    assert!(
        approved[0].detail.contains(r#""requester":"alice""#)
            && approved[0].detail.contains(r#""approver":"bob""#),
        "{}",
        approved[0].detail
    );
    assert_eq!(gap(5, 9).detail, r#"{"from":5,"to":9}"#);
    for k in Kind::ALL {
        assert_eq!(Kind::parse(k.as_str()), Some(k));
    }
}
