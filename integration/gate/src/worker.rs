//! A gate worker process: a few clients, each with its own SPIFFE identity and session,
//! taking keys, writing to the fenced resources and releasing, with every operation
//! recorded. Separate processes so that the gate can freeze a holder (SIGSTOP) past its
//! session's TTL, as a GC pause or a stalled VM would.

use super::history::{Event, Kind, Phase, Recorder, mono_ns};
use super::register::RegisterClient;

mod attacker;
mod hold_stream;
mod permits;
mod plan;
mod renewals;
mod set;
mod shared;

pub use attacker::{ATTACKS, AttackerPlan};
use lock_client::proto::lock_client::LockClient;
use lock_client::stub::{self as remote, Svid};
use lock_config::proto::v1::{AcquireRequest, HoldMode, OpenSessionRequest, ReleaseRequest};
pub use plan::{ClientPlan, KeyPlan, WorkerPlan};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use renewals::Session;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tonic::transport::Channel;

/// Client ids of keepalive streams: the client's id plus this (a separate history thread).
pub const KEEPALIVE_CLIENT: u32 = 10_000;
/// Bound on a call's answer beyond its own wait.
const CALL_TIMEOUT: Duration = Duration::from_secs(4);

/// Keys whose holder is stalled, with when the stall ends (CLOCK_MONOTONIC ns): the
/// worker's other clients wait for them.
type Contested = Arc<Mutex<Vec<(String, u64)>>>;

/// Runs every client of the plan until its end; returns when all have stopped.
pub async fn run(plan: WorkerPlan) -> anyhow::Result<()> {
    let rec = Arc::new(Recorder::create(&plan.history)?);
    let contested = Contested::default();
    let mut tasks = Vec::new();
    for (n, c) in plan.clients.iter().enumerate() {
        let seed = plan.seed.wrapping_add(n as u64);
        let client = Client::connect(&plan, c, rec.clone(), contested.clone(), seed).await?;
        tasks.push(tokio::spawn(client.run()));
    }
    if let Some(me) = plan.attacker.clone() {
        let seed = plan.seed.wrapping_add(0xa77ac4);
        let attacker = attacker::Attacker::connect(&plan, me, rec.clone(), seed).await?;
        tasks.push(tokio::spawn(attacker.run()));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

struct Client {
    id: u32,
    spiffe_id: String,
    plan: WorkerPlan,
    rng: StdRng,
    edge: LockClient<Channel>,
    direct: Vec<LockClient<Channel>>,
    rec: Arc<Recorder>,
    register: RegisterClient,
    pg: Option<tokio_postgres::Client>,
    next_op: u64,
    session: Option<Session>,
    /// The held key's `Hold` stream, when its acquire went on one (its release goes there).
    link: Option<hold_stream::Link>,
    ops: u64,
    contested: Contested,
    /// This round's hold is asked for, held and released `SHARED` (a shared round's
    /// reader); reset at the top of every round.
    shared: bool,
    /// This round's holds are a semaphore's permits (`PERMIT`, `worker/permits.rs`);
    /// reset at the top of every round.
    permits: bool,
    /// The permits this round was granted, by token: a release or a write under a token
    /// is recorded with its permit, and a write goes to that permit's fence.
    granted_permits: Vec<(u64, u32)>,
}

/// A call's outcome as the history records it.
enum Outcome<T> {
    Ok(T),
    Fail(String),
    Unknown(String),
}

/// What a completion records beyond its phase.
#[derive(Default)]
struct Answer {
    token: Option<u64>,
    /// The arbiter that answered.
    served: Option<String>,
    /// A release's delete revision.
    rev: Option<i64>,
    /// A semaphore grant's permit.
    permit: Option<u32>,
}

fn classify<T>(
    r: Result<Result<tonic::Response<T>, tonic::Status>, tokio::time::error::Elapsed>,
) -> Outcome<(T, Option<String>)> {
    match r {
        Err(_) => Outcome::Unknown("timeout".into()),
        Ok(Ok(resp)) => {
            let served = lock_integration::answered_by(&resp);
            Outcome::Ok((resp.into_inner(), served))
        }
        Ok(Err(status)) => match crate::refusal::of_status(&status) {
            crate::refusal::Refused::Fail(why) => Outcome::Fail(why),
            crate::refusal::Refused::Unknown(why) => Outcome::Unknown(why),
        },
    }
}

impl Client {
    async fn connect(
        plan: &WorkerPlan,
        c: &ClientPlan,
        rec: Arc<Recorder>,
        contested: Contested,
        seed: u64,
    ) -> anyhow::Result<Self> {
        let svid = Svid {
            cert: Some(&c.cert),
            key: Some(&c.key),
            ca: &c.ca,
        };
        let edge = remote::connect(&plan.endpoint, &svid, "localhost").await?;
        let mut direct = Vec::new();
        let edge_svid = lock_integration::pki::SvidFiles {
            cert: plan.edge_cert.clone(),
            key: plan.edge_key.clone(),
            ca: c.ca.clone(),
        };
        for a in &plan.arbiters {
            direct.push(LockClient::new(lock_integration::arbiter_channel(
                *a,
                Some(&edge_svid),
                &c.ca,
            )?));
        }
        let pg = match &plan.postgres {
            Some(url) => Some(lock_pause_test::connect(url).await?),
            None => None,
        };
        Ok(Self {
            id: c.id,
            spiffe_id: c.spiffe_id.clone(),
            rng: StdRng::seed_from_u64(seed),
            edge,
            direct,
            rec,
            register: RegisterClient::connect(plan.register).await?,
            pg,
            plan: plan.clone(),
            next_op: 0,
            session: None,
            link: None,
            ops: 0,
            contested,
            shared: false,
            permits: false,
            granted_permits: Vec::new(),
        })
    }

    fn event(&self, op: u64, ph: Phase, f: Kind) -> Event {
        Event {
            c: self.id,
            op,
            t: mono_ns(),
            ph,
            f,
            key: None,
            session: self.session.as_ref().map(|s| s.id),
            token: None,
            why: None,
            via: None,
            served: None,
            rev: None,
            set: None,
            shared: self.shared && matches!(f, Kind::Acquire | Kind::Release),
            permit: None,
        }
    }

    fn mode(&self) -> i32 {
        if self.permits {
            HoldMode::Permit.into()
        } else if self.shared {
            HoldMode::Shared.into()
        } else {
            HoldMode::Exclusive.into()
        }
    }

    /// The permit `token` was granted this round (None: not a permit's token).
    fn permit_of(&self, token: u64) -> Option<u32> {
        self.granted_permits
            .iter()
            .find(|(t, _)| *t == token)
            .map(|(_, p)| *p)
    }

    /// The fenced resources' record for writes to `key` under `token`: the key, or a
    /// semaphore's `<key>//<permit>` (an empty segment no key has), since a resource fences
    /// each permit on its own.
    fn fence_key(&self, key: &str, token: u64) -> String {
        match self.permit_of(token) {
            Some(p) => format!("{key}//{p}"),
            None => key.to_owned(),
        }
    }

    /// Records the invocation; returns the op id.
    fn invoke(
        &mut self,
        f: Kind,
        key: Option<&str>,
        token: Option<u64>,
        via: Option<String>,
    ) -> u64 {
        self.next_op += 1;
        self.ops += 1;
        let mut e = self.event(self.next_op, Phase::Invoke, f);
        e.key = key.map(str::to_owned);
        e.token = token;
        e.permit = token.and_then(|t| self.permit_of(t));
        e.via = via;
        self.rec.record(&e);
        self.next_op
    }

    fn complete<T>(&self, op: u64, f: Kind, outcome: &Outcome<T>, answer: Answer) {
        let (ph, why) = match outcome {
            Outcome::Ok(_) => (Phase::Ok, None),
            Outcome::Fail(w) => (Phase::Fail, Some(w.clone())),
            Outcome::Unknown(w) => (Phase::Info, Some(w.clone())),
        };
        let mut e = self.event(op, ph, f);
        e.token = answer.token;
        e.served = answer.served;
        e.rev = answer.rev;
        e.permit = answer.permit;
        e.why = why;
        self.rec.record(&e);
    }

    /// The edge, or (for `direct_percent` of calls) one arbiter chosen at random.
    fn route(&mut self) -> (LockClient<Channel>, String) {
        if !self.direct.is_empty() && self.rng.random_range(0..100) < self.plan.direct_percent {
            let i = self.rng.random_range(0..self.direct.len());
            (self.direct[i].clone(), format!("direct:{i}"))
        } else {
            (self.edge.clone(), "edge".into())
        }
    }

    /// A request as Envoy would forward it, for the direct route.
    fn request<T>(&self, msg: T, key: &str, via: &str) -> tonic::Request<T> {
        let direct_as = (!via.starts_with("edge")).then_some(self.spiffe_id.as_str());
        lock_integration::routed(msg, key, direct_as)
    }

    fn done(&self) -> bool {
        mono_ns() >= self.plan.until
            || self.ops >= self.plan.max_ops_per_client
            || self.plan.stop_file.exists()
    }

    async fn run(mut self) -> anyhow::Result<()> {
        while !self.done() {
            self.shared = false;
            self.granted_permits.clear();
            let (key, contested) = match self.contested_key() {
                Some(k) => (k, true),
                None => (self.plan.keys.pick(&mut self.rng, self.plan.origin), false),
            };
            // A stalled permit holder's key is waited for as a permit.
            self.permits = contested && self.plan.keys.is_sem(&key);
            if self
                .session
                .as_ref()
                .is_none_or(|s| s.dead.load(Ordering::SeqCst))
            {
                self.session = None;
                if !self.open_session(&key).await {
                    self.pause(100, 300).await;
                    continue;
                }
            }
            if !contested && self.rng.random_range(0..100) < self.plan.election_percent {
                let key = self.plan.keys.leader(self.plan.origin);
                self.lead(&key).await;
                continue;
            }
            if !contested && self.rng.random_range(0..100) < self.plan.shared_percent {
                let key = self.plan.keys.pick_shared(&mut self.rng, self.plan.origin);
                self.shared_round(&key).await;
                continue;
            }
            if !contested && self.rng.random_range(0..100) < self.plan.sem_percent {
                let key = self.plan.keys.pick_sem(&mut self.rng, self.plan.origin);
                self.permit_round(&key).await;
                continue;
            }
            if !contested && self.rng.random_range(0..100) < self.plan.set_percent {
                let keys = self.plan.keys.pick_set(&mut self.rng, self.plan.origin);
                self.set_round(keys).await;
                continue;
            }
            let wait = if contested {
                // Long enough for the stalled holder's session to expire.
                self.plan.stall_ms
            } else if self.rng.random_range(0..100) < 30 {
                0
            } else {
                self.rng.random_range(200..2000)
            };
            match self.acquire(&key, wait).await {
                Outcome::Ok(token) => self.hold(&key, token).await,
                Outcome::Fail(why) if why == "SESSION_EXPIRED" => self.session = None,
                Outcome::Fail(_) => self.pause(5, 30).await,
                Outcome::Unknown(_) => self.pause(50, 200).await,
            }
        }
        Ok(())
    }

    /// A key whose holder (another client of this worker) is stalled, most of the time
    /// there is one.
    fn contested_key(&mut self) -> Option<String> {
        let now = mono_ns();
        let mut list = self.contested.lock().ok()?;
        list.retain(|(_, until)| *until > now);
        let key = list.first().map(|(k, _)| k.clone())?;
        drop(list);
        (self.rng.random_range(0..100) < 80).then_some(key)
    }

    async fn pause(&mut self, lo: u64, hi: u64) {
        let ms = self.rng.random_range(lo..hi);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    async fn open_session(&mut self, key: &str) -> bool {
        let op = self.invoke(Kind::Open, Some(key), None, Some("edge".into()));
        let mut edge = self.edge.clone();
        // This client's own instance: its sibling (the same identity) is a contender, and a
        // hold of its own earlier session is its leak.
        let req = lock_client::stub::with_instance(
            tonic::Request::new(OpenSessionRequest { key: key.into() }),
            &lock_integration::registry::gate_instance(self.id as usize),
        );
        let r = tokio::time::timeout(CALL_TIMEOUT, edge.open_session(req)).await;
        let outcome = classify(r);
        let mut answer = Answer::default();
        if let Outcome::Ok((resp, served)) = &outcome {
            answer.served = served.clone();
            self.session = Some(Session::start(
                &self.edge,
                &self.rec,
                self.id + KEEPALIVE_CLIENT,
                resp,
            ));
        }
        self.complete(op, Kind::Open, &outcome, answer);
        matches!(outcome, Outcome::Ok(_))
    }

    async fn acquire(&mut self, key: &str, wait_ms: u64) -> Outcome<u64> {
        let (client, via) = self.route();
        self.acquire_via(key, wait_ms, client, via).await
    }

    async fn acquire_via(
        &mut self,
        key: &str,
        wait_ms: u64,
        mut client: LockClient<Channel>,
        mut via: String,
    ) -> Outcome<u64> {
        let Some(session) = self.session.as_ref().map(|s| s.id) else {
            return Outcome::Fail("no session".into());
        };
        // Through the edge, half the locks are taken as lock-client takes them: one `Hold`
        // stream for the acquire and its release.
        let stream = via == "edge" && self.rng.random_bool(0.5);
        if stream {
            via = "edge-stream".into();
        }
        let op = self.invoke(Kind::Acquire, Some(key), None, Some(via.clone()));
        let m = AcquireRequest {
            key: key.into(),
            session_id: session,
            wait_millis: wait_ms,
            mode: self.mode(),
        };
        let limit = CALL_TIMEOUT + Duration::from_millis(wait_ms);
        self.link = None;
        let r = if stream {
            let wrap = |s| self.request(s, key, "edge");
            let call = hold_stream::acquire(&mut client, m, wrap);
            match tokio::time::timeout(limit, call).await {
                Ok((answer, link)) => {
                    self.link = link;
                    Ok(answer)
                }
                Err(elapsed) => Err(elapsed),
            }
        } else {
            let req = self.request(m, key, &via);
            tokio::time::timeout(limit, client.acquire(req)).await
        };
        let mut answer = Answer::default();
        let outcome = match classify(r) {
            Outcome::Ok((resp, served)) => {
                answer.token = Some(resp.token);
                answer.served = served;
                if self.permits {
                    answer.permit = Some(resp.permit);
                    self.granted_permits.push((resp.token, resp.permit));
                }
                Outcome::Ok(resp.token)
            }
            Outcome::Fail(w) => Outcome::Fail(w),
            Outcome::Unknown(w) => Outcome::Unknown(w),
        };
        self.complete(op, Kind::Acquire, &outcome, answer);
        outcome
    }

    async fn release(&mut self, key: &str, token: u64) -> Outcome<()> {
        let session = self.session.as_ref().map(|s| s.id);
        // The hold's own stream carries its release; a replayed old release never does.
        let link = self
            .link
            .take()
            .filter(|l| l.key == key && l.token == token);
        let (mut client, via) = match link {
            Some(_) => (self.edge.clone(), "edge-stream".to_owned()),
            None => self.route(),
        };
        let op = self.invoke(Kind::Release, Some(key), Some(token), Some(via.clone()));
        let m = ReleaseRequest {
            key: key.into(),
            token,
            session_id: session.unwrap_or(0),
            mode: self.mode(),
        };
        let on_stream = match link {
            Some(link) => {
                let call = hold_stream::release(link, m.clone());
                match tokio::time::timeout(CALL_TIMEOUT, call).await {
                    Ok(Some(answer)) => Some(Ok(answer)),
                    // The stream ended without taking it: the unary call below.
                    Ok(None) => None,
                    Err(elapsed) => Some(Err(elapsed)),
                }
            }
            None => None,
        };
        let r = match on_stream {
            Some(r) => r,
            None => {
                let via = if via == "edge-stream" { "edge" } else { &via };
                let req = self.request(m, key, via);
                tokio::time::timeout(CALL_TIMEOUT, client.release(req)).await
            }
        };
        let mut answer = Answer::default();
        let outcome = match classify(r) {
            Outcome::Ok((resp, served)) => {
                answer.served = served;
                answer.rev = Some(resp.released_at_revision);
                Outcome::Ok(())
            }
            Outcome::Fail(w) => Outcome::Fail(w),
            Outcome::Unknown(w) => Outcome::Unknown(w),
        };
        self.complete(op, Kind::Release, &outcome, answer);
        outcome
    }

    /// The guarded writes of a holder: the register, then PostgreSQL if present.
    async fn write(&mut self, key: &str, token: u64) {
        self.write_register(key, token).await;
        if self.pg.is_none() {
            return;
        }
        let op = self.invoke(Kind::PgWrite, Some(key), Some(token), None);
        let outcome = match self.pg_write(key, token).await {
            Ok(true) => Outcome::Ok(()),
            Ok(false) => Outcome::Fail("STALE".into()),
            Err(e) => Outcome::Unknown(e.to_string()),
        };
        self.complete(op, Kind::PgWrite, &outcome, Answer::default());
    }

    /// A guarded write to the register, which accepts a token equal to the last it
    /// accepted (a leader writes several times in one term) and refuses a lower one.
    async fn write_register(&mut self, key: &str, token: u64) {
        let op = self.invoke(Kind::Write, Some(key), Some(token), None);
        let fenced = self.fence_key(key, token);
        let outcome =
            match tokio::time::timeout(CALL_TIMEOUT, self.register.write(&fenced, token)).await {
                Ok(Ok(true)) => Outcome::Ok(()),
                Ok(Ok(false)) => Outcome::Fail("STALE".into()),
                Ok(Err(e)) => Outcome::Unknown(e.to_string()),
                Err(_) => Outcome::Unknown("timeout".into()),
            };
        self.complete(op, Kind::Write, &outcome, Answer::default());
    }

    async fn pg_write(&mut self, key: &str, token: u64) -> anyhow::Result<bool> {
        let Some(db) = self.pg.as_ref() else {
            return Ok(false);
        };
        let id = record_id(&self.fence_key(key, token));
        let fence = i64::try_from(token)?;
        db.execute(
            "INSERT INTO fenced_resource (id, value, fence) VALUES ($1, '', 0) ON CONFLICT (id) DO NOTHING",
            &[&id],
        )
        .await?;
        let value = format!("client {}", self.id);
        let n = tokio::time::timeout(
            CALL_TIMEOUT,
            db.execute(
                lock_pause_test::fence::REFERENCE_WRITE,
                &[&id, &value, &fence],
            ),
        )
        .await??;
        Ok(n == 1)
    }

    async fn hold(&mut self, key: &str, token: u64) {
        // The work, then its write: a holder frozen during the work resumes to write with
        // its old token, which the fences must refuse once a newer holder has written.
        self.pause(50, 300).await;
        if self.rng.random_range(0..100) < self.plan.stall_percent {
            self.stall(key).await;
        }
        self.write(key, token).await;
        if self.rng.random_range(0..100) < self.plan.leak_percent {
            self.leak(key).await;
            return;
        }
        let released = self.release(key, token).await;
        if matches!(released, Outcome::Ok(()))
            && self.rng.random_range(0..100) < self.plan.replay_percent
        {
            // Take the key again at once and replay the old release, as a client whose
            // earlier release was delayed in the network would: it must be refused.
            if let Outcome::Ok(again) = self.acquire(key, 0).await {
                self.release(key, token).await;
                self.write(key, again).await;
                self.release(key, again).await;
            }
        }
    }
}

impl Client {
    /// An election round (issue 35): campaign for `key` (the generation's leader key) by
    /// waiting in its queue through the edge, lead for a few writes to the register under
    /// the one term, then resign. The term is the grant's token, so every per-key check
    /// holds an election to the lock's rules: terms rise in grant order, and the register
    /// never accepts a deposed leader's write after a later leader's.
    async fn lead(&mut self, key: &str) {
        let wait = self.rng.random_range(1500..4000);
        let via = "edge-elect".to_owned();
        let edge = self.edge.clone();
        let term = match self.acquire_via(key, wait, edge, via).await {
            Outcome::Ok(term) => term,
            Outcome::Fail(why) if why == "SESSION_EXPIRED" => {
                self.session = None;
                return;
            }
            Outcome::Fail(_) => return self.pause(5, 30).await,
            Outcome::Unknown(_) => return self.pause(50, 200).await,
        };
        for _ in 0..self.rng.random_range(2..=4) {
            self.pause(40, 160).await;
            self.write_register(key, term).await;
        }
        self.release(key, term).await;
    }

    /// Loses this client's session while it holds `key` (renewals stop; the hold stays
    /// until the store expires the session), then asks for `key` again under a new session
    /// with the same instance, waiting or not: its own leaked hold, to be told LEAKED_HOLD
    /// (the replica check of the history counts these and refuses any to a client that
    /// never held the key).
    async fn leak(&mut self, key: &str) {
        self.session = None;
        if !self.open_session(key).await {
            return;
        }
        let wait = if self.rng.random_bool(0.5) {
            0
        } else {
            self.rng.random_range(200..2000)
        };
        if let Outcome::Ok(token) = self.acquire(key, wait).await {
            // The old session's hold had already lapsed (a slow run): an ordinary grant.
            self.release(key, token).await;
        }
    }

    /// Stops this holder (and its renewals) past its session's TTL while the worker's other
    /// clients wait for its key: the store ends the session, a waiter is granted and
    /// writes, and this holder then resumes believing it still holds.
    async fn stall(&mut self, key: &str) {
        let Some(stalled) = self.session.as_ref().map(|s| s.stalled.clone()) else {
            return;
        };
        let until = mono_ns() + self.plan.stall_ms * 1_000_000;
        if let Ok(mut list) = self.contested.lock() {
            list.push((key.to_owned(), until));
        }
        stalled.store(true, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(self.plan.stall_ms)).await;
        stalled.store(false, Ordering::SeqCst);
    }
}

/// The row of the PostgreSQL fence for `key` (FNV-1a; a collision only adds refusals).
fn record_id(key: &str) -> i64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    (h >> 1) as i64
}
