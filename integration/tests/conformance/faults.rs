//! The steps the conductor makes itself: checks on what drivers reported, and faults on
//! the stack and the driver processes.

use super::run::{CALL_PATIENCE, Run};
use super::scenario::Step;
use anyhow::{Context as _, bail, ensure};
use lock_integration::link::{Lane, Shape};
use lock_integration::pki::LEDGER;
use rustix::process::Signal;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::time::Instant;

impl Run<'_> {
    pub async fn check_or_fault(&mut self, s: &Step) -> anyhow::Result<()> {
        match s.action.as_str() {
            "state" => {
                let v = self.state(s.need(&s.hold, "hold")?).await?;
                if let Some(want) = s.can_start {
                    ensure!(
                        v["can_start"] == json!(want),
                        "can_start is not {want}: {v}"
                    );
                }
                if let Some(want) = s.fenced {
                    ensure!(v["fenced"] == json!(want), "fenced is not {want}: {v}");
                }
                Ok(())
            }
            "remaining_at_most" => {
                let hold = s.need(&s.hold, "hold")?.clone();
                let most = *s.need(&s.ms, "ms")?;
                let until = Instant::now() + Duration::from_millis(*s.need(&s.for_ms, "for_ms")?);
                let (mut max, mut reads) = (0u64, 0);
                while Instant::now() < until {
                    let v = self.state(&hold).await?;
                    let r = v["remaining_ms"]
                        .as_u64()
                        .with_context(|| format!("no integer `remaining_ms`: {v}"))?;
                    max = max.max(r);
                    reads += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                eprintln!("  remaining_ms: at most {max} over {reads} reads (bound {most})");
                ensure!(
                    max <= most,
                    "the hold showed {max} ms left, more than {most}: its deadline does not count from the send time of the last answered keepalive"
                );
                Ok(())
            }
            "fenced" => {
                let hold = s.need(&s.hold, "hold")?;
                let within = Duration::from_millis(*s.need(&s.within_ms, "within_ms")?);
                let from = self.prev_end;
                let at = self
                    .wait_fenced(hold, within + Duration::from_secs(10))
                    .await
                    .with_context(|| format!("`{hold}` was never fenced"))?;
                let after = at.saturating_duration_since(from);
                eprintln!("  {hold} fenced {after:?} after the step before");
                ensure!(
                    after <= within,
                    "`{hold}` was fenced {after:?} after the step before, later than {within:?}"
                );
                Ok(())
            }
            "not_fenced" => {
                let hold = s.need(&s.hold, "hold")?;
                ensure!(self.fenced_at(hold).is_none(), "`{hold}` was fenced");
                Ok(())
            }
            "same_token" | "token_order" => {
                let (a, b) = (s.need(&s.first, "first")?, s.need(&s.then, "then")?);
                let ta = *self
                    .tokens
                    .get(a)
                    .with_context(|| format!("no token for `{a}`"))?;
                let tb = *self
                    .tokens
                    .get(b)
                    .with_context(|| format!("no token for `{b}`"))?;
                if s.action == "same_token" {
                    ensure!(ta == tb, "`{a}` and `{b}` have different tokens");
                } else {
                    ensure!(
                        ta < tb,
                        "the token of `{b}` is not greater than that of `{a}`"
                    );
                }
                Ok(())
            }
            "observed" => self.check_observed(s).await,
            "link" => {
                let p = s.need(&s.process, "process")?;
                let link = self
                    .relays
                    .get(p)
                    .with_context(|| format!("process `{p}` has no relay (relay: true)"))?;
                let shape = match s.need(&s.shape, "shape")?.as_str() {
                    "clean" => Shape::default(),
                    "cut" => Shape::both(Lane::cut()),
                    "slow_answers" => Shape {
                        up: Lane::default(),
                        down: Lane {
                            delay: Duration::from_millis(*s.need(&s.ms, "ms")?),
                            ..Lane::default()
                        },
                    },
                    other => bail!("unknown link shape `{other}`"),
                };
                link.set(shape);
                Ok(())
            }
            "quorum" => match s.need(&s.quorum, "action")?.as_str() {
                "lose" => self.lose_quorum().await,
                "restore" => self.restore_quorum().await,
                other => bail!("unknown quorum action `{other}`"),
            },
            "restart_arbiters" => {
                for a in &mut self.stack.arbiters {
                    a.restart()?;
                }
                Ok(())
            }
            "freeze" => self.signal(s, Signal::STOP),
            "thaw" => self.signal(s, Signal::CONT),
            "kill" => {
                let p = s.need(&s.process, "process")?.clone();
                let mut d = self
                    .procs
                    .remove(&p)
                    .with_context(|| format!("process `{p}` is not running"))?;
                d.kill().await;
                Ok(())
            }
            "start" => {
                let p = s.need(&s.process, "process")?.clone();
                ensure!(!self.procs.contains_key(&p), "process `{p}` is running");
                self.start(&p)
            }
            "fence_write" => self.fence_write(s).await,
            "sleep" => {
                tokio::time::sleep(Duration::from_millis(*s.need(&s.ms, "ms")?)).await;
                Ok(())
            }
            other => bail!("unknown step `{other}`"),
        }
    }

    async fn state(&mut self, hold: &str) -> anyhow::Result<Value> {
        let p = self.proc_of_hold(hold)?;
        let (_, v) = self
            .proc_mut(&p)?
            .call("state", json!({"hold": hold}), CALL_PATIENCE)
            .await?;
        ensure!(v["ok"] == json!(true), "state of `{hold}` refused: {v}");
        Ok(v)
    }

    fn signal(&mut self, s: &Step, sig: Signal) -> anyhow::Result<()> {
        let p = s.need(&s.process, "process")?.clone();
        self.proc_mut(&p)?.signal(sig)
    }

    async fn check_observed(&mut self, s: &Step) -> anyhow::Result<()> {
        let obs = s.need(&s.obs, "obs")?.clone();
        let at_least = *s.need(&s.at_least, "at_least")?;
        let within = Duration::from_millis(*s.need(&s.within_ms, "within_ms")?);
        let (want_held, want_kind) = (s.held, s.kind.clone());
        let d = self.obs_driver(&obs)?;
        let o = obs.clone();
        // Enough events, and the last as the step says (a resumed stream may repeat the
        // state it resumed with as a `current`).
        let found = super::driver::wait_for(&d.inbox, &d.said, within, move |i| {
            let evs: Vec<&Value> = i
                .events
                .iter()
                .map(|(_, e)| e)
                .filter(|e| e["event"] == json!("observed") && e["obs"] == json!(o))
                .collect();
            let last = evs.last()?;
            let held_ok = want_held.is_none_or(|h| last["held"] == json!(h));
            let kind_ok = want_kind.as_ref().is_none_or(|k| last["kind"] == json!(k));
            (evs.len() >= at_least && held_ok && kind_ok).then_some(())
        })
        .await;
        let evs = self.observed(&obs);
        if found.is_none() {
            bail!(
                "`{obs}`: wanted {at_least} changes (last held {:?}, kind {:?}) within {within:?}; got {evs:?}",
                s.held,
                s.kind
            );
        }
        let mut last = i64::MIN;
        for e in evs.iter().filter(|e| e["event"] == json!("observed")) {
            let r: i64 = e["revision"]
                .as_str()
                .context("`revision` is not a decimal string")?
                .parse()?;
            ensure!(r >= last, "`{obs}`: revisions went back: {evs:?}");
            last = r;
        }
        Ok(())
    }

    async fn lose_quorum(&mut self) -> anyhow::Result<()> {
        ensure!(self.stack.etcd_peers.len() == 2, "needs: [quorum]");
        for m in &mut self.stack.etcd_peers {
            m.kill();
        }
        // Until the survivor has no leader: before that a leader that has not noticed
        // still appends proposals (quorum_loss.rs says why).
        let url = self.stack.etcd.client_url.clone();
        let tls = self.stack.etcd.pki.tls("root")?;
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let opts = etcd_client::ConnectOptions::new()
                .with_timeout(Duration::from_millis(500))
                .with_tls(tls.clone());
            let leader = match etcd_client::Client::connect([url.clone()], Some(opts)).await {
                Ok(mut c) => c.status().await.map(|s| s.leader()).unwrap_or(0),
                Err(_) => 0,
            };
            if leader == 0 {
                return Ok(());
            }
            ensure!(
                Instant::now() < until,
                "the survivor kept a leader for 30 s"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn restore_quorum(&mut self) -> anyhow::Result<()> {
        for m in &mut self.stack.etcd_peers {
            m.restart()?;
        }
        // Back when the service grants again, not when etcd has a leader: the arbiters'
        // connections to the returned members come back on their own schedule. Keys of
        // eight rings' worth reach both arbiters through the edge.
        // One good round is not enough: a member that returns can still cost a leader
        // change or a lagging read a moment later (the fresh-clone run saw the next
        // scenario's first acquire answered NO_QUORUM). Three rounds in a row, a second
        // apart, every key granted.
        let mut probe = self.stack.workload(LEDGER).await?;
        let until = Instant::now() + Duration::from_secs(90);
        let (mut good, mut round) = (0, 0);
        while good < 3 {
            round += 1;
            let mut failed = None;
            for i in 0..8 {
                let key = format!("pay/ledger/probe-{}-{round}-{i}", self.run);
                if let Err(e) = grant_and_release(&mut probe, &key).await {
                    failed = Some(e);
                    break;
                }
            }
            match failed {
                None => good += 1,
                Some(e) => {
                    good = 0;
                    ensure!(
                        Instant::now() < until,
                        "the service does not grant steadily 90 s after the members returned: {e:#}"
                    );
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        Ok(())
    }

    /// The guarded resource's conditional write: applied only with a token greater than
    /// every token written before (`fence < token`), as at-the-resource.md shows.
    async fn fence_write(&mut self, s: &Step) -> anyhow::Result<()> {
        let hold = s.need(&s.hold, "hold")?;
        let db = self.pg.context("needs: [postgres]")?;
        let key = self
            .hold_key
            .get(hold)
            .with_context(|| format!("no hold `{hold}`"))?;
        let token = self
            .tokens
            .get(hold)
            .with_context(|| format!("no token for `{hold}`"))?;
        db.execute(
            "INSERT INTO fenced (key, fence) VALUES ($1, 0) ON CONFLICT (key) DO NOTHING",
            &[key],
        )
        .await?;
        let rows = db
            .execute(
                "UPDATE fenced SET fence = $2::text::numeric WHERE key = $1 AND fence < $2::text::numeric",
                &[key, &token.to_string()],
            )
            .await?;
        let got = if rows == 1 { "applied" } else { "refused" };
        let want = s.need(&s.expect, "expect")?;
        ensure!(
            got == want,
            "the write with `{hold}`'s token was {got}, not {want}"
        );
        Ok(())
    }
}

/// One raw grant and release of `key` on a fresh session (the quorum's return probe).
async fn grant_and_release(c: &mut lock_integration::Client, key: &str) -> anyhow::Result<()> {
    use lock_config::proto::v1::{AcquireRequest, ReleaseRequest};
    let session_id = lock_integration::open_session(c, key).await?;
    let token = c
        .acquire(AcquireRequest {
            key: key.into(),
            session_id,
            wait_millis: 0,
            ..Default::default()
        })
        .await?
        .into_inner()
        .token;
    c.release(ReleaseRequest {
        key: key.into(),
        token,
        ..Default::default()
    })
    .await?;
    Ok(())
}
