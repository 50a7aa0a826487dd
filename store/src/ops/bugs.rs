//! Deliberate bugs for the release gate (issue 7) and the boundary tests (issue 13): a
//! checker counts only once it has caught each of them. They exist in debug builds only; a
//! release build has no flag to turn them on, and every check below is a constant `false`
//! there.

use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bug {
    /// The grant transaction omits the `/sys/epoch` compare: after an epoch advance an
    /// arbiter with a cached older epoch keeps minting tokens of the old epoch.
    GrantWithoutEpochCompare,
    /// The release transaction omits the holder's create-revision compare: a stale or
    /// replayed release deletes whatever grant the session holds now.
    ReleaseWithoutTokenCompare,
    /// A queue head that sees the holder key deleted answers with a grant minted from the
    /// watch event's revision, without a transaction (ADR-15 forbids it).
    GrantOnWatchEvent,
    /// Handlers read `x-lock-identity`/`x-lock-key` from the request metadata, into which
    /// tonic merges request trailers, instead of from the initial headers (issue 13's
    /// forgery, layer 2 switched off for the boundary tests).
    EdgeHeadersFromMetadata,
    /// The listener admits any peer: no client certificate required, no allow-list of
    /// edge identities (layer 3 switched off for the boundary tests).
    AdmitAnyPeer,
    /// The handoff (a release that hands the key to the queue head in one transaction)
    /// omits the compare that the releaser's grant is still the holder: a stale or
    /// replayed release hands someone else's grant on.
    HandoffWithoutHolderCompare,
    /// Group commit answers each member of a batch with the next member's sub-result.
    BatchCrossAnswer,
    /// The seal skips the cluster-ID compare: only the revision floor remains, which a
    /// freshly started arbiter does not have (issue 16: the restore drill shows the
    /// cluster-ID check is what seals it).
    SealWithoutClusterId,
    /// An entity shard grants without its map fence (issue 24): the arbiter routes by the
    /// shard map it loaded at start (its coord watch lost), admits without reading the
    /// shard's fence, and its grant transaction omits the epoch-record compare, so after
    /// a move it keeps granting moved keys on their old shard.
    ShardFenceOff,
    /// Leak detection by identity alone, ignoring the instance (issue 32): a sibling
    /// replica is refused LEAKED_HOLD instead of waiting. The gate's replica check names it.
    LeakByIdentity,
    /// A Hold stream's messages are checked against their own key, not the `x-lock-key`
    /// the edge decided the stream on (issue 33): a stream admitted for one key takes
    /// another. The hold-stream boundary test names it.
    HoldKeyFromMessage,
    /// A wait's deadline kept in wall-clock time (issue 34): a clock stepped forward ends
    /// every wait at once, one stepped back lengthens none. The clock test names it.
    WallClockDeadline,
    /// A granted Acquire's span carries its token (issue 38, ADR-22: a token is a
    /// capability, never in telemetry). The traces test's scan names it.
    TokenInSpan,
    /// A durable waiter whose wait ended answers its refusal without reading the holder
    /// record back (issue 34): a release that handed it the key just before leaves a grant
    /// in the store that its holder was told it did not get.
    DurableLeaveWithoutReadBack,
    /// A grant transaction whose answer was lost (NO_QUORUM: a timeout, the connection
    /// gone) is answered HELD, a definite refusal, without being settled, though it may
    /// have committed (issue 34: the gate's one-way link faults make such commits common).
    InDoubtGrantAsHeld,
    /// A FIFO grant attempt whose answer was lost is not settled (issue 34): no attempt
    /// fence in its transaction, and the wait goes on as if it had failed. Held in a
    /// partitioned member, it commits after its wait was answered otherwise: a hold on a
    /// session whose every request was answered (the gate's bridge-partition found it).
    GrantWithoutSettle,
    /// A renewal etcd answered with TTL 0 (the lease is gone) is answered as renewed (issue
    /// 34): the client believes a session, and the holds on it, alive after the store
    /// ended them. A stalled or cut-off client renewing after its TTL passed is told so
    /// by nothing; the gate's renewal check names it.
    RenewalIgnoresExpiry,
    /// Observe hands the holder's token to every observer, not only to the holder's own
    /// session: a sibling replica (or another identity) could write with it. The Observe
    /// test names it.
    ObserveTokenToAll,
    /// Observe reports every end of a hold as RELEASED, whatever the store did (an expiry,
    /// a force release, an advance). The gate's observe check names it.
    ObserveEndAsRelease,
    /// AcquireAll's transaction omits the absent-compare of the set's last key: the set
    /// is granted over that key's holder, overwriting its record. The set test and the
    /// gate's set load name it.
    SetWithoutOneCompare,
    /// A shared grant omits the "no exclusive waiter marked" compare: readers keep joining
    /// while a writer waits, so a steady stream of them starves it. The writer-starvation
    /// test names it.
    SharedIgnoresWriter,
    /// A release whose transaction's answer was lost (NO_QUORUM: a timeout, etcd out of
    /// reach) is answered released, as if it had committed (issue 34): a release that
    /// assumes success. Where the arbiter cannot reach etcd (`arbiter-mute`,
    /// `cut-arbiter-etcd`) or reaches it slowly (`slow-links`) the hold stays while its
    /// holder was told it ended; the gate's release check names it.
    ReleaseInDoubtAsReleased,
    /// lock-admin's two-person epoch advance takes E+1 on its own cluster, never an epoch
    /// from the coord cluster's allocator (the rule before epochs came from the coord on
    /// every path): on a sharded estate two clusters then serve one epoch. The shard gate's
    /// check that no two clusters ever serve one epoch names it (`gate shards --inject-bug
    /// advance-without-coord`). Honoured by lock-force's `AdvanceStore`, not the arbiter.
    AdvanceWithoutCoord,
    /// A semaphore counts one permit more than its class has: the N+1st session is granted
    /// permit N while N are held. The semaphore test (and, when it carries semaphores, the
    /// gate's load) names it: more than N inside at once.
    SemaphoreOverGrant,
}

impl FromStr for Bug {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "grant-without-epoch-compare" => Ok(Bug::GrantWithoutEpochCompare),
            "release-without-token-compare" => Ok(Bug::ReleaseWithoutTokenCompare),
            "grant-on-watch-event" => Ok(Bug::GrantOnWatchEvent),
            "edge-headers-from-metadata" => Ok(Bug::EdgeHeadersFromMetadata),
            "admit-any-peer" => Ok(Bug::AdmitAnyPeer),
            "seal-without-cluster-id" => Ok(Bug::SealWithoutClusterId),
            "handoff-without-holder-compare" => Ok(Bug::HandoffWithoutHolderCompare),
            "batch-cross-answer" => Ok(Bug::BatchCrossAnswer),
            "shard-fence-off" => Ok(Bug::ShardFenceOff),
            "leak-by-identity" => Ok(Bug::LeakByIdentity),
            "hold-key-from-message" => Ok(Bug::HoldKeyFromMessage),
            "wall-clock-deadline" => Ok(Bug::WallClockDeadline),
            "token-in-span" => Ok(Bug::TokenInSpan),
            "durable-leave-without-read-back" => Ok(Bug::DurableLeaveWithoutReadBack),
            "in-doubt-grant-as-held" => Ok(Bug::InDoubtGrantAsHeld),
            "grant-without-settle" => Ok(Bug::GrantWithoutSettle),
            "renewal-ignores-expiry" => Ok(Bug::RenewalIgnoresExpiry),
            "observe-token-to-all" => Ok(Bug::ObserveTokenToAll),
            "observe-end-as-release" => Ok(Bug::ObserveEndAsRelease),
            "set-without-one-compare" => Ok(Bug::SetWithoutOneCompare),
            "shared-ignores-writer" => Ok(Bug::SharedIgnoresWriter),
            "release-in-doubt-as-released" => Ok(Bug::ReleaseInDoubtAsReleased),
            "advance-without-coord" => Ok(Bug::AdvanceWithoutCoord),
            "semaphore-over-grant" => Ok(Bug::SemaphoreOverGrant),
            _ => Err(format!(
                "unknown bug {s:?} (grant-without-epoch-compare, release-without-token-compare, grant-on-watch-event, edge-headers-from-metadata, admit-any-peer, seal-without-cluster-id, handoff-without-holder-compare, batch-cross-answer, shard-fence-off, leak-by-identity, hold-key-from-message, wall-clock-deadline, token-in-span, durable-leave-without-read-back, in-doubt-grant-as-held, grant-without-settle, renewal-ignores-expiry, observe-token-to-all, observe-end-as-release, set-without-one-compare, shared-ignores-writer, release-in-doubt-as-released, advance-without-coord, semaphore-over-grant)"
            )),
        }
    }
}

/// The bugs switched on in this process (none unless a debug build was told to).
#[derive(Debug, Clone, Default)]
pub struct Bugs(Vec<Bug>);

impl Bugs {
    #[cfg(debug_assertions)]
    pub fn new(bugs: Vec<Bug>) -> Self {
        Self(bugs)
    }

    #[cfg(debug_assertions)]
    pub fn has(&self, bug: Bug) -> bool {
        self.0.contains(&bug)
    }

    #[cfg(not(debug_assertions))]
    pub fn has(&self, _bug: Bug) -> bool {
        false
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
