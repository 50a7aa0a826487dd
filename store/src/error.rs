//! Why a store operation failed, by cause: one type for every caller (the arbiter maps it
//! to statuses in its own `error.rs`; lockctl to exit codes). Each cause's words are those
//! callers have always printed, after `store error: ` (the arbiter's INTERNAL answers,
//! lockctl's refusals): only no quorum and a full store have words of their own, because
//! callers answer them as such (NO_QUORUM, STORE_FULL).

use std::path::PathBuf;
use std::time::Duration;
use tonic::Code;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// etcd did not answer within the bound, or is out of reach (closed posture, ADR-04).
    #[error("store unavailable or without quorum")]
    NoQuorum,
    /// etcd's NOSPACE alarm is raised: it refuses every write that puts.
    #[error(
        "store is out of space (etcd NOSPACE alarm): no new grants until an operator frees space"
    )]
    Full,
    /// etcd answered a call with an error that is neither of the above (permission denied,
    /// a compacted revision, ...).
    #[error("store error: {0}")]
    Etcd(etcd_client::Error),
    /// etcd could not be reached as configured: the transport refused, a credential file
    /// unreadable, an endpoint that does not parse.
    #[error("store error: {0}")]
    Connect(#[from] ConnectError),
    /// A record in the store that does not decode.
    #[error("store error: {0}")]
    Undecodable(Record),
    /// A record the operation needs is not in the store.
    #[error("store error: {0}")]
    Absent(Absent),
    /// An answer without what it must carry, or one its own compares rule out.
    #[error("store error: {0}")]
    Malformed(Malformed),
    /// A compare that failed: something changed, or was taken, under the call.
    #[error("store error: {0}")]
    Contended(Contended),
    /// An epoch advance the store's epoch does not allow.
    #[error("store error: {0}")]
    Epoch(EpochRefused),
    /// A shard map that is not valid, or a cluster that is not the shard it is given as.
    #[error("store error: {0}")]
    Map(MapError),
    /// A move of keys between shards refused before it wrote, or given up.
    #[error("store error: {0}")]
    Move(MoveRefused),
    /// A task a call is handed to is gone.
    #[error("store error: {0}")]
    Stopped(Task),
}

/// etcd's errors: unavailability and timeouts are "no quorum" (closed posture, ADR-04);
/// anything else is etcd's refusal of the call.
impl From<etcd_client::Error> for StoreError {
    fn from(e: etcd_client::Error) -> Self {
        match &e {
            // Cancelled is what the channel's own request timeout produces ("Timeout
            // expired"): the store did not answer in time, like a deadline.
            etcd_client::Error::GRpcStatus(s)
                if matches!(
                    s.code(),
                    Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled
                ) =>
            {
                StoreError::NoQuorum
            }
            etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => {
                StoreError::NoQuorum
            }
            // A keepalive or watch stream that closed under us ("channel closed"): with
            // the arbiter given every member, that is the member it streamed to going
            // away, i.e. the store out of reach for now.
            etcd_client::Error::LeaseKeepAliveError(_) | etcd_client::Error::WatchError(_) => {
                StoreError::NoQuorum
            }
            // A connection that broke under the call (h2 reset, broken pipe, a member
            // killed) comes back as Unknown, or Internal from the h2 layer: the request
            // may have been applied. Found by the release gate: such a grant answered
            // INTERNAL had committed. As NO_QUORUM it gets the read-back, and clients retry.
            etcd_client::Error::GRpcStatus(s)
                if s.code() == Code::Unknown
                    || (s.code() == Code::Internal
                        && (s.message().contains("h2") || s.message().contains("transport"))) =>
            {
                tracing::warn!(code = ?s.code(), message = s.message(), "store call broke; outcome unknown");
                StoreError::NoQuorum
            }
            // etcd's capped mode after a NOSPACE alarm rejects every write that puts.
            etcd_client::Error::GRpcStatus(s)
                if s.code() == Code::ResourceExhausted
                    && s.message().contains("database space exceeded") =>
            {
                StoreError::Full
            }
            _ => {
                tracing::warn!(error = %e, "store error");
                StoreError::Etcd(e)
            }
        }
    }
}

/// How etcd could not be reached as configured.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("{0}")]
    Refused(#[from] TransportRefused),
    #[error("{}: {source}", path.display())]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("etcd endpoint: {0}")]
    Endpoint(tonic::transport::Error),
    #[error("etcd TLS: {0}")]
    Config(tonic::transport::Error),
}

/// Why a transport was refused (`etcd_tls::transport_verdict`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportRefused {
    #[error("no etcd endpoints given")]
    NoEndpoints,
    #[error("give all three of --etcd-ca, --etcd-cert and --etcd-key, or none")]
    PartialCredential,
    #[error("etcd endpoint {0} is https but no --etcd-ca/--etcd-cert/--etcd-key were given")]
    HttpsWithoutCredential(String),
    #[error(
        "etcd endpoint {0} is plaintext and not on loopback: the lock keys would cross the \
         network unencrypted and unauthenticated (use https with a client certificate)"
    )]
    PlaintextOffLoopback(String),
    #[error("etcd endpoint {0} is plaintext but a client certificate was given: use https://")]
    PlaintextWithCredential(String),
    #[error("etcd endpoint {0} is neither http:// nor https://")]
    UnknownScheme(String),
}

/// A record that does not decode.
#[derive(Debug, thiserror::Error)]
pub enum Record {
    #[error("epoch record is not decodable")]
    EpochRecord,
    #[error("epoch allocator unreadable")]
    EpochAllocator,
    #[error("the shard fence is not decodable")]
    ShardFence,
    #[error("the shard map document is unreadable: {0}")]
    ShardMap(serde_json::Error),
}

/// A record that is not there.
#[derive(Debug, thiserror::Error)]
pub enum Absent {
    #[error("no epoch record: run `lockctl epoch init`")]
    EpochRecord,
    #[error("no epoch record at revision {0}")]
    EpochAt(i64),
    #[error("no shard map on the coord cluster: run `lockctl shards init`")]
    ShardMap,
    #[error("shard {0} has no epoch record")]
    ShardEpoch(String),
}

/// An answer that cannot be read as it must.
#[derive(Debug, thiserror::Error)]
pub enum Malformed {
    #[error("response without header")]
    NoHeader,
    #[error("a watch event without its key")]
    EventWithoutKey,
    #[error("bad revision")]
    NegativeRevision,
    #[error("a batch answered with the wrong number of results")]
    BatchAnswers,
    #[error("a settlement refused with its session bound and no fence")]
    SettleUnfenced,
}

/// A compare that failed.
#[derive(Debug, thiserror::Error)]
pub enum Contended {
    #[error("cluster ID changed between read and write")]
    ClusterIdAtInit,
    #[error("cluster ID changed during the advance")]
    ClusterIdAtAdvance,
    #[error("the epoch record (or the request) changed concurrently: nothing advanced")]
    EpochRecord,
    #[error("the epoch allocator kept changing under this call")]
    EpochAllocator,
    #[error("shard {0}'s fence kept changing under the write")]
    ShardFence(String),
    #[error("the shard map was written concurrently")]
    ShardMapWritten,
    #[error("the shard map changed under this move")]
    ShardMapMoved,
    #[error("the shard map changed during the flip; run the command again to finish")]
    ShardMapAtFlip,
    #[error("the shard map document vanished during the move")]
    ShardMapVanished,
    #[error("session key already existed")]
    SessionKey,
    #[error("no free random lease id")]
    LeaseIds,
}

/// Why an epoch advance may not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EpochRefused {
    #[error("the store is at epoch {current}, not {from}: nothing advanced")]
    NotAt { current: u16, from: u16 },
    #[error("cannot advance from epoch {from} to {next}")]
    NotAnAdvance { from: u16, next: u16 },
    #[error("epoch space exhausted")]
    Exhausted,
}

/// A shard map, or a shard, that is not what it must be.
#[derive(Debug, thiserror::Error)]
pub enum MapError {
    #[error("shard map: {0}")]
    Invalid(lock_config::shards::ShardMapError),
    #[error("next shard map: {0}")]
    InvalidNext(lock_config::shards::ShardMapError),
    #[error("shard {0} has no endpoints in the map")]
    NoEndpoints(String),
    #[error("the cluster given as shard {given} is shard {is}")]
    WrongShard { given: String, is: String },
}

/// A task a call is handed to.
#[derive(Debug, thiserror::Error)]
pub enum Task {
    #[error("the renewal stream task stopped")]
    Renewals,
    #[error("the batch sender stopped")]
    Batch,
}

/// Why a change of the shard map (`rehome`) was refused before it wrote, or given up
/// (everything put back). Each says what to do next: lockctl's answers to an operator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoveRefused {
    #[error(
        "the coord cluster already has shard map version {version}: use `lockctl shards add|move|drain`"
    )]
    MapExists { version: u64 },
    #[error("a move to version {version} is under way; finish it with the same command first")]
    UnderWay { version: u64 },
    #[error("the next map must be version {want}, not {got}")]
    NotNext { want: u64, got: u64 },
    #[error(
        "shard {shard} has no epoch record, and creating one writes /sys/epoch, which this credential may not (ADR-03): run `lockctl epoch init --coord <coord URLs> --etcd <its URLs>` as etcd root first; nothing was written"
    )]
    MayNotStart { shard: String },
    /// `receivers`: each receiving shard with its epoch and the highest it receives from.
    #[error(
        "receiving shards need an epoch advance, which ends their holds: {receivers}; run again with --advance-destination to accept"
    )]
    NeedsAdvance { receivers: String },
    #[error(
        "receiving shard {shard} needs an epoch advance, which writes /sys/epoch: outside lock-admin's two-person path only etcd root may (ADR-03). Run this move with root's certificate (it is recorded as break-glass in the epoch record); nothing was written"
    )]
    MayNotAdvance { shard: String },
    /// `examples`: up to five of the holds still there.
    #[error(
        "holds of moving keys did not end within {wait:?} (e.g. {examples}): nothing moved, map back at version {version}"
    )]
    HoldsRemain {
        wait: Duration,
        examples: String,
        version: u64,
    },
}
