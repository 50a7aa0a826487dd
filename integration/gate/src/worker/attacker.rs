//! The attacker in the load (issue 17): a workload with a real certificate and a real grant
//! on the gate's prefixes (a compromised neighbour, the strongest position short of owning
//! the edge) that, throughout the run and its faults, tries to act as the other clients:
//! forged `x-lock-*` headers and trailers, a granted key in the headers with an ungranted one
//! in the body, calls straight to the arbiters with its own certificate or none, and the
//! victims' own sessions and tokens (read from their histories, as if stolen).
//!
//! Every attack on a victim is recorded as an `attack` operation (`via` names it) and must
//! be refused: the checker reports any that succeeded. A call straight to an arbiter
//! succeeds when the arbiter answers it at all: the handshake must refuse it. Forged headers on the attacker's own
//! keys are recorded as ordinary acquires and releases: the edge strips the forgery and the
//! grant is the attacker's, which the checks on every grant then verify (the holder record
//! names the certificate's identity, not the forged one).

use super::renewals::Session;
use super::{CALL_TIMEOUT, KEEPALIVE_CLIENT, WorkerPlan};
use crate::history::{Event, Kind, Phase, Recorder, mono_ns};
use lock_client::proto::lock_client::LockClient;
use lock_client::stub::{self as remote, Svid};
use lock_config::edge_headers::{IDENTITY_HEADER, KEY_HEADER, encode_key};
use lock_config::proto::v1::{
    AcquireRequest, AcquireResponse, CloseSessionRequest, HoldMode, OpenSessionRequest,
    ReleaseRequest,
};
use lock_integration::h2raw::{H2Client, Part, Reply, grpc_frame};
use lock_integration::pki::SvidFiles;
use lock_integration::registry::gate_id;
use prost::Message as _;
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use serde::{Deserialize, Serialize};
use std::io::{Read as _, Seek as _};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tonic::transport::Channel;

/// The attacker's part of a worker's plan.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttackerPlan {
    /// Its client id; its identity is `gate_id(id)`, granted the gate's prefixes.
    pub id: u32,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
    /// The other workers' histories: where it learns victims' keys, sessions and tokens.
    pub victims: Vec<PathBuf>,
    /// Its own keys (under the gate's prefix, used by nobody else).
    pub own_prefix: String,
    /// A key it is not granted.
    pub ungranted_key: String,
}

/// The attacks, each a name (the operation's `via` after `attack:`): the first
/// [`VICTIM_ATTACKS`] on the other clients (each must be refused), then two on its own keys.
pub const ATTACKS: [&str; 12] = [
    "release-other-session",
    "close-other-session",
    "acquire-other-session",
    "release-with-own-session",
    "release-forged-identity-header",
    "release-forged-identity-trailer",
    "close-forged-identity-trailer",
    "ungranted-body-key",
    "direct-without-cert",
    "direct-with-workload-cert",
    "acquire-forged-identity-header",
    "acquire-forged-identity-trailer",
];
const VICTIM_ATTACKS: usize = 10;
const ON_VICTIMS: &[&str] = ATTACKS.split_at(VICTIM_ATTACKS).0;
const ON_OWN_KEYS: &[&str] = ATTACKS.split_at(VICTIM_ATTACKS).1;

/// A hold seen in a victim's history: what a thief of its secrets would know.
#[derive(Debug, Clone)]
struct Victim {
    client: u32,
    key: String,
    session: i64,
    token: u64,
    /// A semaphore's permit: attacked in its own mode (`PERMIT`), so that what refuses
    /// the attack is the ownership check, not the mode's.
    permit: bool,
}

enum Outcome {
    Ok(Option<u64>),
    Fail(String),
    Unknown(String),
}

pub(super) struct Attacker {
    plan: WorkerPlan,
    me: AttackerPlan,
    rng: StdRng,
    rec: Arc<Recorder>,
    edge: LockClient<Channel>,
    edge_addr: SocketAddr,
    svid: SvidFiles,
    session: Option<Session>,
    next_op: u64,
    victims: Vec<Victim>,
    victims_read: u64,
}

impl Attacker {
    pub(super) async fn connect(
        plan: &WorkerPlan,
        me: AttackerPlan,
        rec: Arc<Recorder>,
        seed: u64,
    ) -> anyhow::Result<Self> {
        let svid = Svid {
            cert: Some(&me.cert),
            key: Some(&me.key),
            ca: &me.ca,
        };
        let edge = remote::connect(&plan.endpoint, &svid, "localhost").await?;
        let edge_addr: SocketAddr = plan
            .endpoint
            .trim_start_matches("https://")
            .trim_end_matches('/')
            .parse()?;
        Ok(Self {
            svid: SvidFiles {
                cert: me.cert.clone(),
                key: me.key.clone(),
                ca: me.ca.clone(),
            },
            plan: plan.clone(),
            me,
            rng: StdRng::seed_from_u64(seed),
            rec,
            edge,
            edge_addr,
            session: None,
            next_op: 0,
            victims: Vec::new(),
            victims_read: 0,
        })
    }

    fn done(&self) -> bool {
        mono_ns() >= self.plan.until || self.plan.stop_file.exists()
    }

    pub(super) async fn run(mut self) -> anyhow::Result<()> {
        while !self.done() {
            if self
                .session
                .as_ref()
                .is_none_or(|s| s.dead.load(Ordering::SeqCst))
            {
                self.session = None;
                self.open_session().await;
            }
            if mono_ns().saturating_sub(self.victims_read) > 1_000_000_000 {
                self.victims = read_victims(&self.me.victims, self.me.id);
                self.victims_read = mono_ns();
            }
            if self.rng.random_range(0..100) < 20 {
                let name = ON_OWN_KEYS[self.rng.random_range(0..ON_OWN_KEYS.len())];
                self.own_key(name).await;
            } else if !self.victims.is_empty() {
                let v = self.victims[self.rng.random_range(0..self.victims.len())].clone();
                let name = ON_VICTIMS[self.rng.random_range(0..ON_VICTIMS.len())];
                let op = self.invoke(Kind::Attack, &v.key, None, name);
                let outcome = self.attack(name, &v).await;
                self.complete(op, Kind::Attack, &outcome);
            }
            let ms = self.rng.random_range(50..250);
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        Ok(())
    }

    fn own_session(&self) -> i64 {
        self.session.as_ref().map_or(0, |s| s.id)
    }

    async fn open_session(&mut self) {
        let key = format!("{}/k0", self.me.own_prefix);
        let op = self.invoke(Kind::Open, &key, None, "");
        let r = tokio::time::timeout(
            CALL_TIMEOUT,
            self.edge.open_session(OpenSessionRequest { key }),
        )
        .await;
        let outcome = match r {
            Ok(Ok(resp)) => {
                let resp = resp.into_inner();
                self.session = Some(Session::start(
                    &self.edge,
                    &self.rec,
                    self.me.id + KEEPALIVE_CLIENT,
                    &resp,
                ));
                Outcome::Ok(None)
            }
            Ok(Err(status)) => status_outcome(&status),
            Err(_) => Outcome::Unknown("timeout".into()),
        };
        self.complete(op, Kind::Open, &outcome);
    }

    /// Forged identity headers or trailers on a call for its own key: the grant must be
    /// the attacker's (checked on the store's holder record like every grant).
    async fn own_key(&mut self, name: &str) {
        let session = self.own_session();
        if session == 0 {
            return;
        }
        let key = format!("{}/k{}", self.me.own_prefix, self.rng.random_range(0..3));
        let victim = gate_id(self.rng.random_range(1..=9));
        let msg = AcquireRequest {
            key: key.clone(),
            session_id: session,
            wait_millis: 0,
            ..Default::default()
        };
        let op = self.invoke(Kind::Acquire, &key, None, name);
        let outcome = if name == "acquire-forged-identity-header" {
            let mut req = tonic::Request::new(msg);
            forge(&mut req, &victim, &key);
            let mut edge = self.edge.clone();
            match tokio::time::timeout(CALL_TIMEOUT, edge.acquire(req)).await {
                Ok(Ok(r)) => Outcome::Ok(Some(r.into_inner().token)),
                Ok(Err(status)) => status_outcome(&status),
                Err(_) => Outcome::Unknown("timeout".into()),
            }
        } else {
            let trailers = forged_trailers(&victim, &key);
            let reply = self
                .raw(
                    self.edge_addr,
                    true,
                    "Acquire",
                    &[],
                    msg.encode_to_vec(),
                    trailers,
                )
                .await;
            match reply {
                RawResult::Reply(r) if r.ok() => match r.decode::<AcquireResponse>() {
                    Ok(a) => Outcome::Ok(Some(a.token)),
                    Err(e) => Outcome::Unknown(e.to_string()),
                },
                RawResult::Reply(r) => reply_outcome(&r),
                RawResult::Refused(w) | RawResult::Unknown(w) => Outcome::Unknown(w),
            }
        };
        self.complete(op, Kind::Acquire, &outcome);
        if let Outcome::Ok(Some(token)) = outcome {
            // Its own release, plainly: the hold is the attacker's.
            let op = self.invoke(Kind::Release, &key, Some(token), "own-release");
            let req = ReleaseRequest {
                key: key.clone(),
                token,
                session_id: session,
                ..Default::default()
            };
            let mut edge = self.edge.clone();
            let outcome = match tokio::time::timeout(CALL_TIMEOUT, edge.release(req)).await {
                Ok(Ok(_)) => Outcome::Ok(None),
                Ok(Err(status)) => status_outcome(&status),
                Err(_) => Outcome::Unknown("timeout".into()),
            };
            self.complete(op, Kind::Release, &outcome);
        }
    }

    async fn attack(&mut self, name: &str, v: &Victim) -> Outcome {
        let victim_id = gate_id(v.client as usize);
        let mode = if v.permit {
            HoldMode::Permit.into()
        } else {
            HoldMode::Exclusive.into()
        };
        let release = ReleaseRequest {
            key: v.key.clone(),
            token: v.token,
            session_id: v.session,
            mode,
        };
        let mut edge = self.edge.clone();
        let call = async {
            match name {
                "release-other-session" => edge.release(release.clone()).await.map(|_| None),
                "close-other-session" => edge
                    .close_session(CloseSessionRequest {
                        session_id: v.session,
                    })
                    .await
                    .map(|_| None),
                "acquire-other-session" => edge
                    .acquire(AcquireRequest {
                        key: v.key.clone(),
                        session_id: v.session,
                        wait_millis: 0,
                        mode,
                    })
                    .await
                    .map(|r| Some(r.into_inner().token)),
                "release-with-own-session" => {
                    let mut r = release.clone();
                    r.session_id = self.own_session();
                    edge.release(r).await.map(|_| None)
                }
                "release-forged-identity-header" => {
                    let mut req = tonic::Request::new(release.clone());
                    forge(&mut req, &victim_id, &v.key);
                    edge.release(req).await.map(|_| None)
                }
                _ => Err(tonic::Status::unimplemented("raw")),
            }
        };
        let tonic_attack = !matches!(
            name,
            "release-forged-identity-trailer"
                | "close-forged-identity-trailer"
                | "ungranted-body-key"
                | "direct-without-cert"
                | "direct-with-workload-cert"
        );
        if tonic_attack {
            return match tokio::time::timeout(CALL_TIMEOUT, call).await {
                Ok(Ok(token)) => Outcome::Ok(token),
                Ok(Err(status)) => status_outcome(&status),
                Err(_) => Outcome::Unknown("timeout".into()),
            };
        }
        drop(call);
        let forged_headers = [
            (IDENTITY_HEADER, victim_id.as_str()),
            (KEY_HEADER, v.key.as_str()),
        ];
        let encoded_key = encode_key(&v.key);
        let (addr, cert, method, headers, body, trailers) = match name {
            "release-forged-identity-trailer" => (
                self.edge_addr,
                true,
                "Release",
                Vec::new(),
                release.encode_to_vec(),
                forged_trailers(&victim_id, &v.key),
            ),
            "close-forged-identity-trailer" => (
                self.edge_addr,
                true,
                "CloseSession",
                Vec::new(),
                CloseSessionRequest {
                    session_id: v.session,
                }
                .encode_to_vec(),
                forged_trailers(&victim_id, &v.key),
            ),
            // The key it may lock in the headers (as the edge would set it, and as the
            // fast path's metadata key), one it may not in the body.
            "ungranted-body-key" => (
                self.edge_addr,
                true,
                "Acquire",
                vec![
                    (KEY_HEADER, encoded_key.as_str()),
                    ("lock-key", encoded_key.as_str()),
                ],
                AcquireRequest {
                    key: self.me.ungranted_key.clone(),
                    session_id: self.own_session(),
                    wait_millis: 0,
                    ..Default::default()
                }
                .encode_to_vec(),
                Vec::new(),
            ),
            // Straight to an arbiter, with the headers the edge would have set.
            direct => {
                let i = self.rng.random_range(0..self.plan.arbiters.len().max(1));
                let addr = self.plan.arbiters.get(i).copied().unwrap_or(self.edge_addr);
                (
                    addr,
                    direct == "direct-with-workload-cert",
                    "Release",
                    forged_headers.to_vec(),
                    release.encode_to_vec(),
                    Vec::new(),
                )
            }
        };
        let direct = addr != self.edge_addr;
        match self.raw(addr, cert, method, &headers, body, trailers).await {
            // Around the edge the attack is being read at all: an arbiter that answers with
            // any status (even a refusal of the stolen token) admitted a peer that is not the
            // edge, and what it then decides hangs on whether the victim's hold is still
            // live, which a short run cannot count on.
            RawResult::Reply(_) if direct => Outcome::Ok(None),
            RawResult::Reply(r) => reply_outcome(&r),
            // Refused at the TLS handshake: the request was never read.
            RawResult::Refused(w) => Outcome::Fail(format!("PEER_REFUSED ({w})")),
            RawResult::Unknown(w) => Outcome::Unknown(w),
        }
    }

    /// One raw HTTP/2 exchange (`cert`: present the attacker's certificate, or none).
    async fn raw(
        &self,
        addr: SocketAddr,
        cert: bool,
        method: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
        trailers: Vec<(String, String)>,
    ) -> RawResult {
        let svid = cert.then_some(&self.svid);
        let direct = addr != self.edge_addr;
        let exchange = async {
            let mut client = match H2Client::connect(addr, svid, &self.me.ca, "localhost").await {
                Ok(c) => c,
                Err(e) if direct => return RawResult::Refused(short(&e.to_string())),
                Err(e) => return RawResult::Unknown(short(&e.to_string())),
            };
            let mut parts = vec![Part::Data(grpc_frame(&body))];
            parts.push(if trailers.is_empty() {
                Part::End
            } else {
                Part::Trailers(trailers)
            });
            match client.call(method, headers, &parts).await {
                Ok(r) if r.grpc_status.is_some() => RawResult::Reply(r),
                // TLS 1.3: a refused client certificate shows as the first read failing.
                Ok(r) if direct => RawResult::Refused(short(r.failed.as_deref().unwrap_or(""))),
                Ok(r) => RawResult::Unknown(short(r.failed.as_deref().unwrap_or("no status"))),
                Err(e) if direct => RawResult::Refused(short(&e.to_string())),
                Err(e) => RawResult::Unknown(short(&e.to_string())),
            }
        };
        tokio::time::timeout(CALL_TIMEOUT, exchange)
            .await
            .unwrap_or_else(|_| RawResult::Unknown("timeout".into()))
    }

    fn invoke(&mut self, f: Kind, key: &str, token: Option<u64>, name: &str) -> u64 {
        self.next_op += 1;
        self.rec.record(&Event {
            c: self.me.id,
            op: self.next_op,
            t: mono_ns(),
            ph: Phase::Invoke,
            f,
            key: Some(key.to_owned()),
            session: self.session.as_ref().map(|s| s.id),
            token,
            why: None,
            // Its own session's opening is no attack.
            via: Some(if name.is_empty() {
                "edge".to_owned()
            } else {
                format!("attack:{name}")
            }),
            served: None,
            rev: None,
            set: None,
            shared: false,
            permit: None,
        });
        self.next_op
    }

    fn complete(&self, op: u64, f: Kind, outcome: &Outcome) {
        let (ph, why, token) = match outcome {
            Outcome::Ok(t) => (Phase::Ok, None, *t),
            Outcome::Fail(w) => (Phase::Fail, Some(w.clone()), None),
            Outcome::Unknown(w) => (Phase::Info, Some(w.clone()), None),
        };
        // An attack's own token is never recorded: only a grant to the attacker has one.
        let token = if f == Kind::Attack { None } else { token };
        self.rec.record(&Event {
            c: self.me.id,
            op,
            t: mono_ns(),
            ph,
            f,
            key: None,
            session: self.session.as_ref().map(|s| s.id),
            token,
            why,
            via: None,
            served: None,
            rev: None,
            set: None,
            shared: false,
            permit: None,
        });
    }
}

enum RawResult {
    Reply(Reply),
    Refused(String),
    Unknown(String),
}

fn short(s: &str) -> String {
    s.chars().take(80).collect()
}

/// The victim's identity and key as edge headers on a tonic request.
fn forge<T>(req: &mut tonic::Request<T>, identity: &str, key: &str) {
    let md = req.metadata_mut();
    if let Ok(v) = identity.parse() {
        md.insert(IDENTITY_HEADER, v);
    }
    if let Ok(v) = encode_key(key).parse() {
        md.insert(KEY_HEADER, v);
    }
}

fn forged_trailers(identity: &str, key: &str) -> Vec<(String, String)> {
    vec![
        (IDENTITY_HEADER.to_owned(), identity.to_owned()),
        (KEY_HEADER.to_owned(), encode_key(key)),
    ]
}

fn status_outcome(status: &tonic::Status) -> Outcome {
    match crate::refusal::of_status(status) {
        crate::refusal::Refused::Fail(why) => Outcome::Fail(why),
        crate::refusal::Refused::Unknown(why) => Outcome::Unknown(why),
    }
}

fn reply_outcome(r: &Reply) -> Outcome {
    match (r.grpc_status, r.reason) {
        (Some(0), _) => Outcome::Ok(None),
        (_, Some(reason)) if reason.as_str() == "NO_QUORUM" => {
            Outcome::Unknown(reason.as_str().into())
        }
        (_, Some(reason)) => Outcome::Fail(reason.as_str().into()),
        (Some(code), None) => Outcome::Unknown(format!("grpc-status {code}")),
        (None, None) => Outcome::Unknown(short(r.failed.as_deref().unwrap_or("no status"))),
    }
}

/// The latest grant of each other client in the victims' histories (their last 64 KiB;
/// the attacker's own history shares a file with its worker's clients).
fn read_victims(paths: &[PathBuf], me: u32) -> Vec<Victim> {
    let mut out = Vec::new();
    for p in paths {
        let Ok(mut f) = std::fs::File::open(p) else {
            continue;
        };
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = f.seek(std::io::SeekFrom::Start(len.saturating_sub(64 * 1024)));
        let mut text = String::new();
        if f.read_to_string(&mut text).is_err() {
            continue;
        }
        let mut invoked = std::collections::HashMap::new();
        let mut latest = std::collections::BTreeMap::new();
        for line in text.lines() {
            let Ok(e) = serde_json::from_str::<Event>(line) else {
                continue;
            };
            if e.c == me {
                continue;
            }
            match (e.f, e.ph) {
                (Kind::Acquire, Phase::Invoke) => {
                    invoked.insert((e.c, e.op), e.key.clone());
                }
                (Kind::Acquire, Phase::Ok) => {
                    if let (Some(Some(key)), Some(session), Some(token)) =
                        (invoked.remove(&(e.c, e.op)), e.session, e.token)
                    {
                        latest.insert(
                            e.c,
                            Victim {
                                client: e.c,
                                key,
                                session,
                                token,
                                permit: e.permit.is_some(),
                            },
                        );
                    }
                }
                _ => {}
            }
        }
        out.extend(latest.into_values());
    }
    out
}
