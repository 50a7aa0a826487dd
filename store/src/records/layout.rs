//! The etcd key layout and record encodings (DESIGN 4.2). Pure: encoding only.
//!
//! ```text
//! /sys/epoch                 EpochRecord {epoch, cluster_id, advanced_by?}
//! /sys/shard-fence           ShardFence {name, version, pending?}  entity shards only (ADR-09)
//! /sys/shards                ShardsDoc {current, pending?}   coord cluster only (ADR-09)
//! /sys/epoch-allocator       EpochAllocator {last}          coord cluster only (ADR-03, 07)
//! /l/<namespace>/<path>      Holder {spiffe_id, instance?, session, class, acquired_at_ms}  on the session lease
//! /s/<lease-hex>             SessionRecord {spiffe_id, instance?, ttl_seconds, closing?}   on the session lease
//! /q/<namespace>/<path>//<lease-hex>  a durable waiter (`fairness: durable`), on its session lease
//! /x/<lease-hex>/<nonce>     a settled grant attempt's fence (empty), on its session lease
//! /p/<namespace>/<path>//<i>  Holder: permit i (0..N-1) of a semaphore (`permits: N` class), on its session lease
//! /d/<namespace>/<path>      DelayMarker {session}: a lock-delay class's hold (no lease), then its delay (on a lease of the delay)
//! /r/<namespace>/<path>//s/<lease-hex>  a shared hold (`shared: true` class): Holder, on its session lease
//! /r/<namespace>/<path>//w/<lease-hex>  an exclusive waiter of a shared class (empty), on its session lease
//! /sys/force-request/<id>    a filed force release awaiting a second operator (lock-force)
//! /sys/force/<id>            an executed force release's record, on a 24 h lease (lock-force)
//! /sys/advance-request/<id>  a filed epoch advance awaiting a second operator (lock-force)
//! ```
//!
//! `/s/` is an addition to DESIGN 4.2: it binds a session (etcd lease) to the identity that
//! opened it, so one identity cannot attach holds to, renew or close another's session. The
//! grant transaction compares its create revision, which also tells "session expired" apart
//! from contention in the same round trip.

use lock_config::LockKey;
use serde::{Deserialize, Serialize};

pub const EPOCH_KEY: &str = "/sys/epoch";
/// An entity shard's map fence (ADR-09): the map version it serves. Its own key, not a
/// field of the epoch record, so etcd's roles can let an operator move shards (write
/// `/sys/shard*`) while only lock-admin, after a second operator's approval, may write
/// `/sys/epoch` (ADR-03). Every grant, handoff and release on a shard compares it beside
/// the epoch record.
pub const SHARD_FENCE_KEY: &str = "/sys/shard-fence";
/// Filed epoch advances awaiting a second operator's approval (ADR-03, lock-force).
pub const ADVANCE_REQUEST_PREFIX: &str = "/sys/advance-request/";
/// The shard map document (coord cluster): `lock_config::shards::ShardsDoc`.
pub const SHARDS_KEY: &str = "/sys/shards";
/// The last epoch number handed to any cluster (coord cluster): no two clusters ever
/// mint tokens in one epoch, so a key moved between them never sees its token go back.
pub const EPOCH_ALLOCATOR_KEY: &str = "/sys/epoch-allocator";
pub const HOLDER_PREFIX: &str = "/l/";
pub const SESSION_PREFIX: &str = "/s/";
pub const QUEUE_PREFIX: &str = "/q/";
/// Settled grant attempts (issue 34): a grant transaction whose answer was lost may still
/// be applied later (held in a member cut from the leader). Each attempt compares its own
/// key here absent; putting that key settles the attempt, which can then never commit.
pub const ATTEMPT_FENCE_PREFIX: &str = "/x/";
/// Semaphores (issue 53): permit `i` of a `permits: N` class's key is `/p/<key>//<i>`, a
/// holder record on its session's lease. After the key comes `//`, an empty segment no key
/// can have, so `/p/<key>//` is a prefix of exactly that key's permits (as `/r/`).
pub const PERMIT_PREFIX: &str = "/p/";

/// Lock-delay (issue 53), for a class with `lockDelaySeconds`: the grant puts
/// `/d/<key>` with no lease beside the holder record, and every release deletes both in
/// one transaction. A holder record gone while its marker stays is a hold that ended
/// without a release (its session expired, a force release, an epoch advance): the next
/// grant attempt that sees it rewrites the marker on a lease of the delay, and no grant
/// passes while a marker exists (each compares it absent). The delay thus runs from
/// when the end is seen, never shorter than from the end itself.
pub const DELAY_PREFIX: &str = "/d/";
/// Executed force releases (ADR-20): written in the release's own transaction, so the
/// audit trail classifies the hold's delete at that revision as a force release.
pub const FORCE_PREFIX: &str = "/sys/force/";
/// Filed force releases awaiting approval. Not under [`FORCE_PREFIX`]: filing is no event
/// of a hold.
pub const FORCE_REQUEST_PREFIX: &str = "/sys/force-request/";

/// Shared holds and the exclusive waiters of `shared: true` classes (issue 35). Not under
/// `/l/<key>/`: a key's path has segments of its own, so `/l/pay/a/…` is also where the
/// holder of `pay/a/b` lives. After the key comes `//`, an empty segment no key can have,
/// so `/r/<key>//` is a prefix of exactly that key's records. Exclusive holds of a shared
/// class stay at `/l/<key>`, as every other class's: nothing existing moves.
pub const SHARED_PREFIX: &str = "/r/";

/// Every system record (`/sys/…`): the epoch record, the shard keys, force releases and
/// advances.
pub const SYS_PREFIX: &str = "/sys/";
/// The epoch record's key as a prefix (`/sys/epoch*`): it also covers
/// [`EPOCH_ALLOCATOR_KEY`].
pub const EPOCH_KEYS_PREFIX: &str = EPOCH_KEY;
/// Both shard keys (`/sys/shard*`): [`SHARDS_KEY`] and [`SHARD_FENCE_KEY`].
pub const SHARD_KEYS_PREFIX: &str = "/sys/shard";
/// The audit trail's own keys: its leader election (lock-audit).
pub const AUDIT_PREFIX: &str = "/audit/";
/// The whole key space: every key above is under it.
pub const KEYSPACE_PREFIX: &str = "/";

/// Every shared hold of `key`: `/r/<key>//s/`.
pub fn shared_holds_prefix(key: &LockKey) -> String {
    format!("{SHARED_PREFIX}{}//s/", key.as_str())
}

/// The shared hold of `key` on the session `lease`.
pub fn shared_hold_key(key: &LockKey, lease: i64) -> String {
    format!("{}{}", shared_holds_prefix(key), lease_hex(lease))
}

/// Every exclusive waiter of `key` (a shared class): `/r/<key>//w/`. While one is there,
/// no new shared hold is granted.
pub fn writers_waiting_prefix(key: &LockKey) -> String {
    format!("{SHARED_PREFIX}{}//w/", key.as_str())
}

/// The exclusive waiter mark of the session `lease` on `key`.
pub fn writer_waiting_key(key: &LockKey, lease: i64) -> String {
    format!("{}{}", writers_waiting_prefix(key), lease_hex(lease))
}

/// Every permit of `key`: `/p/<key>//`.
pub fn permits_prefix(key: &LockKey) -> String {
    format!("{PERMIT_PREFIX}{}//", key.as_str())
}

/// Permit `i` of `key`.
pub fn permit_key(key: &LockKey, i: u32) -> String {
    format!("{}{i}", permits_prefix(key))
}

/// The permit number of a key under `permits_prefix` (None: not a permit key).
pub fn permit_of(prefix: &str, etcd_key: &[u8]) -> Option<u32> {
    std::str::from_utf8(etcd_key)
        .ok()?
        .strip_prefix(prefix)?
        .parse()
        .ok()
}

/// The lock-delay marker of `key` (see [`DELAY_PREFIX`]).
pub fn delay_key(key: &LockKey) -> String {
    format!("{DELAY_PREFIX}{}", key.as_str())
}

pub fn holder_key(key: &LockKey) -> String {
    format!("{HOLDER_PREFIX}{}", key.as_str())
}

/// The fence of one grant attempt of the session on `lease`.
pub fn attempt_fence_key(lease: i64, nonce: u64) -> String {
    format!("{ATTEMPT_FENCE_PREFIX}{}/{nonce:016x}", lease_hex(lease))
}

pub fn session_key(lease: i64) -> String {
    format!("{SESSION_PREFIX}{}", lease_hex(lease))
}

/// Leases are shown as etcdctl shows them: lower-case hex.
pub fn lease_hex(lease: i64) -> String {
    format!("{lease:x}")
}

/// The epoch record (ADR-03): the current epoch and the etcd cluster ID it was minted for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochRecord {
    pub epoch: u16,
    /// etcd cluster ID, lower-case hex as etcdctl prints it.
    pub cluster_id: String,
    /// Who advanced to this epoch (ADR-03): the filed request and both operators, or a
    /// break-glass advance by etcd's root. None for an epoch made by `epoch init`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advanced_by: Option<AdvancedBy>,
}

/// The people behind an epoch advance, kept in the epoch record itself so the audit
/// trail's `epoch-advance` row names them from the same revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdvancedBy {
    /// The request's id (empty for break-glass).
    #[serde(default)]
    pub request: String,
    pub reason: String,
    /// "issuer subject (name)" of the operator who filed it (break-glass: the name given).
    pub requester: String,
    /// The second operator (empty for break-glass).
    #[serde(default)]
    pub approver: String,
    #[serde(default)]
    pub break_glass: bool,
}

/// The coord cluster's epoch allocator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochAllocator {
    pub last: u16,
}

impl EpochRecord {
    pub fn cluster_id_hex(id: u64) -> String {
        format!("{id:x}")
    }
}

/// The holder of a key. Never contains the token: the token is derived from the record's
/// mod revision (the write that made this session holder) and handed only to the session
/// that was granted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub spiffe_id: String,
    /// The holding session's process instance (`lock_config::instance`), if its client
    /// sent one: leak detection compares it (ADR-13 as corrected in DESIGN 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// Session lease, hex.
    pub session: String,
    pub class: String,
    pub acquired_at_ms: u64,
}

/// A lock-delay marker `/d/<key>` ([`DELAY_PREFIX`]): the session whose hold it marks. With
/// no lease it marks a hold; on a lease it is that hold's delay, seen to start at
/// `delay_from_ms` (wall clock of the arbiter that saw the end; shown, never compared).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DelayMarker {
    pub session: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_from_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub spiffe_id: String,
    /// The process instance that opened the session (`lock-instance`), if sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    pub ttl_seconds: u32,
    /// Set by CloseSession just before it revokes the lease, so the revoke's deletes carry
    /// it in their previous value: the audit trail tells a close from an expiry, which
    /// etcd's own events cannot (both are a lease revoke deleting every key on the lease).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub closing: bool,
}

pub fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    // Plain structs of strings and integers always serialize.
    serde_json::to_vec(v).unwrap_or_default()
}

pub fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Option<T> {
    serde_json::from_slice(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_records() {
        let k = LockKey::parse("pay/ledger/42").unwrap();
        assert_eq!(holder_key(&k), "/l/pay/ledger/42");
        assert_eq!(session_key(0x694d_7a2b_1c3e_0f11), "/s/694d7a2b1c3e0f11");
        assert_eq!(shared_hold_key(&k, 0x7a), "/r/pay/ledger/42//s/7a");
        assert_eq!(writer_waiting_key(&k, 0x7a), "/r/pay/ledger/42//w/7a");
        // A longer key's records are never under a shorter key's prefix.
        let longer = LockKey::parse("pay/ledger/42/x").unwrap();
        assert!(!shared_hold_key(&longer, 1).starts_with(&shared_holds_prefix(&k)));
        let h = Holder {
            spiffe_id: "spiffe://td/w".into(),
            instance: None,
            session: "abc".into(),
            class: "c".into(),
            acquired_at_ms: 5,
        };
        assert_eq!(decode::<Holder>(&encode(&h)), Some(h.clone()));
        assert_eq!(decode::<Holder>(b"garbage"), None);
        // Records written before instances existed still decode (no instance).
        let old =
            br#"{"spiffe_id":"spiffe://td/w","session":"abc","class":"c","acquired_at_ms":5}"#;
        assert_eq!(decode::<Holder>(old), Some(h));
        let with = Holder {
            instance: Some("pod-1".into()),
            ..Holder::default()
        };
        assert_eq!(decode::<Holder>(&encode(&with)), Some(with));
        assert_eq!(
            EpochRecord::cluster_id_hex(0xcdf8_1819_4e3a_8c32),
            "cdf818194e3a8c32"
        );
    }

    /// The prefixes etcd's roles grant cover the keys they are named for.
    #[test]
    fn prefixes_cover_their_keys() {
        let sys = [
            EPOCH_KEY,
            SHARD_FENCE_KEY,
            ADVANCE_REQUEST_PREFIX,
            SHARDS_KEY,
            EPOCH_ALLOCATOR_KEY,
            FORCE_PREFIX,
            FORCE_REQUEST_PREFIX,
        ];
        assert!(sys.iter().all(|k| k.starts_with(SYS_PREFIX)));
        assert!(
            [EPOCH_KEY, EPOCH_ALLOCATOR_KEY]
                .iter()
                .all(|k| k.starts_with(EPOCH_KEYS_PREFIX))
        );
        assert!(
            [SHARDS_KEY, SHARD_FENCE_KEY]
                .iter()
                .all(|k| k.starts_with(SHARD_KEYS_PREFIX))
        );
        assert!(
            sys.iter()
                .chain(&[HOLDER_PREFIX, AUDIT_PREFIX])
                .all(|k| k.starts_with(KEYSPACE_PREFIX))
        );
    }
}
