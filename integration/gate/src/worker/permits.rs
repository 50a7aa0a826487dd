//! A worker client's semaphore round (issue 53): a permit of the generation's key of the
//! `permits: N` class, taken with `PERMIT` and held as any hold is (stalled past its TTL,
//! lost with its session, its release replayed, each as often as for other keys), but
//! longer, so that more clients than permits meet on a key and some wait. The grant's
//! permit is recorded on its acquire, and on the release and writes under its token; the
//! writes go to that permit's own fence (`<key>//<permit>` in the register and the
//! PostgreSQL fence), as a resource fences a semaphore per permit. The per-key checks
//! then hold the key to the semaphore's rules (`semaphore.rs`, `linearize/permits.rs`).

use super::{Client, Outcome};
use rand::Rng as _;

impl Client {
    pub(super) async fn permit_round(&mut self, key: &str) {
        self.permits = true;
        let wait = if self.rng.random_range(0..100) < 30 {
            0
        } else {
            self.rng.random_range(200..2000)
        };
        match self.acquire(key, wait).await {
            Outcome::Ok(token) => {
                self.pause(100, 500).await;
                self.hold(key, token).await;
            }
            Outcome::Fail(why) if why == "SESSION_EXPIRED" => self.session = None,
            Outcome::Fail(_) => self.pause(5, 30).await,
            Outcome::Unknown(_) => self.pause(50, 200).await,
        }
    }
}
