//! A worker client's set round: two or three keys of one generation taken as one set
//! (AcquireAll through the edge), a guarded write to each under the set's token, then
//! ReleaseAll. Each key's part is recorded as that key's own Acquire, Write and Release
//! (tied by the set's id), so every per-key check and the linearizability search hold a
//! set to exactly the rules a single hold keeps; the set check adds "one token for all".
//!
//! A set's refusal says nothing about any one key (one held key refuses it; the others
//! may be free), so it is recorded as `SET_<REASON>`, which the per-key model does not
//! read as "held".

use super::{Answer, CALL_TIMEOUT, Client, Outcome, classify};
use crate::history::{Kind, Phase};
use lock_config::proto::v1::{AcquireAllRequest, ReleaseAllRequest};
use rand::Rng as _;
use std::time::Duration;

impl Client {
    pub(super) async fn set_round(&mut self, keys: Vec<String>) {
        let Some(session) = self.session.as_ref().map(|s| s.id) else {
            return;
        };
        let wait = if self.rng.random_range(0..100) < 30 {
            0
        } else {
            self.rng.random_range(200..2000)
        };
        let ops = self.invoke_set(Kind::Acquire, &keys, None);
        let mut edge = self.edge.clone();
        let req = tonic::Request::new(AcquireAllRequest {
            keys: keys.clone(),
            session_id: session,
            wait_millis: wait,
        });
        let limit = CALL_TIMEOUT + Duration::from_millis(wait);
        let r = tokio::time::timeout(limit, edge.acquire_all(req)).await;
        let (token, held) = match classify(r) {
            Outcome::Ok((resp, served)) => {
                for (op, _) in &ops {
                    let answer = Answer {
                        token: Some(resp.token),
                        served: served.clone(),
                        rev: None,
                        permit: None,
                    };
                    self.complete_in_set(*op, Kind::Acquire, &Outcome::Ok(()), answer, &ops);
                }
                (resp.token, resp.keys)
            }
            Outcome::Fail(why) => {
                let outcome: Outcome<()> = Outcome::Fail(format!("SET_{why}"));
                for (op, _) in &ops {
                    self.complete_in_set(*op, Kind::Acquire, &outcome, Answer::default(), &ops);
                }
                if why == "SESSION_EXPIRED" {
                    self.session = None;
                } else {
                    self.pause(5, 30).await;
                }
                return;
            }
            Outcome::Unknown(why) => {
                let outcome: Outcome<()> = Outcome::Unknown(why);
                for (op, _) in &ops {
                    self.complete_in_set(*op, Kind::Acquire, &outcome, Answer::default(), &ops);
                }
                self.pause(50, 200).await;
                return;
            }
        };
        self.pause(50, 300).await;
        for key in &held {
            self.write(key, token).await;
        }
        self.release_set(&held, token, session).await;
    }

    async fn release_set(&mut self, keys: &[String], token: u64, session: i64) {
        let ops = self.invoke_set(Kind::Release, keys, Some(token));
        let mut edge = self.edge.clone();
        let req = tonic::Request::new(ReleaseAllRequest {
            keys: keys.to_vec(),
            token,
            session_id: session,
        });
        let r = tokio::time::timeout(CALL_TIMEOUT, edge.release_all(req)).await;
        match classify(r) {
            Outcome::Ok((resp, served)) => {
                for (op, key) in &ops {
                    // A key the release did not name had ended alone: what a Release of
                    // it alone would have been told.
                    let (outcome, rev) = if resp.released_keys.contains(key) {
                        (Outcome::Ok(()), Some(resp.released_at_revision))
                    } else {
                        (Outcome::Fail("STALE_TOKEN".into()), None)
                    };
                    let answer = Answer {
                        token: None,
                        served: served.clone(),
                        rev,
                        permit: None,
                    };
                    self.complete_in_set(*op, Kind::Release, &outcome, answer, &ops);
                }
            }
            other => {
                let outcome: Outcome<()> = match other {
                    Outcome::Fail(w) => Outcome::Fail(w),
                    Outcome::Unknown(w) => Outcome::Unknown(w),
                    Outcome::Ok(_) => Outcome::Ok(()),
                };
                for (op, _) in &ops {
                    self.complete_in_set(*op, Kind::Release, &outcome, Answer::default(), &ops);
                }
            }
        }
    }

    /// One invocation per key, tied by the first one's op id; returns (op id, key) each.
    fn invoke_set(&mut self, f: Kind, keys: &[String], token: Option<u64>) -> Vec<(u64, String)> {
        let first = self.next_op + 1;
        keys.iter()
            .map(|key| {
                self.next_op += 1;
                self.ops += 1;
                let mut e = self.event(self.next_op, Phase::Invoke, f);
                e.key = Some(key.clone());
                e.token = token;
                e.via = Some("edge-set".into());
                e.set = Some(first);
                self.rec.record(&e);
                (self.next_op, key.clone())
            })
            .collect()
    }

    fn complete_in_set(
        &self,
        op: u64,
        f: Kind,
        outcome: &Outcome<()>,
        answer: Answer,
        ops: &[(u64, String)],
    ) {
        let mut e = self.event(op, Phase::Invoke, f);
        (e.ph, e.why) = match outcome {
            Outcome::Ok(_) => (Phase::Ok, None),
            Outcome::Fail(w) => (Phase::Fail, Some(w.clone())),
            Outcome::Unknown(w) => (Phase::Info, Some(w.clone())),
        };
        e.token = answer.token;
        e.served = answer.served;
        e.rev = answer.rev;
        e.set = ops.first().map(|(first, _)| *first);
        self.rec.record(&e);
    }
}
