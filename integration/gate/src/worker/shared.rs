//! A worker client's shared round (issue 35): a key of the `shared: true` class, taken
//! `SHARED` seven times in ten (a reader: a guarded read of the register under its token)
//! and `EXCLUSIVE` otherwise (a writer: a guarded write). Readers of one key overlap one
//! another and wait for writers; a writer waits for every reader and, once it has marked
//! itself waiting, stops new readers. A share of holders stall past their session's TTL
//! before their read or write, as every other hold may: a reader frozen while a writer
//! came and went resumes to be refused by the register.
//!
//! Every call is recorded as the single-key ones are (acquire, read or write, release),
//! with `shared` on a reader's acquire and release, so the per-key checks hold shared
//! keys to the reader–writer rules (`checker::shared_rules`).

use super::{CALL_TIMEOUT, Client, Outcome};
use crate::history::Kind;
use rand::Rng as _;

impl Client {
    pub(super) async fn shared_round(&mut self, key: &str) {
        self.shared = self.rng.random_range(0..100) < 70;
        let wait = if self.rng.random_range(0..100) < 30 {
            0
        } else {
            self.rng.random_range(200..2000)
        };
        let token = match self.acquire(key, wait).await {
            Outcome::Ok(token) => token,
            Outcome::Fail(why) if why == "SESSION_EXPIRED" => {
                self.session = None;
                return;
            }
            Outcome::Fail(_) => return self.pause(5, 30).await,
            Outcome::Unknown(_) => return self.pause(50, 200).await,
        };
        // Readers hold a little longer than the other rounds' holders, so that they meet.
        self.pause(100, 500).await;
        if self.rng.random_range(0..100) < self.plan.stall_percent {
            self.stall(key).await;
        }
        if self.shared {
            self.read_register(key, token).await;
        } else {
            self.write(key, token).await;
        }
        self.release(key, token).await;
    }

    /// A reader's guarded read: served only under a token at least the last write's.
    async fn read_register(&mut self, key: &str, token: u64) {
        let op = self.invoke(Kind::Read, Some(key), Some(token), None);
        let outcome = match tokio::time::timeout(CALL_TIMEOUT, self.register.read(key, token)).await
        {
            Ok(Ok(true)) => Outcome::Ok(()),
            Ok(Ok(false)) => Outcome::Fail("STALE".into()),
            Ok(Err(e)) => Outcome::Unknown(e.to_string()),
            Err(_) => Outcome::Unknown("timeout".into()),
        };
        self.complete(op, Kind::Read, &outcome, super::Answer::default());
    }
}
