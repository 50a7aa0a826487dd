//! etcd users and roles (RBAC): who may touch which part of the lock key space.
//!
//! | user     | role     | may                                                        |
//! |----------|----------|------------------------------------------------------------|
//! | arbiter  | arbiter  | read `/sys/`; read and write `/l/`, `/s/`, `/q/`, `/x/`, `/r/` |
//! | operator | operator | read `/sys/`, `/l/`, `/s/`, `/q/`, `/x/`, `/r/`; read and write `/sys/shard*` (shard moves) |
//! | auditor  | auditor  | read everything under `/`; read and write `/audit/` (its election) |
//! | force    | force    | read and write `/l/`, `/s/`, `/q/`, `/x/`, `/r/`, `/sys/force/`, `/sys/force-request/`, `/sys/epoch*`, `/sys/advance-request/`; read `/sys/shard*` (lock-admin) |
//! | root     | root     | everything: users and roles (`lockctl roles apply`), `epoch init`, `shards init`, break-glass |
//!
//! Users have no password: etcd names them by the common name of their client certificate
//! (`--client-cert-auth`, `etcd_tls.rs`). So neither the arbiter's credential nor one
//! operator's can move the epoch or delete a hold: an advance runs in lock-admin after a
//! second operator approves it (ADR-03), or as root (break-glass); and anything without a certificate from etcd's CA
//! is refused in the handshake; with one whose CN is no user, every call is refused.
//!
//! [`plan`] is pure (what to change to get from what etcd has to [`WANTED`]); [`apply`]
//! reads etcd, plans, applies, and enables auth, idempotently: a second run changes nothing.

use crate::records::layout::{
    ADVANCE_REQUEST_PREFIX, ATTEMPT_FENCE_PREFIX, AUDIT_PREFIX, DELAY_PREFIX, EPOCH_KEYS_PREFIX,
    FORCE_PREFIX, FORCE_REQUEST_PREFIX, HOLDER_PREFIX, KEYSPACE_PREFIX, PERMIT_PREFIX,
    QUEUE_PREFIX, SESSION_PREFIX, SHARD_KEYS_PREFIX, SHARED_PREFIX, SYS_PREFIX,
};
use etcd_client::{AuthClient, Permission, PermissionType, UserAddOptions};
use std::collections::{BTreeMap, BTreeSet};

/// What a permission allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Access {
    Read,
    ReadWrite,
}

/// One permission: `access` on every key under `prefix`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    pub prefix: String,
    pub access: Access,
}

pub struct RoleSpec {
    pub name: &'static str,
    pub grants: &'static [(&'static str, Access)],
}

pub struct UserSpec {
    pub name: &'static str,
    pub roles: &'static [&'static str],
}

/// Holds, sessions, durable waiters, settled grant attempts, shared holds and their
/// waiting writers, and lock-delay markers (`layout.rs`).
const LOCK_PREFIXES: [&str; 7] = [
    HOLDER_PREFIX,
    SESSION_PREFIX,
    QUEUE_PREFIX,
    ATTEMPT_FENCE_PREFIX,
    SHARED_PREFIX,
    DELAY_PREFIX,
    PERMIT_PREFIX,
];

/// The roles this service needs ("root" is etcd's built-in role: not listed, never edited).
pub const ROLES: &[RoleSpec] = &[
    RoleSpec {
        name: "arbiter",
        grants: &[
            (SYS_PREFIX, Access::Read),
            (LOCK_PREFIXES[0], Access::ReadWrite),
            (LOCK_PREFIXES[1], Access::ReadWrite),
            (LOCK_PREFIXES[2], Access::ReadWrite),
            (LOCK_PREFIXES[3], Access::ReadWrite),
            (LOCK_PREFIXES[4], Access::ReadWrite),
            (LOCK_PREFIXES[5], Access::ReadWrite),
            (LOCK_PREFIXES[6], Access::ReadWrite),
        ],
    },
    // An operator reads everything the service keeps and moves shards (the map document
    // and each shard's fence, `/sys/shards` and `/sys/shard-fence`). It cannot write
    // `/sys/epoch` (ADR-03: the advance is two-person, through lock-admin) nor delete a
    // hold (a force release is two-person too).
    RoleSpec {
        name: "operator",
        grants: &[
            (SYS_PREFIX, Access::Read),
            (SHARD_KEYS_PREFIX, Access::ReadWrite),
            (LOCK_PREFIXES[0], Access::Read),
            (LOCK_PREFIXES[1], Access::Read),
            (LOCK_PREFIXES[2], Access::Read),
            (LOCK_PREFIXES[3], Access::Read),
            (LOCK_PREFIXES[4], Access::Read),
            (LOCK_PREFIXES[5], Access::Read),
            (LOCK_PREFIXES[6], Access::Read),
        ],
    },
    RoleSpec {
        name: "auditor",
        grants: &[
            (KEYSPACE_PREFIX, Access::Read),
            (AUDIT_PREFIX, Access::ReadWrite),
        ],
    },
    // The admin server (lock-admin): two-person force releases (ADR-20) and epoch
    // advances (ADR-03). It deletes holds (etcd has no delete-only permission: write on
    // `/l/`), revoking a session's lease needs write on every key attached to it (`/l/`,
    // `/s/`, `/q/`, `/x/`, `/r/`, and `/p/`: a semaphore's permits), and it runs the approved advance (`/sys/epoch`), with the
    // new epoch from the coord cluster's allocator (`/sys/epoch-allocator`) once there are
    // shards: it reads `/sys/shard*` to know (a shard's fence, the map). It cannot move
    // shards. It never touches lock-delay markers (`/d/`): a hold it ends keeps its marker,
    // which is what makes the key's delay start (`lock/grant/delay.rs`).
    RoleSpec {
        name: "force",
        grants: &[
            (LOCK_PREFIXES[0], Access::ReadWrite),
            (LOCK_PREFIXES[1], Access::ReadWrite),
            (LOCK_PREFIXES[2], Access::ReadWrite),
            (LOCK_PREFIXES[3], Access::ReadWrite),
            (LOCK_PREFIXES[4], Access::ReadWrite),
            (LOCK_PREFIXES[6], Access::ReadWrite),
            (FORCE_PREFIX, Access::ReadWrite),
            (FORCE_REQUEST_PREFIX, Access::ReadWrite),
            (EPOCH_KEYS_PREFIX, Access::ReadWrite),
            (ADVANCE_REQUEST_PREFIX, Access::ReadWrite),
            (SHARD_KEYS_PREFIX, Access::Read),
        ],
    },
];

pub const USERS: &[UserSpec] = &[
    UserSpec {
        name: "root",
        roles: &["root"],
    },
    UserSpec {
        name: "arbiter",
        roles: &["arbiter"],
    },
    UserSpec {
        name: "operator",
        roles: &["operator"],
    },
    UserSpec {
        name: "auditor",
        roles: &["auditor"],
    },
    UserSpec {
        name: "force",
        roles: &["force"],
    },
];

/// A raw etcd permission range: (key, range end).
pub type KeyRange = (Vec<u8>, Vec<u8>);

/// What etcd has now: each role's grants (only prefix grants are representable here; any
/// other range shows as a grant to revoke) and each user's roles.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Current {
    pub roles: BTreeMap<String, BTreeSet<Grant>>,
    /// Grants in etcd that are not a plain prefix (a single key, a range): always revoked.
    pub odd: BTreeMap<String, Vec<KeyRange>>,
    pub users: BTreeMap<String, BTreeSet<String>>,
}

/// One change to etcd's auth state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    AddRole(String),
    Grant(String, Grant),
    Revoke(String, Grant),
    RevokeRange {
        role: String,
        key: Vec<u8>,
        range_end: Vec<u8>,
    },
    AddUser(String),
    GrantRole(String, String),
    RevokeRole(String, String),
}

/// The changes that turn `current` into `roles` and `users`, roles first (a user is granted
/// only roles that exist). Users and roles etcd has beyond these are left alone: they are
/// someone else's (shown by `lockctl roles show`).
pub fn plan(current: &Current, roles: &[RoleSpec], users: &[UserSpec]) -> Vec<Change> {
    let mut changes = Vec::new();
    for role in roles {
        let name = role.name.to_owned();
        let wanted: BTreeSet<Grant> = role
            .grants
            .iter()
            .map(|(prefix, access)| Grant {
                prefix: (*prefix).to_owned(),
                access: *access,
            })
            .collect();
        let empty = BTreeSet::new();
        let have = match current.roles.get(role.name) {
            Some(h) => h,
            None => {
                changes.push(Change::AddRole(name.clone()));
                &empty
            }
        };
        // A prefix granted with other access: revoke, then grant (etcd keeps one entry per
        // range, so a grant alone would do, but the plan then says what changed).
        for g in have.difference(&wanted) {
            changes.push(Change::Revoke(name.clone(), g.clone()));
        }
        for (key, range_end) in current.odd.get(role.name).into_iter().flatten() {
            changes.push(Change::RevokeRange {
                role: name.clone(),
                key: key.clone(),
                range_end: range_end.clone(),
            });
        }
        for g in wanted.difference(have) {
            changes.push(Change::Grant(name.clone(), g.clone()));
        }
    }
    for user in users {
        let name = user.name.to_owned();
        let wanted: BTreeSet<String> = user.roles.iter().map(|r| (*r).to_owned()).collect();
        let empty = BTreeSet::new();
        let have = match current.users.get(user.name) {
            Some(h) => h,
            None => {
                changes.push(Change::AddUser(name.clone()));
                &empty
            }
        };
        for r in have.difference(&wanted) {
            changes.push(Change::RevokeRole(name.clone(), r.clone()));
        }
        for r in wanted.difference(have) {
            changes.push(Change::GrantRole(name.clone(), r.clone()));
        }
    }
    changes
}

/// The end of the range covering every key that starts with `prefix` (etcd's
/// `GetPrefixRangeEnd`): the prefix with its last byte below 0xff incremented.
pub fn prefix_range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Change::AddRole(r) => write!(f, "add role {r}"),
            Change::Grant(r, g) => write!(f, "grant role {r} {:?} on {}*", g.access, g.prefix),
            Change::Revoke(r, g) => {
                write!(f, "revoke from role {r} {:?} on {}*", g.access, g.prefix)
            }
            Change::RevokeRange {
                role,
                key,
                range_end,
            } => write!(
                f,
                "revoke from role {role} the range [{}, {})",
                String::from_utf8_lossy(key),
                String::from_utf8_lossy(range_end)
            ),
            Change::AddUser(u) => write!(
                f,
                "add user {u} (no password: named by its certificate's CN)"
            ),
            Change::GrantRole(u, r) => write!(f, "grant user {u} role {r}"),
            Change::RevokeRole(u, r) => write!(f, "revoke from user {u} role {r}"),
        }
    }
}

/// Reads etcd's users and roles (needs root, or auth still disabled).
pub async fn read(auth: &mut AuthClient) -> Result<Current, etcd_client::Error> {
    let mut current = Current::default();
    for role in auth.role_list().await?.roles().to_vec() {
        if role == "root" {
            // Built in: every permission, nothing to list.
            current.roles.insert(role, BTreeSet::new());
            continue;
        }
        let perms = auth.role_get(role.as_str()).await?.permissions();
        let mut grants = BTreeSet::new();
        for p in perms {
            let access = match PermissionType::try_from(p.get_type()) {
                Ok(PermissionType::Read) => Some(Access::Read),
                Ok(PermissionType::Readwrite) => Some(Access::ReadWrite),
                // Write without read is not a shape this service grants.
                _ => None,
            };
            let is_prefix = p.range_end() == prefix_range_end(p.key()).as_slice();
            match (access, is_prefix, std::str::from_utf8(p.key())) {
                (Some(access), true, Ok(prefix)) => {
                    grants.insert(Grant {
                        prefix: prefix.to_owned(),
                        access,
                    });
                }
                _ => current
                    .odd
                    .entry(role.clone())
                    .or_default()
                    .push((p.key().to_vec(), p.range_end().to_vec())),
            }
        }
        current.roles.insert(role, grants);
    }
    for user in auth.user_list().await?.users().to_vec() {
        let roles = auth.user_get(user.as_str()).await?.roles().to_vec();
        current.users.insert(user, roles.into_iter().collect());
    }
    Ok(current)
}

/// Applies `changes`, then enables auth (a no-op when it is on). Returns what was done.
pub async fn apply(auth: &mut AuthClient, changes: &[Change]) -> Result<(), etcd_client::Error> {
    for change in changes {
        match change {
            Change::AddRole(r) => {
                auth.role_add(r.as_str()).await?;
            }
            Change::Grant(r, g) => {
                let perm = match g.access {
                    Access::Read => Permission::read(g.prefix.as_str()),
                    Access::ReadWrite => Permission::read_write(g.prefix.as_str()),
                }
                .with_prefix();
                auth.role_grant_permission(r.as_str(), perm).await?;
            }
            Change::Revoke(r, g) => {
                let end = prefix_range_end(g.prefix.as_bytes());
                let opts = etcd_client::RoleRevokePermissionOptions::new().with_range_end(end);
                auth.role_revoke_permission(r.as_str(), g.prefix.as_str(), Some(opts))
                    .await?;
            }
            Change::RevokeRange {
                role,
                key,
                range_end,
            } => {
                let opts = etcd_client::RoleRevokePermissionOptions::new()
                    .with_range_end(range_end.clone());
                auth.role_revoke_permission(role.as_str(), key.clone(), Some(opts))
                    .await?;
            }
            Change::AddUser(u) => {
                auth.user_add(u.as_str(), "", Some(UserAddOptions::new().with_no_pwd()))
                    .await?;
            }
            Change::GrantRole(u, r) => {
                auth.user_grant_role(u.as_str(), r.as_str()).await?;
            }
            Change::RevokeRole(u, r) => {
                auth.user_revoke_role(u.as_str(), r.as_str()).await?;
            }
        }
    }
    auth.auth_enable().await?;
    Ok(())
}

#[cfg(test)]
mod tests;
