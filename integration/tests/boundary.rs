//! Issue 13: the trust boundary, tested as an attacker would, at the HTTP/2 frame level,
//! through real Envoy with the built filter and straight at real arbiters.
//!
//! The trust chain and what each layer stops (docs/src/security/trust-chain.md):
//! 1. the filter: identity from the client certificate (exactly one URI SAN); `x-lock-*`
//!    removed from headers and trailers; a request undecided when its trailers or end of
//!    stream arrive is refused, so nothing undecided reaches an arbiter;
//! 2. the arbiter reads `x-lock-identity`/`x-lock-key` from the initial HEADERS only (tonic
//!    merges request trailers into metadata);
//! 3. the arbiter admits only peers whose certificate's single URI SAN is Envoy's.
//!
//! Each layer has a probe that looks at etcd (and Envoy's upstream counter) for what the
//! attack would leave behind. With every layer on, every probe is clean. Then each layer is
//! switched off in turn (a debug-only switch: `unsafeTestSwitches` in the filter's debug
//! build, `--inject-bug` in the arbiter's) and its own probe is seen to catch it, while the
//! end-to-end forgery probe stays clean on the remaining layers.
//!
//! The attacker is the ledger workload (granted `pay/ledger` only); the victim is the
//! operator identity, which holds `orders/victim` on a session of its own.

use lock_client::proto::lock_client::LockClient;
use lock_config::edge_headers::encode_key;
use lock_config::proto::v1::*;
use lock_config::{FencingToken, Reason};
use lock_integration::h2raw::{H2Client, Part, Reply, grpc_frame, send_raw_frames};
use lock_integration::pki::{ENVOY_ID, LEDGER, OPERATOR, ORDERS, SvidFiles};
use lock_integration::{Stack, StackOptions};
use prost::Message as _;
use tonic::transport::Channel;

const VICTIM_KEY: &str = "orders/victim";

struct Scene {
    stack: Stack,
    ledger: SvidFiles,
    /// The operator's own session and its hold on VICTIM_KEY.
    victim_session: i64,
}

async fn scene(filter_switches: &[&str], arbiter_bugs: &[&str]) -> Scene {
    let stack = Stack::start(StackOptions {
        arbiters: 1,
        arbiter_args: lock_integration::inject_bugs(arbiter_bugs),
        filter_switches: filter_switches.iter().map(|s| (*s).to_owned()).collect(),
        ..StackOptions::default()
    })
    .await
    .expect("stack starts");
    let ledger = stack.pki.svid("attacker-ledger", LEDGER).unwrap();
    let mut op = stack.workload(OPERATOR).await.unwrap();
    let victim_session = op
        .open_session(OpenSessionRequest {
            key: VICTIM_KEY.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .session_id;
    op.acquire(AcquireRequest {
        key: VICTIM_KEY.into(),
        session_id: victim_session,
        wait_millis: 0,
        ..Default::default()
    })
    .await
    .unwrap();
    Scene {
        stack,
        ledger,
        victim_session,
    }
}

impl Scene {
    async fn edge(&self, svid: &SvidFiles) -> H2Client {
        H2Client::connect(self.stack.envoy.listen, Some(svid), &svid.ca, "localhost")
            .await
            .expect("TLS + HTTP/2 to Envoy")
    }

    /// A raw HTTP/2 connection straight to the arbiter presenting `svid` (None: no
    /// certificate); Err if the handshake or the connection is refused.
    async fn direct(&self, svid: Option<&SvidFiles>) -> anyhow::Result<H2Client> {
        H2Client::connect(
            self.stack.arbiters[0].addr,
            svid,
            &self.stack.pki.bundle(),
            "localhost",
        )
        .await
    }

    async fn upstream_requests(&self) -> u64 {
        self.stack
            .envoy
            .stat("cluster.arbiters.upstream_rq_total")
            .unwrap()
            .unwrap_or(0)
    }

    /// What an attack leaves in etcd: a session or holder naming the operator that is not
    /// its own, the victim's hold gone, or a hold on a key the ledger may not lock.
    async fn forgeries(&self) -> Vec<String> {
        let mut etcd = self.stack.etcd_client().await.unwrap();
        let mut found = Vec::new();
        let prefix = Some(etcd_client::GetOptions::new().with_prefix());
        let sessions = etcd.get("/s/", prefix.clone()).await.unwrap();
        for kv in sessions.kvs() {
            let v: serde_json::Value = serde_json::from_slice(kv.value()).unwrap();
            let key = kv.key_str().unwrap().to_owned();
            if v["spiffe_id"] == OPERATOR && key != format!("/s/{:x}", self.victim_session) {
                found.push(format!("session {key} opened in the operator's name"));
            }
        }
        let holds = etcd.get("/l/", prefix).await.unwrap();
        let mut victim_held = false;
        for kv in holds.kvs() {
            let v: serde_json::Value = serde_json::from_slice(kv.value()).unwrap();
            let key = kv.key_str().unwrap().trim_start_matches("/l/").to_owned();
            if key == VICTIM_KEY && v["session"] == format!("{:x}", self.victim_session) {
                victim_held = true;
            } else if v["spiffe_id"] == OPERATOR {
                found.push(format!("{key} held in the operator's name"));
            } else if !key.starts_with("pay/ledger/") {
                found.push(format!("{key} held by {}", v["spiffe_id"]));
            }
        }
        if !victim_held {
            found.push("the operator's hold was ended by someone else".into());
        }
        found
    }

    /// Layer 1 end to end: trailers naming another identity (and key) on every method,
    /// through Envoy. Returns what reached etcd.
    async fn probe_trailer_forgery(&self) -> Vec<String> {
        let mut c = self.edge(&self.ledger).await;
        let forged = |key: &str| {
            Part::Trailers(vec![
                ("x-lock-identity".into(), OPERATOR.into()),
                ("x-lock-key".into(), encode_key(key)),
            ])
        };
        let key = "pay/ledger/trailer";
        let open = c
            .call(
                "OpenSession",
                &[],
                &[
                    Part::Data(grpc_frame(
                        &OpenSessionRequest { key: key.into() }.encode_to_vec(),
                    )),
                    forged(key),
                ],
            )
            .await
            .unwrap();
        if let Ok(s) = open.decode::<OpenSessionResponse>() {
            let acquire = |key: &str| AcquireRequest {
                key: key.into(),
                session_id: s.session_id,
                wait_millis: 0,
                ..Default::default()
            };
            // An Acquire, and a Hold stream (decided on its first message), each ended by
            // forged trailers.
            let hold_key = "pay/ledger/trailer-hold";
            let hold = HoldRequest {
                step: Some(hold_request::Step::Acquire(acquire(hold_key))),
            };
            for (method, k, body) in [
                ("Acquire", key, acquire(key).encode_to_vec()),
                ("Hold", hold_key, hold.encode_to_vec()),
            ] {
                let parts = [Part::Data(grpc_frame(&body)), forged(k)];
                c.call(method, &[], &parts).await.unwrap();
            }
        }
        // CloseSession carries no key: the forged identity is all that would name the
        // victim's session, in a namespace the ledger has no grant for.
        let close = CloseSessionRequest {
            session_id: self.victim_session,
        };
        c.call(
            "CloseSession",
            &[],
            &[Part::Data(grpc_frame(&close.encode_to_vec())), forged(key)],
        )
        .await
        .unwrap();
        self.forgeries().await
    }

    /// Layer 1's own rule: a request still undecided when its trailers arrive is refused
    /// at the edge and never reaches an arbiter. Returns what went wrong.
    async fn probe_undecided(&self) -> Vec<String> {
        let mut c = self.edge(&self.ledger).await;
        let body = grpc_frame(
            &OpenSessionRequest {
                key: "pay/ledger/undecided".into(),
            }
            .encode_to_vec(),
        );
        let mut wrong = Vec::new();
        let cases: Vec<(&str, Vec<Part>)> = vec![
            (
                "trailers before the message is complete",
                vec![
                    Part::Data(body[..body.len() - 3].to_vec()),
                    Part::Trailers(vec![("x-anything".into(), "1".into())]),
                ],
            ),
            (
                "trailers with no message",
                vec![Part::Trailers(vec![(
                    "x-lock-identity".into(),
                    OPERATOR.into(),
                )])],
            ),
            (
                "trailers after half the length prefix",
                vec![
                    Part::Data(body[..2].to_vec()),
                    Part::Trailers(vec![("x-lock-key".into(), "pay/ledger/x".into())]),
                ],
            ),
        ];
        for (what, parts) in cases {
            let before = self.upstream_requests().await;
            let reply = c.call("OpenSession", &[], &parts).await.unwrap();
            let after = self.upstream_requests().await;
            if reply.reason != Some(Reason::MalformedRequest) {
                wrong.push(format!("{what}: answered {reply:?}"));
            }
            if after != before {
                wrong.push(format!("{what}: reached an arbiter"));
            }
        }
        wrong
    }

    /// Layer 2's own rule, straight at the arbiter as the edge (Envoy's certificate):
    /// initial headers name the ledger, trailers the operator.
    async fn probe_arbiter_trailers(&self) -> Vec<String> {
        let edge_svid = self.stack.pki.edge_svid();
        let mut c = self.direct(Some(&edge_svid)).await.unwrap();
        let key = "pay/ledger/direct";
        let honest = [("x-lock-identity", LEDGER), ("x-lock-key", key)];
        let forged = Part::Trailers(vec![
            ("x-lock-identity".into(), OPERATOR.into()),
            ("x-lock-key".into(), encode_key(key)),
        ]);
        c.call(
            "OpenSession",
            &honest,
            &[
                Part::Data(grpc_frame(
                    &OpenSessionRequest { key: key.into() }.encode_to_vec(),
                )),
                forged.clone(),
            ],
        )
        .await
        .unwrap();
        let close = CloseSessionRequest {
            session_id: self.victim_session,
        };
        c.call(
            "CloseSession",
            &[("x-lock-identity", LEDGER)],
            &[Part::Data(grpc_frame(&close.encode_to_vec())), forged],
        )
        .await
        .unwrap();
        self.forgeries().await
    }

    /// Layer 3's own rule: only Envoy's identity gets a connection to an arbiter. Each
    /// other peer tries to open a session and take an ungranted key in the operator's name.
    async fn probe_arbiter_peers(&self) -> Vec<String> {
        let pki = &self.stack.pki;
        let foreign_dir = self.stack.dir.join("foreign-ca");
        let foreign = lock_devca::DevCa::create("evil.example").unwrap();
        foreign.save(&foreign_dir).unwrap();
        foreign
            .issue(&lock_devca::Leaf::svid(ENVOY_ID))
            .unwrap()
            .save(&foreign_dir, "envoy")
            .unwrap();
        let peers: Vec<(&str, Option<SvidFiles>)> = vec![
            ("no certificate", None),
            ("a workload's SVID", Some(self.ledger.clone())),
            (
                "Envoy's ID plus a second URI SAN",
                Some(pki.issue("two-sans-a", &[ENVOY_ID, OPERATOR]).unwrap()),
            ),
            (
                "a second URI SAN before Envoy's ID",
                Some(pki.issue("two-sans-b", &[OPERATOR, ENVOY_ID]).unwrap()),
            ),
            ("no URI SAN", Some(pki.issue("no-san", &[]).unwrap())),
            (
                "Envoy's ID from a foreign CA",
                Some(SvidFiles {
                    cert: foreign_dir.join("envoy.pem"),
                    key: foreign_dir.join("envoy.key"),
                    ca: pki.bundle(),
                }),
            ),
        ];
        let mut admitted = Vec::new();
        for (who, svid) in peers {
            let key = format!("archive/forged-{}", admitted.len() + who.len());
            let Ok(mut c) = self.direct(svid.as_ref()).await else {
                continue; // refused at the handshake
            };
            let headers = [("x-lock-identity", OPERATOR), ("x-lock-key", key.as_str())];
            let body = grpc_frame(&OpenSessionRequest { key: key.clone() }.encode_to_vec());
            let reply = c
                .call("OpenSession", &headers, &[Part::Data(body), Part::End])
                .await
                .unwrap_or_default();
            if reply.ok() {
                admitted.push(format!("{who}: admitted and served"));
            }
        }
        // Plaintext HTTP/2 (prior knowledge) to the TLS port.
        let plain = async {
            let tcp = tokio::net::TcpStream::connect(self.stack.arbiters[0].addr).await?;
            let (mut send, conn) = h2::client::handshake(tcp).await?;
            tokio::spawn(conn);
            let req = http::Request::post("http://localhost/lock.v1.Lock/OpenSession")
                .header("content-type", "application/grpc")
                .header("x-lock-identity", OPERATOR)
                .body(())?;
            let (resp, _) = send.send_request(req, true)?;
            anyhow::Ok(resp.await?)
        };
        if let Ok(Ok(_)) = tokio::time::timeout(std::time::Duration::from_secs(10), plain).await {
            admitted.push("plaintext HTTP/2: answered".into());
        }
        let mut found = self.forgeries().await;
        found.extend(admitted);
        found
    }
}

fn assert_clean(what: &str, found: Vec<String>) {
    assert!(found.is_empty(), "{what}: {found:#?}");
}

fn assert_caught(what: &str, found: Vec<String>) {
    assert!(
        !found.is_empty(),
        "{what}: the layer was switched off and the probe saw nothing"
    );
    eprintln!("{what} (expected): {found:#?}");
}

/// What a probe must report on a stack with some layers switched off.
#[derive(Clone, Copy)]
enum Want {
    /// Nothing forged, every rule held.
    Clean,
    /// The switched-off layer's absence is seen.
    Caught,
    /// Not meaningful on this stack (a probe that judges a layer that is off along with
    /// the one that would otherwise stop it).
    Skip,
}

/// Runs the four probes on a stack with `filter_switches` and `arbiter_bugs`, in order:
/// trailer forgery through the edge, undecided requests, trailers straight at the
/// arbiter, peers other than the edge.
async fn layer_row(filter_switches: &[&str], arbiter_bugs: &[&str], want: [Want; 4]) {
    let s = scene(filter_switches, arbiter_bugs).await;
    let names = [
        "trailer forgery through the edge",
        "undecided requests",
        "trailers straight at the arbiter",
        "peers other than the edge",
    ];
    for (i, (name, want)) in names.iter().zip(want).enumerate() {
        let found = match (i, want) {
            (_, Want::Skip) => continue,
            (0, _) => s.probe_trailer_forgery().await,
            (1, _) => s.probe_undecided().await,
            (2, _) => s.probe_arbiter_trailers().await,
            _ => s.probe_arbiter_peers().await,
        };
        let what =
            format!("{name} (filter off: {filter_switches:?}, arbiter off: {arbiter_bugs:?})");
        match want {
            Want::Clean => assert_clean(&what, found),
            Want::Caught => assert_caught(&what, found),
            Want::Skip => {}
        }
    }
}

use Want::{Caught, Clean, Skip};

#[tokio::test]
async fn every_probe_is_clean_with_every_layer_on() {
    layer_row(&[], &[], [Clean, Clean, Clean, Clean]).await;
}

/// Layer 1 alone: with the arbiter reading trailers (layer 2 off), the filter is all that
/// stands between a trailer and the arbiter's view, and it holds; the arbiter's own probe
/// catches layer 2 being off.
#[tokio::test]
async fn the_filter_alone_stops_trailer_forgery() {
    layer_row(
        &[],
        &["edge-headers-from-metadata"],
        [Clean, Clean, Caught, Skip],
    )
    .await;
}

/// Layers 1 and 2 off: the forgery goes through, and the probes see it.
#[tokio::test]
async fn the_filter_switched_off_is_caught() {
    layer_row(
        &["ignore-trailers"],
        &["edge-headers-from-metadata"],
        [Caught, Caught, Caught, Skip],
    )
    .await;
}

/// Layer 1 off, the others on: the undecided probe catches the filter, while the
/// end-to-end forgery is still stopped by the arbiter.
#[tokio::test]
async fn with_the_filter_off_the_arbiter_still_stops_forgery() {
    layer_row(&["ignore-trailers"], &[], [Clean, Caught, Clean, Clean]).await;
}

/// Layer 3 off: any peer is served, and the peer probe catches it; the edge path holds.
#[tokio::test]
async fn the_peer_check_switched_off_is_caught() {
    layer_row(&[], &["admit-any-peer"], [Clean, Clean, Clean, Caught]).await;
}

/// Wire-level shapes through the edge: the first message split at every byte (with a
/// forged trailer each time), a second message with another key, a trailing partial
/// message, hand-made protobuf with the key field twice, pseudo-headers in trailers; and
/// for sets, the AcquireAll body split at every byte with forged trailers, two sets in one
/// call, and a ReleaseAll with forged trailers.
#[tokio::test]
async fn hostile_frames_through_the_edge_forge_nothing() {
    let s = scene(&[], &[]).await;
    assert_clean("hostile frames", s.probe_hostile_frames().await);
}

/// The same frames with the filter's trailer handling and the arbiter's header rule both
/// off: the forged trailers on the split messages and on CloseSession go through, and the
/// probe sees them.
#[tokio::test]
async fn hostile_frames_with_layers_1_and_2_off_are_caught() {
    let s = scene(&["ignore-trailers"], &["edge-headers-from-metadata"]).await;
    assert_caught(
        "hostile frames, layers 1 and 2 off",
        s.probe_hostile_frames().await,
    );
}

impl Scene {
    /// Sends the hostile shapes as the ledger workload; returns every answer that breaks
    /// the rules and everything forged in etcd.
    async fn probe_hostile_frames(&self) -> Vec<String> {
        let mut wrong = Vec::new();
        let mut c = self.edge(&self.ledger).await;
        let key = "pay/ledger/split";
        let body = grpc_frame(&OpenSessionRequest { key: key.into() }.encode_to_vec());
        for cut in 1..body.len() {
            let parts = [
                Part::Data(body[..cut].to_vec()),
                Part::Data(body[cut..].to_vec()),
                Part::Trailers(vec![("x-lock-identity".into(), OPERATOR.into())]),
            ];
            let reply = c.call("OpenSession", &[], &parts).await.unwrap();
            if !reply.ok() {
                wrong.push(format!("split at {cut}: {reply:?}"));
            }
        }

        // Two messages in one unary call: only the first, the one the edge decided, counts.
        let opened = c
            .call("OpenSession", &[], &[Part::Data(body.clone()), Part::End])
            .await
            .unwrap();
        let Ok(session) = opened.decode::<OpenSessionResponse>() else {
            wrong.push(format!("plain OpenSession: {opened:?}"));
            return wrong;
        };
        let session = session.session_id;
        let acq = |k: &str| {
            grpc_frame(
                &AcquireRequest {
                    key: k.into(),
                    session_id: session,
                    wait_millis: 0,
                    ..Default::default()
                }
                .encode_to_vec(),
            )
        };
        let mut two = acq("pay/ledger/first");
        two.extend(acq("orders/second"));
        let reply = c
            .call("Acquire", &[], &[Part::Data(two), Part::End])
            .await
            .unwrap();
        let mut etcd = self.stack.etcd_client().await.unwrap();
        let first = etcd.get("/l/pay/ledger/first", None).await.unwrap();
        match reply.decode::<AcquireResponse>() {
            Ok(g)
                if first.kvs().first().map(|kv| kv.mod_revision())
                    == FencingToken::from_u64(g.token)
                        .ok()
                        .map(|t| t.revision() as i64) => {}
            _ => wrong.push(format!(
                "two messages: not a grant of the first key: {reply:?}"
            )),
        }

        wrong.extend(self.probe_set_frames(&mut c, session).await);

        // A complete message followed by part of another.
        let mut partial = acq("pay/ledger/partial");
        partial.extend(&acq("orders/partial")[..7]);
        let _ = c
            .call("Acquire", &[], &[Part::Data(partial), Part::End])
            .await
            .unwrap();

        // Hand-made protobuf: field 1 (key) twice. Protobuf keeps the last value; the
        // filter and the arbiter decode with the same rule, so the edge judges the key that
        // is used.
        let twice = |a: &str, b: &str| {
            let mut m = Vec::new();
            for k in [a, b] {
                m.push(0x0a);
                m.push(u8::try_from(k.len()).unwrap());
                m.extend_from_slice(k.as_bytes());
            }
            m.extend([0x10]); // field 2 (session_id), varint
            let mut v = u64::try_from(session).unwrap();
            while v >= 0x80 {
                m.push((v as u8) | 0x80);
                v >>= 7;
            }
            m.push(v as u8);
            grpc_frame(&m)
        };
        for (a, b, granted) in [
            ("pay/ledger/a", "orders/hidden", false),
            ("orders/hidden", "pay/ledger/last", true),
        ] {
            let parts = [Part::Data(twice(a, b)), Part::End];
            let reply = c.call("Acquire", &[], &parts).await.unwrap();
            let right = if granted {
                reply.ok()
            } else {
                reply.reason == Some(Reason::NotGranted)
            };
            if !right {
                wrong.push(format!("key field twice ({a}, {b}): {reply:?}"));
            }
        }
        if etcd.get("/l/pay/ledger/last", None).await.unwrap().count() != 1 {
            wrong.push("the last key field was not the one granted".into());
        }

        // Pseudo-headers (and an edge header) in trailers, written frame by frame: HTTP/2
        // forbids pseudo-headers there, and Envoy's codec tears the connection down. (The
        // CloseSession stream was already admitted on its headers, which carry all it
        // needs; its upstream stream is reset with it, never completed, so the victim's
        // session survives, which `forgeries` checks.)
        let close = grpc_frame(
            &CloseSessionRequest {
                session_id: self.victim_session,
            }
            .encode_to_vec(),
        );
        for trailer in [
            (":path", "/lock.v1.Lock/CloseSession"),
            (":authority", "other"),
            ("x-lock-identity", OPERATOR),
        ] {
            let listen = self.stack.envoy.listen;
            let out = send_raw_frames(
                listen,
                &self.ledger,
                "CloseSession",
                &[],
                &close,
                &[trailer],
            )
            .await
            .unwrap();
            if trailer.0.starts_with(':') && !out.refused() {
                wrong.push(format!("{trailer:?} in trailers was served: {out:?}"));
            }
        }
        wrong.extend(self.forgeries().await);
        wrong
    }
}

impl Scene {
    /// The same shapes with sets (AcquireAll, ReleaseAll), whose keys ride in a repeated
    /// field and pass to the arbiter as `x-lock-keys`: the body split at every byte with
    /// forged trailers (the operator's identity, and on every other cut `x-lock-keys`
    /// naming the victim's key),
    /// two sets in one call, and a ReleaseAll with forged trailers. Returns what broke
    /// the rules; `forgeries` then sees anything held in another's name.
    async fn probe_set_frames(&self, c: &mut H2Client, session: i64) -> Vec<String> {
        let mut wrong = Vec::new();
        let identity = ("x-lock-identity".to_owned(), OPERATOR.to_owned());
        let victim_keys = ("x-lock-keys".to_owned(), encode_key(VICTIM_KEY));
        let forged = Part::Trailers(vec![identity.clone(), victim_keys.clone()]);
        let set = |keys: &[String]| {
            grpc_frame(
                &AcquireAllRequest {
                    keys: keys.to_vec(),
                    session_id: session,
                    wait_millis: 0,
                }
                .encode_to_vec(),
            )
        };
        let keys = |name: &str| {
            vec![
                format!("pay/ledger/{name}-a"),
                format!("pay/ledger/{name}-b"),
            ]
        };
        let len = set(&keys("set-split-00")).len();
        for cut in 1..len {
            // Keys of one length for every cut, each cut its own set.
            let body = set(&keys(&format!("set-split-{cut:02}")));
            // The identity alone on odd cuts (a set held in the operator's name, were it
            // read), with the victim's key as the set's keys on even ones.
            let trailers = if cut % 2 == 1 {
                vec![identity.clone()]
            } else {
                vec![identity.clone(), victim_keys.clone()]
            };
            let parts = [
                Part::Data(body[..cut].to_vec()),
                Part::Data(body[cut..].to_vec()),
                Part::Trailers(trailers),
            ];
            let reply = c.call("AcquireAll", &[], &parts).await.unwrap();
            if !reply.ok() {
                wrong.push(format!("set split at {cut}: {reply:?}"));
            }
        }
        // Two sets in one unary call: only the first, the one the edge decided, counts.
        let mut two = set(&keys("set-first"));
        two.extend(set(&["orders/set-second".to_owned()]));
        let reply = c
            .call("AcquireAll", &[], &[Part::Data(two), Part::End])
            .await
            .unwrap();
        let Ok(granted) = reply.decode::<AcquireAllResponse>() else {
            wrong.push(format!("two sets: not a grant of the first: {reply:?}"));
            return wrong;
        };
        if granted.keys != keys("set-first") {
            wrong.push(format!("two sets: granted {:?}", granted.keys));
        }
        // Its release, with forged trailers: it ends the ledger's own set, nothing else.
        let release = ReleaseAllRequest {
            keys: keys("set-first"),
            token: granted.token,
            session_id: session,
        };
        let parts = [
            Part::Data(grpc_frame(&release.encode_to_vec())),
            forged.clone(),
        ];
        let reply = c.call("ReleaseAll", &[], &parts).await.unwrap();
        match reply.decode::<ReleaseAllResponse>() {
            Ok(r) if r.released_keys == keys("set-first") => {}
            _ => wrong.push(format!("the set's own release: {reply:?}")),
        }
        wrong
    }
}

/// Certificates with zero, one or two URI SANs, or a foreign trust domain, through the
/// edge: what each was answered, where it differs from the rule (exactly one URI SAN, of a
/// trusted domain).
async fn uri_san_violations(s: &Scene) -> Vec<String> {
    let pki = &s.stack.pki;
    let body = grpc_frame(
        &OpenSessionRequest {
            key: "pay/ledger/sans".into(),
        }
        .encode_to_vec(),
    );
    let cases: Vec<(&str, SvidFiles, Option<Reason>)> = vec![
        ("one URI SAN", s.ledger.clone(), None),
        (
            "no URI SAN",
            pki.issue("sans-0", &[]).unwrap(),
            Some(Reason::Unauthenticated),
        ),
        (
            "granted identity first of two",
            pki.issue("sans-2a", &[LEDGER, ORDERS]).unwrap(),
            Some(Reason::Unauthenticated),
        ),
        (
            "granted identity second of two",
            pki.issue("sans-2b", &[ORDERS, LEDGER]).unwrap(),
            Some(Reason::Unauthenticated),
        ),
        (
            "foreign trust domain",
            pki.issue("sans-foreign", &["spiffe://evil.example/ns/pay/sa/ledger"])
                .unwrap(),
            Some(Reason::Unauthenticated),
        ),
    ];
    let mut wrong = Vec::new();
    for (what, svid, want) in cases {
        let mut c = s.edge(&svid).await;
        let reply: Reply = c
            .call("OpenSession", &[], &[Part::Data(body.clone()), Part::End])
            .await
            .unwrap();
        let right = match want {
            None => reply.ok(),
            Some(r) => reply.reason == Some(r),
        };
        if !right {
            wrong.push(format!("{what}: {reply:?}"));
        }
    }
    wrong
}

#[tokio::test]
async fn identities_need_exactly_one_uri_san() {
    let s = scene(&[], &[]).await;
    assert_clean("URI SANs", uri_san_violations(&s).await);
    assert_clean("URI SANs", s.forgeries().await);
}

/// The same cases with the filter taking the first URI SAN (the attribute Envoy exposes)
/// instead of requiring exactly one: caught.
#[tokio::test]
async fn the_uri_san_rule_switched_off_is_caught() {
    let s = scene(&["first-uri-san"], &[]).await;
    assert_caught("one-URI-SAN rule off", uri_san_violations(&s).await);
}

/// Keys with non-ASCII letters (DESIGN 4.1 allows them) work end to end; session ids are
/// random 63-bit numbers, not etcd's near-sequential lease ids.
#[tokio::test]
async fn non_ascii_keys_round_trip_and_session_ids_are_random() {
    let s = scene(&[], &[]).await;
    let mut ledger: LockClient<Channel> = s.stack.workload(LEDGER).await.unwrap();
    let mut ids = Vec::new();
    for key in ["pay/ledger/über", "pay/ledger/ключ", "pay/ledger/注文/1"] {
        let session = ledger
            .open_session(OpenSessionRequest { key: key.into() })
            .await
            .unwrap()
            .into_inner()
            .session_id;
        ids.push(session);
        let g = ledger
            .acquire(AcquireRequest {
                key: key.into(),
                session_id: session,
                wait_millis: 0,
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| panic!("{key}: {e:?}"))
            .into_inner();
        let mut etcd = s.stack.etcd_client().await.unwrap();
        let held = etcd.get(format!("/l/{key}"), None).await.unwrap();
        assert_eq!(held.count(), 1, "{key} held under its own name");
        let i = ledger
            .inspect(InspectRequest { key: key.into() })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(i.holder_spiffe_id, LEDGER);
        ledger
            .release(ReleaseRequest {
                key: key.into(),
                token: g.token,
                session_id: session,
                ..Default::default()
            })
            .await
            .unwrap();
    }
    for w in ids.windows(2) {
        assert!(
            w[0].abs_diff(w[1]) > 1 << 20,
            "session ids look sequential: {ids:?}"
        );
    }
    assert!(ids.iter().all(|i| *i > 0));
}
