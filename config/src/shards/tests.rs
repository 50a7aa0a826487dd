use super::*;

#[test]
fn home_table() {
    for (key, depth, want) in [
        ("pay/ledger/42", 0, "pay"),
        ("pay/ledger/42", 1, "pay/ledger"),
        ("pay/ledger/42", 2, "pay/ledger/42"),
        ("pay/ledger/42", 9, "pay/ledger/42"),
        ("pay", 1, "pay"),
    ] {
        assert_eq!(home(key, depth), want, "{key} at {depth}");
    }
}

#[test]
fn keys_of_one_home_stay_together_and_overrides_pin() {
    let mut m = uniform(8, 1);
    let a = m.shard_of("pay/ledger/1").to_owned();
    for i in 0..50 {
        assert_eq!(m.shard_of(&format!("pay/ledger/{i}")), a);
    }
    m.overrides.insert("pay".into(), "shard-3".into());
    assert_eq!(m.shard_of("pay/anything/1"), "shard-3");
    assert_eq!(m.validate(), Ok(()));
    m.overrides.insert("x".into(), "shard-99".into());
    assert_eq!(
        m.validate(),
        Err(ShardMapError::UnknownOverride(
            "x".into(),
            "shard-99".into()
        ))
    );
}

#[test]
fn validation_table() {
    let mut dup = uniform(2, 1);
    dup.shards[1].name = "shard-0".into();
    let cases = [
        (uniform(0, 1), Err(ShardMapError::NoShards)),
        (dup, Err(ShardMapError::Duplicate("shard-0".into()))),
        (uniform(3, 1), Ok(())),
    ];
    for (m, want) in cases {
        assert_eq!(m.validate(), want);
    }
}

#[test]
fn adding_a_shard_moves_about_one_in_n_plus_one_and_only_to_it() {
    let keys = sample_keys(100_000, 1000);
    for n in [1, 2, 4, 9] {
        // depth 1: every key its own home here (obj-<i>).
        let s = simulate_add(n, &keys, 1);
        assert_eq!(s.moved_between_old, 0, "{s:?}");
        assert!(
            (s.fraction - s.ideal).abs() < s.ideal * 0.1,
            "n={n}: moved {:.4}, ideal {:.4}",
            s.fraction,
            s.ideal
        );
    }
}

#[test]
fn removing_a_shard_moves_only_its_keys() {
    let keys = sample_keys(20_000, 100);
    let old = uniform(5, 1);
    let mut new = old.clone();
    new.shards.retain(|s| s.name != "shard-2");
    let (moved, by) = moves(&old, &new, keys.iter().map(String::as_str));
    assert!(by.keys().all(|(from, _)| from == "shard-2"), "{by:?}");
    let had = load(&old, keys.iter().map(String::as_str))["shard-2"];
    assert_eq!(moved, had);
}

fn two_shards(version: u64) -> ShardMap {
    ShardMap {
        version,
        depth: 1,
        shards: vec![
            Shard {
                name: "e1".into(),
                endpoints: vec![],
            },
            Shard {
                name: "e2".into(),
                endpoints: vec![],
            },
        ],
        overrides: BTreeMap::new(),
    }
}

#[test]
fn placement_table() {
    let v1 = two_shards(1);
    // v2 pins namespace `pay` to the shard it is not on; everything else stays.
    let from = v1.shard_of("pay/ledger/1").to_owned();
    let to = if from == "e1" { "e2" } else { "e1" }.to_owned();
    let mut v2 = two_shards(2);
    v2.overrides.insert("pay".into(), to.clone());
    let staying = (0..100)
        .map(|i| format!("ops/k{i}/x"))
        .find(|k| v1.shard_of(k) == "e1")
        .unwrap();
    let settled = ShardsDoc {
        current: v1.clone(),
        pending: None,
    };
    let moving = ShardsDoc {
        current: v1.clone(),
        pending: Some(v2.clone()),
    };
    let flipped = ShardsDoc {
        current: v2.clone(),
        pending: None,
    };
    let fence = |name: &str, version, pending| ShardFence {
        name: name.into(),
        version,
        pending,
    };
    let pay = "pay/ledger/1";
    let here = Placement::Here;
    let elsewhere = |s: &str| Placement::Elsewhere(s.into());
    for (doc, f, key, want) in [
        // Settled map: the home grants, the other shard points there.
        (
            &settled,
            fence("e1", 1, None),
            staying.as_str(),
            here.clone(),
        ),
        (&settled, fence("e2", 1, None), &staying, elsewhere("e1")),
        // During the move: a moving key is refused on both sides; others are not.
        (&moving, fence(&from, 1, Some(2)), pay, Placement::Moving),
        (&moving, fence(&to, 1, Some(2)), pay, Placement::Moving),
        (&moving, fence("e1", 1, Some(2)), &staying, here.clone()),
        // A doc without the versions the fence names is stale, whatever the key.
        (
            &settled,
            fence("e1", 1, Some(2)),
            &staying,
            Placement::StaleDoc,
        ),
        (
            &settled,
            fence("e1", 2, None),
            &staying,
            Placement::StaleDoc,
        ),
        // After the flip: the destination grants (a doc with v2 pending suffices), the
        // source sends the moved key on.
        (&moving, fence(&to, 2, None), pay, here.clone()),
        (&flipped, fence(&to, 2, None), pay, here.clone()),
        (&flipped, fence(&from, 2, None), pay, elsewhere(&to)),
        (&moving, fence(&from, 2, None), pay, elsewhere(&to)),
    ] {
        assert_eq!(placement(doc, &f, key), want, "{f:?} {key}");
    }
}

#[test]
fn lease_tags_name_the_cluster_and_keep_ids_positive() {
    for name in [COORD, "e1", "e2", "shard-7"] {
        let tag = lease_tag(name);
        assert_ne!(tag, 0);
        for r in [0, 1, u64::MAX, 0x1234_5678_9abc_def0] {
            let id = tagged_lease(tag, r);
            assert!(id > 0, "{name} {r:#x}");
            assert_eq!(tag_of(id), tag, "{name} {r:#x}");
        }
    }
}

#[test]
fn validate_refuses_the_coord_name_and_tag_collisions() {
    let mut m = two_shards(1);
    m.shards[0].name = COORD.into();
    assert_eq!(m.validate(), Err(ShardMapError::Reserved));
    // Find two names with one tag (256 tags: a handful of tries).
    let mut seen = BTreeMap::new();
    let (a, b) = (0..10_000)
        .map(|i| format!("s{i}"))
        .find_map(|n| seen.insert(lease_tag(&n), n.clone()).map(|o| (o, n)))
        .unwrap();
    let mut m = two_shards(1);
    m.shards[0].name = a;
    m.shards[1].name = b;
    assert!(matches!(m.validate(), Err(ShardMapError::TagCollision(..))));
    assert_eq!(two_shards(1).validate(), Ok(()));
}
