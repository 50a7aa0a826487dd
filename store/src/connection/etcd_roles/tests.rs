//! The plan from what etcd has to the roles wanted, and prefix range ends.

use super::*;

fn grant(prefix: &str, access: Access) -> Grant {
    Grant {
        prefix: prefix.into(),
        access,
    }
}

fn as_built() -> Current {
    let mut c = Current::default();
    for r in ROLES {
        c.roles.insert(
            r.name.into(),
            r.grants.iter().map(|(p, a)| grant(p, *a)).collect(),
        );
    }
    c.roles.insert("root".into(), BTreeSet::new());
    for u in USERS {
        c.users
            .insert(u.name.into(), u.roles.iter().map(|r| (*r).into()).collect());
    }
    c
}

#[test]
fn plan_table() {
    use Access::*;
    let s = |v: &str| v.to_owned();
    let fresh = plan(&Current::default(), ROLES, USERS);
    assert_eq!(fresh.first(), Some(&Change::AddRole(s("arbiter"))));
    assert!(fresh.contains(&Change::Grant(s("arbiter"), grant("/sys/", Read))));
    assert!(fresh.contains(&Change::Grant(s("operator"), grant("/sys/", Read))));
    assert!(fresh.contains(&Change::Grant(s("force"), grant("/sys/epoch", ReadWrite))));
    assert!(fresh.contains(&Change::AddUser(s("root"))));
    assert!(fresh.contains(&Change::GrantRole(s("root"), s("root"))));
    // Roles come before the users granted them.
    let first_user = fresh.iter().position(|c| matches!(c, Change::AddUser(_)));
    let last_role = fresh.iter().rposition(|c| matches!(c, Change::Grant(..)));
    assert!(last_role < first_user);

    // As built: nothing to do (a second apply changes nothing).
    assert_eq!(plan(&as_built(), ROLES, USERS), vec![]);

    // Someone widened the arbiter to write /sys/: narrowed back.
    let mut widened = as_built();
    let arbiter = widened.roles.get_mut("arbiter").unwrap();
    arbiter.remove(&grant("/sys/", Read));
    arbiter.insert(grant("/sys/", ReadWrite));
    assert_eq!(
        plan(&widened, ROLES, USERS),
        vec![
            Change::Revoke(s("arbiter"), grant("/sys/", ReadWrite)),
            Change::Grant(s("arbiter"), grant("/sys/", Read)),
        ]
    );

    // A grant on everything ("" prefix), a single key, and a second role on the
    // arbiter user: all taken away; a user that is not ours is left alone.
    let mut loose = as_built();
    loose
        .roles
        .get_mut("arbiter")
        .unwrap()
        .insert(grant("", ReadWrite));
    loose
        .odd
        .insert(s("arbiter"), vec![(b"/sys/epoch".to_vec(), Vec::new())]);
    loose
        .users
        .get_mut("arbiter")
        .unwrap()
        .insert(s("operator"));
    loose.users.insert(s("backup"), [s("root")].into());
    assert_eq!(
        plan(&loose, ROLES, USERS),
        vec![
            Change::Revoke(s("arbiter"), grant("", ReadWrite)),
            Change::RevokeRange {
                role: s("arbiter"),
                key: b"/sys/epoch".to_vec(),
                range_end: Vec::new()
            },
            Change::RevokeRole(s("arbiter"), s("operator")),
        ]
    );
}

#[test]
fn prefix_range_ends() {
    assert_eq!(prefix_range_end(b"/l/"), b"/l0".to_vec());
    assert_eq!(prefix_range_end(b"a\xff"), b"b".to_vec());
    assert_eq!(prefix_range_end(b"\xff"), vec![0]);
    assert_eq!(prefix_range_end(b""), vec![0]);
}
