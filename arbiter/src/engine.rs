//! Grant and release: one etcd transaction each (DESIGN 4.2).
//!
//! Grant: compare `/sys/epoch` unchanged AND `/l/<key>` absent AND the session still bound
//! -> put the holder on the session lease; else read all three to classify the refusal.
//! The token is `epoch << 48 | header.revision` of the committing transaction, handed out
//! only after the header's cluster ID passes the seal check.
//! Release: delete the holder only if it is still the same grant (its create revision is the
//! token's revision) under the current epoch.

use crate::bugs::Bug;
use crate::epoch::{Epoch, EpochCache};
use crate::error::ArbiterError;
use crate::layout::{EPOCH_KEY, Holder, decode, encode, holder_key, lease_hex, session_key};
use crate::queue::{Queues, Ticket};
use crate::sessions::{Session, Sessions};
use crate::store::Store;
use etcd_client::{
    Compare, CompareOp, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse,
};
use lock_config::registry::{Fairness, ResolvedClass};
use lock_config::{FencingToken, LockKey, Registry};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// Attempts per request when the epoch record moved or the key was released between the
/// compare and the classification read; bounded so a flapping store cannot spin a request.
const MAX_ATTEMPTS: usize = 3;
/// Longest wait an Acquire may ask for; longer requests are capped.
pub const MAX_WAIT: Duration = Duration::from_secs(300);

pub struct Engine {
    pub store: Store,
    pub registry: Arc<Registry>,
    pub epoch: EpochCache,
    pub sessions: Sessions,
    pub queues: Arc<Queues>,
    /// Deliberate bugs for the release gate; empty outside debug builds told to inject.
    pub bugs: crate::bugs::Bugs,
}

/// A successful grant.
#[derive(Debug, Clone)]
pub struct Grant {
    pub token: FencingToken,
    /// The holder key's create revision (= the token's revision).
    pub revision: i64,
    pub class: String,
    pub ttl_seconds: u32,
}

enum Outcome {
    Granted(Grant),
    /// Held by another session; the key was seen held at this revision.
    Held {
        revision: i64,
    },
    Retry,
}

/// A durable waiter's entry `/q/<key>/<lease>` and its create revision (its place).
#[derive(Debug, Clone)]
pub struct QueueEntry {
    pub key: String,
    pub create_revision: i64,
}

/// One grant attempt's result for a caller that may wait.
pub(crate) enum Attempt {
    Granted(Grant),
    Held { revision: i64 },
}

impl Engine {
    pub fn new(store: Store, registry: Arc<Registry>) -> Self {
        Self {
            store,
            registry,
            epoch: EpochCache::default(),
            sessions: Sessions::default(),
            queues: Arc::new(Queues::default()),
            bugs: crate::bugs::Bugs::default(),
        }
    }

    pub fn class_for(&self, key: &LockKey) -> Result<ResolvedClass<'_>, ArbiterError> {
        self.registry.class_for(key).ok_or(ArbiterError::NoClass)
    }

    pub async fn open_session(
        &self,
        identity: &str,
        key: &LockKey,
    ) -> Result<(Session, String), ArbiterError> {
        let class = self.class_for(key)?;
        // Refuse to hand out sessions from a sealed or uninitialised store.
        self.epoch.current(&self.store).await?;
        let session = self
            .sessions
            .open(&self.store, identity, class.ttl_seconds)
            .await?;
        Ok((session, class.name.to_owned()))
    }

    /// Grants `key` to the session, waiting up to `wait` in the key's FIFO queue when it
    /// is held (ADR-14, 15). A notification never grants: every grant is a transaction.
    pub async fn acquire(
        &self,
        identity: &str,
        key: &LockKey,
        lease: i64,
        wait: Duration,
    ) -> Result<Grant, ArbiterError> {
        let class = self.class_for(key)?;
        let session = Box::pin(self.sessions.owned(&self.store, lease, identity)).await?;
        if session.ttl_seconds != class.ttl_seconds {
            return Err(ArbiterError::WrongSessionTtl {
                class: class.name.to_owned(),
                ttl_seconds: class.ttl_seconds,
            });
        }
        // The calls below that talk to etcd are boxed: a queued waiter's future then holds
        // only its ticket, not room for the largest etcd call it might make (measured by
        // `make bench`'s memory row: the size of this future is paid per waiter).
        if class.spec.fairness == Fairness::Durable {
            return Box::pin(crate::durable::acquire(self, &session, key, &class, wait)).await;
        }
        if wait.is_zero() {
            return match Box::pin(self.attempt(&session, key, &class)).await? {
                Attempt::Granted(g) => Ok(g),
                Attempt::Held { .. } => Err(ArbiterError::Held),
            };
        }
        // A retried Acquire whose first answer was lost must get its grant back, not
        // queue behind waiters for a key it holds (found by the release gate); a leaked
        // hold is named as one rather than queued (with no queue, the head's first
        // attempt classifies it).
        if self.queues.len(key.as_str()) > 0
            && let Some(g) = Box::pin(self.held_by(&session, key, &class)).await?
        {
            return Ok(g);
        }
        let deadline = Instant::now() + wait.min(MAX_WAIT);
        let ticket = self.queues.join(key.as_str());
        if tokio::time::timeout_at(deadline, ticket.until_head())
            .await
            .is_err()
        {
            return Err(ArbiterError::HeldDeadline);
        }
        Box::pin(self.wait_as_head(&ticket, &session, key, &class, deadline)).await
    }

    /// The head of a key's queue: attempt, and when held, watch for the release from the
    /// revision the key was seen held at, so no release between the two is missed.
    async fn wait_as_head(
        &self,
        ticket: &Ticket,
        session: &Session,
        key: &LockKey,
        class: &ResolvedClass<'_>,
        deadline: Instant,
    ) -> Result<Grant, ArbiterError> {
        let mut broken_watches = 0u32;
        loop {
            if ticket.held_at().is_none() {
                match self.attempt(session, key, class).await? {
                    Attempt::Granted(g) => {
                        // The next head starts by watching, not by a doomed transaction.
                        ticket.saw_held(g.revision);
                        return Ok(g);
                    }
                    Attempt::Held { revision } => ticket.saw_held(revision),
                }
            }
            let from = ticket.held_at().unwrap_or(0) + 1;
            let local = ticket.release_signal();
            let hkey = holder_key(key);
            let watched = crate::release_watch::wait(&self.store, &hkey, from, deadline);
            let wake = match local {
                // A release through this arbiter wakes the head without the watch's round
                // trip; a release elsewhere (or an expiry) still arrives by the watch.
                Some(signal) => tokio::select! {
                    w = watched => w,
                    () = signal.notified() => crate::release_watch::Wake::Released { revision: 0 },
                },
                None => watched.await,
            };
            match wake {
                crate::release_watch::Wake::Released { revision } => {
                    if self.bugs.has(Bug::GrantOnWatchEvent) && revision > 0 {
                        let epoch = self.epoch.current(&self.store).await?;
                        ticket.saw_held(revision);
                        return self.granted(&epoch, revision, class);
                    }
                    broken_watches = 0;
                    ticket.saw_released();
                }
                crate::release_watch::Wake::Deadline => return Err(ArbiterError::HeldDeadline),
                crate::release_watch::Wake::Broken => {
                    // Watch lost or compacted: retry the transaction and re-watch at once;
                    // if the watch keeps failing, poll every second with jitter (ADR-15).
                    broken_watches += 1;
                    if broken_watches > 1 {
                        let pause = crate::release_watch::poll_interval();
                        if tokio::time::timeout_at(deadline, tokio::time::sleep(pause))
                            .await
                            .is_err()
                        {
                            return Err(ArbiterError::HeldDeadline);
                        }
                    }
                    ticket.saw_released();
                }
            }
        }
    }

    /// The grant `session` already holds on `key`, if any (one linearizable read). Held by
    /// the same identity under another session: LEAKED_HOLD at once (ADR-13), whether or
    /// not others are queued for the key — a queue must not turn a leak into a wait that
    /// ends HELD (issue 14).
    pub(crate) async fn held_by(
        &self,
        session: &Session,
        key: &LockKey,
        class: &ResolvedClass<'_>,
    ) -> Result<Option<Grant>, ArbiterError> {
        let epoch = self.epoch.current(&self.store).await?;
        let resp = self.store.get(&holder_key(key)).await?;
        self.epoch.check(&epoch, resp.header())?;
        let Some(kv) = resp.kvs().first() else {
            return Ok(None);
        };
        match self.holder_verdict(&epoch, session, kv, class) {
            Ok(g) => Ok(Some(g)),
            Err(ArbiterError::Held) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn attempt(
        &self,
        session: &Session,
        key: &LockKey,
        class: &ResolvedClass<'_>,
    ) -> Result<Attempt, ArbiterError> {
        self.attempt_queued(session, key, class, None).await
    }

    /// One grant attempt; with `queued`, the grant also requires that durable queue entry
    /// to still exist and deletes it in the same transaction.
    pub(crate) async fn attempt_queued(
        &self,
        session: &Session,
        key: &LockKey,
        class: &ResolvedClass<'_>,
        queued: Option<&QueueEntry>,
    ) -> Result<Attempt, ArbiterError> {
        for attempt in 0..MAX_ATTEMPTS {
            let epoch = self.epoch.current(&self.store).await?;
            match self.try_grant(&epoch, session, key, class, queued).await {
                Ok(Outcome::Granted(g)) => return Ok(Attempt::Granted(g)),
                Ok(Outcome::Held { revision }) => return Ok(Attempt::Held { revision }),
                Ok(Outcome::Retry) => continue,
                Err(e) => self.recheck_seal(e, attempt).await?,
            }
        }
        Err(ArbiterError::Held)
    }

    /// A SEALED answer may come from a cached epoch record that an epoch advance has
    /// replaced: on the first attempt, re-read the record (which checks the seal again)
    /// and let the caller retry; any other error, or a second SEALED, is the answer.
    async fn recheck_seal(&self, e: ArbiterError, attempt: usize) -> Result<(), ArbiterError> {
        match e {
            ArbiterError::Sealed(_) if attempt == 0 => {
                self.epoch.refresh(&self.store).await.map(drop)
            }
            e => Err(e),
        }
    }

    async fn try_grant(
        &self,
        epoch: &Epoch,
        session: &Session,
        key: &LockKey,
        class: &ResolvedClass<'_>,
        queued: Option<&QueueEntry>,
    ) -> Result<Outcome, ArbiterError> {
        let hkey = holder_key(key);
        let skey = session_key(session.lease);
        let holder = Holder {
            spiffe_id: session.spiffe_id.clone(),
            session: lease_hex(session.lease),
            class: class.name.to_owned(),
            acquired_at_ms: now_ms(),
        };
        let mut compares = vec![
            Compare::mod_revision(EPOCH_KEY, CompareOp::Equal, epoch.mod_revision),
            Compare::create_revision(hkey.as_str(), CompareOp::Equal, 0),
            Compare::create_revision(skey.as_str(), CompareOp::Equal, session.create_revision),
        ];
        if self.bugs.has(Bug::GrantWithoutEpochCompare) {
            compares.remove(0);
        }
        let mut success = vec![TxnOp::put(
            hkey.as_str(),
            encode(&holder),
            Some(PutOptions::new().with_lease(session.lease)),
        )];
        if let Some(q) = queued {
            compares.push(Compare::create_revision(
                q.key.as_str(),
                CompareOp::Equal,
                q.create_revision,
            ));
            success.push(TxnOp::delete(q.key.as_str(), None));
        }
        let txn = Txn::new().when(compares).and_then(success).or_else(vec![
            TxnOp::get(hkey.as_str(), None),
            TxnOp::get(EPOCH_KEY, None),
            TxnOp::get(skey.as_str(), None),
        ]);
        let resp = match self.store.txn(txn).await {
            Ok(r) => r,
            // The outcome is unknown: the transaction may have committed. Read back before
            // answering so a committed grant is reported, not orphaned.
            Err(ArbiterError::NoQuorum) => {
                return self.read_back(epoch, session, &hkey, class).await;
            }
            Err(e) => return Err(e),
        };
        if let Err(sealed) = self.epoch.check(epoch, resp.header()) {
            if resp.succeeded() {
                // The compares cannot see a restore (the restored epoch record is the same),
                // so the grant committed on a store we refuse to serve from. Take back exactly
                // this grant; its token is never handed out.
                let revision = resp.header().map_or(0, |h| h.revision());
                let undo = Txn::new()
                    .when(vec![Compare::create_revision(
                        hkey.as_str(),
                        CompareOp::Equal,
                        revision,
                    )])
                    .and_then(vec![TxnOp::delete(hkey.as_str(), None)]);
                if let Err(e) = self.store.txn(undo).await {
                    tracing::warn!(error = %e, "could not withdraw a grant made on a sealed store");
                }
            }
            return Err(sealed);
        }
        if resp.succeeded() {
            let revision = resp.header().map_or(0, |h| h.revision());
            return self.granted(epoch, revision, class).map(Outcome::Granted);
        }
        self.classify(epoch, session, &resp, class).await
    }

    fn granted(
        &self,
        epoch: &Epoch,
        revision: i64,
        class: &ResolvedClass<'_>,
    ) -> Result<Grant, ArbiterError> {
        let unsigned =
            u64::try_from(revision).map_err(|_| ArbiterError::Store("bad revision".into()))?;
        let token = FencingToken::pack(epoch.record.epoch, unsigned)
            .map_err(|e| ArbiterError::Store(format!("cannot mint token: {e}")))?;
        Ok(Grant {
            token,
            revision,
            class: class.name.to_owned(),
            ttl_seconds: class.ttl_seconds,
        })
    }

    async fn classify(
        &self,
        epoch: &Epoch,
        session: &Session,
        resp: &TxnResponse,
        class: &ResolvedClass<'_>,
    ) -> Result<Outcome, ArbiterError> {
        let ops = resp.op_responses();
        let got = |i: usize| -> Option<&KeyValue> {
            match ops.get(i) {
                Some(TxnOpResponse::Get(g)) => g.kvs().first(),
                _ => None,
            }
        };
        let (holder, epoch_kv, session_kv) = (got(0), got(1), got(2));
        if epoch_kv.map(KeyValue::mod_revision) != Some(epoch.mod_revision) {
            self.epoch.refresh(&self.store).await?;
            return Ok(Outcome::Retry);
        }
        if session_kv.map(KeyValue::create_revision) != Some(session.create_revision) {
            self.sessions.forget(session.lease);
            return Err(ArbiterError::SessionNotFound);
        }
        let Some(kv) = holder else {
            // Released between the compare and the read: try again.
            return Ok(Outcome::Retry);
        };
        match self.holder_verdict(epoch, session, kv, class) {
            Ok(g) => Ok(Outcome::Granted(g)),
            Err(ArbiterError::Held) => Ok(Outcome::Held {
                revision: resp.header().map_or(kv.mod_revision(), |h| h.revision()),
            }),
            Err(e) => Err(e),
        }
    }

    /// Who holds the key decides the refusal (ADR-13). Held by this very session: the
    /// grant already exists (a retried Acquire), so it is returned again.
    fn holder_verdict(
        &self,
        epoch: &Epoch,
        session: &Session,
        kv: &KeyValue,
        class: &ResolvedClass<'_>,
    ) -> Result<Grant, ArbiterError> {
        let holder = decode::<Holder>(kv.value());
        match holder {
            Some(h) if h.session == lease_hex(session.lease) => {
                self.granted(epoch, kv.create_revision(), class)
            }
            Some(h) if h.spiffe_id == session.spiffe_id => Err(ArbiterError::LeakedHold),
            _ => Err(ArbiterError::Held),
        }
    }

    async fn read_back(
        &self,
        epoch: &Epoch,
        session: &Session,
        hkey: &str,
        class: &ResolvedClass<'_>,
    ) -> Result<Outcome, ArbiterError> {
        let resp = self.store.get(hkey).await?;
        self.epoch.check(epoch, resp.header())?;
        match resp.kvs().first() {
            Some(kv)
                if decode::<Holder>(kv.value())
                    .is_some_and(|h| h.session == lease_hex(session.lease)) =>
            {
                self.holder_verdict(epoch, session, kv, class)
                    .map(Outcome::Granted)
            }
            // Not granted to us: the transaction did not commit (or the session expired).
            _ => Err(ArbiterError::NoQuorum),
        }
    }

    /// Releases the grant named by `token`. With a session, the grant must be attached to
    /// it; without, the holder's identity must be the caller's (read first, then a
    /// transaction comparing the holder unchanged).
    pub async fn release(
        &self,
        identity: &str,
        key: &LockKey,
        token: FencingToken,
        lease: Option<i64>,
    ) -> Result<(), ArbiterError> {
        let hkey = holder_key(key);
        let revision = i64::try_from(token.revision()).map_err(|_| ArbiterError::MalformedToken)?;
        for attempt in 0..MAX_ATTEMPTS {
            match self
                .try_release(identity, &hkey, token, revision, lease)
                .await
            {
                Ok(true) => {
                    self.queues.released(key.as_str());
                    return Ok(());
                }
                Ok(false) => self.epoch.refresh(&self.store).await.map(drop)?,
                Err(e) => self.recheck_seal(e, attempt).await?,
            }
        }
        Err(ArbiterError::StaleToken)
    }

    /// One release transaction. Ok(false): the epoch record moved; refresh and retry.
    async fn try_release(
        &self,
        identity: &str,
        hkey: &str,
        token: FencingToken,
        revision: i64,
        lease: Option<i64>,
    ) -> Result<bool, ArbiterError> {
        let epoch = self.epoch.current(&self.store).await?;
        if token.epoch() != epoch.record.epoch {
            return Err(ArbiterError::StaleToken);
        }
        let mut compares = vec![Compare::mod_revision(
            EPOCH_KEY,
            CompareOp::Equal,
            epoch.mod_revision,
        )];
        let token_compare = !self.bugs.has(Bug::ReleaseWithoutTokenCompare);
        if token_compare {
            compares.push(Compare::create_revision(hkey, CompareOp::Equal, revision));
        }
        match lease {
            Some(lease) => {
                self.sessions.owned(&self.store, lease, identity).await?;
                compares.push(Compare::lease(hkey, CompareOp::Equal, lease));
            }
            None => {
                let resp = self.store.get(hkey).await?;
                self.epoch.check(&epoch, resp.header())?;
                let kv = resp.kvs().first().ok_or(ArbiterError::StaleToken)?;
                let ours = decode::<Holder>(kv.value()).is_some_and(|h| h.spiffe_id == identity);
                if !ours || (token_compare && kv.create_revision() != revision) {
                    return Err(ArbiterError::StaleToken);
                }
                compares.push(Compare::mod_revision(
                    hkey,
                    CompareOp::Equal,
                    kv.mod_revision(),
                ));
            }
        }
        let txn = Txn::new()
            .when(compares)
            .and_then(vec![TxnOp::delete(hkey, None)])
            .or_else(vec![TxnOp::get(EPOCH_KEY, None)]);
        let resp = self.store.txn(txn).await?;
        self.epoch.check(&epoch, resp.header())?;
        if resp.succeeded() {
            return Ok(true);
        }
        let epoch_moved = match resp.op_responses().first() {
            Some(TxnOpResponse::Get(g)) => {
                g.kvs().first().map(KeyValue::mod_revision) != Some(epoch.mod_revision)
            }
            _ => true,
        };
        if epoch_moved {
            Ok(false)
        } else {
            Err(ArbiterError::StaleToken)
        }
    }
}

/// What Inspect reports: never a token.
#[derive(Debug, Clone, Default)]
pub struct Inspection {
    pub holder: Option<Holder>,
    pub waiters: usize,
}

impl Engine {
    /// ValidateToken (ADR-16): is `token` the current grant of `key`? One linearizable
    /// transaction reads the holder and the epoch record together.
    pub async fn validate(&self, key: &LockKey, token: FencingToken) -> Result<bool, ArbiterError> {
        let hkey = holder_key(key);
        for attempt in 0..MAX_ATTEMPTS {
            let epoch = self.epoch.current(&self.store).await?;
            let txn = Txn::new().and_then(vec![
                TxnOp::get(hkey.as_str(), None),
                TxnOp::get(EPOCH_KEY, None),
            ]);
            let resp = self.store.txn(txn).await?;
            if let Err(e) = self.epoch.check(&epoch, resp.header()) {
                self.recheck_seal(e, attempt).await?;
                continue;
            }
            let ops = resp.op_responses();
            let first = |i: usize| match ops.get(i) {
                Some(TxnOpResponse::Get(g)) => g.kvs().first().cloned(),
                _ => None,
            };
            if first(1).map(|kv| kv.mod_revision()) != Some(epoch.mod_revision) {
                self.epoch.refresh(&self.store).await?;
                continue;
            }
            let current = first(0).map(|kv| kv.create_revision());
            return Ok(token.epoch() == epoch.record.epoch
                && current == i64::try_from(token.revision()).ok());
        }
        Err(ArbiterError::NoQuorum)
    }

    /// Inspect: the holder record (identity, class, since when) and the local waiter count.
    pub async fn inspect(&self, key: &LockKey) -> Result<Inspection, ArbiterError> {
        let epoch = self.epoch.current(&self.store).await?;
        let resp = self.store.get(&holder_key(key)).await?;
        self.epoch.check(&epoch, resp.header())?;
        let durable = self
            .registry
            .class_for(key)
            .is_some_and(|c| c.spec.fairness == Fairness::Durable);
        let waiters = if durable {
            crate::durable::waiters(&self.store, key).await?
        } else {
            self.queues.len(key.as_str())
        };
        Ok(Inspection {
            holder: resp
                .kvs()
                .first()
                .and_then(|kv| decode::<Holder>(kv.value())),
            waiters,
        })
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
