//! Link faults in user space: a TCP relay between two processes whose two directions can
//! each be slowed, made lossy, capped or cut while connections stay open.
//!
//! Why a relay and not `tc netem`: the machines the gate runs on have no `sch_netem` or
//! `sch_tbf` (and no iptables), so the kernel cannot shape a link here. A relay sees what
//! the application sees of a bad link, which is what the lock service reacts to:
//! - delay and jitter: each chunk read is written `delay + U(0, jitter)` later, in order
//!   (TCP never reorders what it delivers; packet reordering below TCP reaches the
//!   application as delay, which the jitter covers);
//! - loss: TCP turns a lost segment into a retransmission, so a "lost" chunk is delivered
//!   one retransmission timeout late (200 ms, doubled for each further loss of the same
//!   chunk, as the kernel's back-off does);
//! - a bandwidth cap: the writer sleeps for each chunk's share of the rate;
//! - a cut: nothing is forwarded that way (bytes wait, as unacknowledged segments do in a
//!   blackhole), nothing is refused or reset, and everything waiting is delivered on heal
//!   as TCP's retransmissions would. A one-way cut is an asymmetric partition: the side
//!   still heard keeps acting on what it hears (a commit whose answer never arrives).
//!
//! A test can also ask which link a request took: each relay counts the bytes it has read
//! going up ([`Link::up_bytes`]), delivered or held.
//!
//! Relays run on a runtime of their own, so a test blocking its own runtime (a
//! `block_in_place`, a synchronous wait) never stalls the links. Every relay listens on
//! loopback only; dropping the [`Link`] closes its listener and every connection.

use rand::{Rng as _, SeedableRng as _, rngs::StdRng};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// One direction of a link.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lane {
    pub delay: Duration,
    /// Up to this much more delay per chunk, uniformly.
    pub jitter: Duration,
    /// Chunks delivered one retransmission timeout late (0–100).
    pub loss_percent: u32,
    /// Bytes per second at most (None: unlimited).
    pub bytes_per_sec: Option<u64>,
    /// Nothing forwarded until healed.
    pub cut: bool,
}

impl Lane {
    /// A slow, lossy, narrow lane (the gate's slow link).
    pub fn slow(delay: Duration, jitter: Duration, loss_percent: u32, bytes_per_sec: u64) -> Self {
        Self {
            delay,
            jitter,
            loss_percent,
            bytes_per_sec: Some(bytes_per_sec),
            cut: false,
        }
    }

    pub fn cut() -> Self {
        Self {
            cut: true,
            ..Self::default()
        }
    }
}

/// Both directions: `up` is from the side that connects (the client) to the target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shape {
    pub up: Lane,
    pub down: Lane,
}

impl Shape {
    pub fn both(lane: Lane) -> Self {
        Self {
            up: lane,
            down: lane,
        }
    }
}

/// The first retransmission timeout (Linux's minimum RTO).
const RTO: Duration = Duration::from_millis(200);
/// Chunks read at once; a chunk is the unit delayed, lost and paced.
const CHUNK: usize = 16 * 1024;
/// Chunks in flight per direction before the relay stops reading (a full TCP window).
const IN_FLIGHT: usize = 64;

/// A relay listening on loopback and forwarding to `target` under a [`Shape`].
pub struct Link {
    /// Where the client connects instead of `target`.
    pub addr: SocketAddr,
    shape: watch::Sender<Shape>,
    accept: JoinHandle<()>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    /// Bytes read going up (towards the target), over every connection.
    up: Arc<AtomicU64>,
    /// Where new connections go (changed by [`Link::reroute`]).
    target: Arc<Mutex<SocketAddr>>,
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("link-relay")
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("the link relays' runtime: {e}"))
    })
}

impl Link {
    /// A clean link to `target` (shaped later with [`Link::set`]).
    pub fn start(target: SocketAddr) -> anyhow::Result<Self> {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let (shape, rx) = watch::channel(Shape::default());
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let rt = runtime();
        let listener = {
            let _in = rt.enter();
            TcpListener::from_std(std_listener)?
        };
        let seed = u64::from(addr.port()) << 16 | u64::from(target.port());
        let held = conns.clone();
        let up = Arc::new(AtomicU64::new(0));
        let counted = up.clone();
        let target = Arc::new(Mutex::new(target));
        let targets = target.clone();
        let accept = rt.spawn(async move {
            let mut n = 0u64;
            while let Ok((client, _)) = listener.accept().await {
                let Ok(to) = targets.lock().map(|t| *t) else {
                    return;
                };
                n += 1;
                let task = tokio::spawn(relay(client, to, rx.clone(), seed ^ n, counted.clone()));
                if let Ok(mut all) = held.lock() {
                    all.retain(|t| !t.is_finished());
                    all.push(task);
                }
            }
        });
        Ok(Self {
            addr,
            shape,
            accept,
            conns,
            up,
            target,
        })
    }

    /// Shapes both directions from now on (chunks already in flight keep their time).
    pub fn set(&self, shape: Shape) {
        self.shape.send_replace(shape);
    }

    /// Back to a clean link; whatever waited behind a cut is delivered.
    pub fn heal(&self) {
        self.set(Shape::default());
    }

    /// Bytes read going up (towards the target) so far, delivered or held by a cut.
    pub fn up_bytes(&self) -> u64 {
        self.up.load(Ordering::Relaxed)
    }

    /// Closes every connection and sends new ones to `to`: the peer replaced, as a client
    /// sees a member it was talking to go away and its reconnection land elsewhere. What a
    /// closed connection had not delivered is lost; what it had delivered stays done.
    pub fn reroute(&self, to: SocketAddr) {
        if let Ok(mut t) = self.target.lock() {
            *t = to;
        }
        if let Ok(all) = self.conns.lock() {
            for t in all.iter() {
                t.abort();
            }
        }
    }

    /// Connections relayed now.
    pub fn open_connections(&self) -> usize {
        self.conns
            .lock()
            .map(|all| all.iter().filter(|t| !t.is_finished()).count())
            .unwrap_or(0)
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.accept.abort();
        if let Ok(all) = self.conns.lock() {
            for t in all.iter() {
                t.abort();
            }
        }
    }
}

/// Which lane of the shape a pump follows.
#[derive(Clone, Copy)]
enum Way {
    Up,
    Down,
}

impl Way {
    fn lane(self, s: &Shape) -> Lane {
        match self {
            Way::Up => s.up,
            Way::Down => s.down,
        }
    }
}

async fn relay(
    client: TcpStream,
    target: SocketAddr,
    shape: watch::Receiver<Shape>,
    seed: u64,
    up_bytes: Arc<AtomicU64>,
) {
    let Ok(server) = TcpStream::connect(target).await else {
        // The target is down (a killed process): the client sees its connection close, as
        // it would see a refused one.
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = pump(cr, sw, Way::Up, shape.clone(), seed, Some(up_bytes));
    let down = pump(sr, cw, Way::Down, shape, seed.rotate_left(17), None);
    // Each direction ends on its own (a half-close is forwarded); the connection is done
    // when both are.
    let _ = tokio::join!(up, down);
}

/// Reads one direction and writes it shaped. The reader stamps each chunk with its
/// delivery time; the writer delivers in order, waiting out cuts and pacing the rate.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    way: Way,
    shape: watch::Receiver<Shape>,
    seed: u64,
    counted: Option<Arc<AtomicU64>>,
) {
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(IN_FLIGHT);
    let stamps = shape.clone();
    let reader = async move {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if let Some(c) = &counted {
                c.fetch_add(n as u64, Ordering::Relaxed);
            }
            let lane = way.lane(&stamps.borrow());
            let at = Instant::now() + lane_delay(&lane, &mut rng);
            if tx.send((at, buf[..n].to_vec())).await.is_err() {
                break;
            }
        }
        // Dropping `tx` tells the writer to forward the end of the stream.
    };
    let writer = async move {
        let mut shape = shape;
        while let Some((at, bytes)) = rx.recv().await {
            loop {
                let cut = way.lane(&shape.borrow_and_update()).cut;
                if cut {
                    if shape.changed().await.is_err() {
                        return;
                    }
                    continue;
                }
                if Instant::now() >= at {
                    break;
                }
                // Woken by the time or by a new shape (a cut that began meanwhile).
                tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
                    r = shape.changed() => if r.is_err() { return },
                }
            }
            if to.write_all(&bytes).await.is_err() {
                return;
            }
            let rate = way.lane(&shape.borrow()).bytes_per_sec;
            if let Some(rate) = rate.filter(|r| *r > 0) {
                let secs = bytes.len() as f64 / rate as f64;
                tokio::time::sleep(Duration::from_secs_f64(secs)).await;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reader, writer);
}

/// The delay one chunk gets on `lane`: the base, the jitter, and a back-off per loss.
fn lane_delay(lane: &Lane, rng: &mut StdRng) -> Duration {
    let mut d = lane.delay;
    if !lane.jitter.is_zero() {
        d += lane.jitter.mul_f64(rng.random::<f64>());
    }
    let mut rto = RTO;
    // At most three retransmissions per chunk: a lane is lossy, not dead (a cut is that).
    for _ in 0..3 {
        if lane.loss_percent == 0 || rng.random_range(0..100) >= lane.loss_percent {
            break;
        }
        d += rto;
        rto *= 2;
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    async fn round_trip(s: &mut TcpStream, msg: &[u8]) -> Duration {
        let t = std::time::Instant::now();
        s.write_all(msg).await.unwrap();
        let mut got = vec![0u8; msg.len()];
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(got, msg, "the relay changed the bytes");
        t.elapsed()
    }

    #[tokio::test]
    async fn delays_cuts_one_way_and_heals_without_losing_a_byte() {
        let link = Link::start(echo().await).unwrap();
        let mut s = TcpStream::connect(link.addr).await.unwrap();
        assert!(round_trip(&mut s, b"clean").await < Duration::from_millis(150));

        link.set(Shape::both(Lane {
            delay: Duration::from_millis(150),
            ..Lane::default()
        }));
        let slow = round_trip(&mut s, b"slow").await;
        assert!(
            slow >= Duration::from_millis(300),
            "two lanes of 150 ms: {slow:?}"
        );

        // Only the answer's direction cut: the request arrives, the echo waits.
        link.set(Shape {
            up: Lane::default(),
            down: Lane::cut(),
        });
        s.write_all(b"held").await.unwrap();
        let mut got = [0u8; 4];
        let waited = tokio::time::timeout(Duration::from_millis(400), s.read_exact(&mut got)).await;
        assert!(waited.is_err(), "a cut lane delivered");
        link.heal();
        tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut got))
            .await
            .expect("healed, the held bytes arrive")
            .unwrap();
        assert_eq!(&got, b"held");
        assert_eq!(link.open_connections(), 1);
    }

    #[test]
    fn loss_is_a_retransmission_late_and_bounded() {
        let mut rng = StdRng::seed_from_u64(1);
        let lossy = Lane {
            loss_percent: 100,
            ..Lane::default()
        };
        // Three back-offs at most: 200 + 400 + 800 ms.
        assert_eq!(lane_delay(&lossy, &mut rng), Duration::from_millis(1400));
        let clean = Lane::default();
        assert_eq!(lane_delay(&clean, &mut rng), Duration::ZERO);
        let jittery = Lane {
            delay: Duration::from_millis(50),
            jitter: Duration::from_millis(350),
            ..Lane::default()
        };
        for _ in 0..100 {
            let d = lane_delay(&jittery, &mut rng);
            assert!(d >= Duration::from_millis(50) && d <= Duration::from_millis(400));
        }
    }
}
