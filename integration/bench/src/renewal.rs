//! Renewal cost: keepalives per second reaching etcd for one session carrying 1 hold and
//! one carrying 500, with lock-client through Envoy (one renewal per TTL/3 per session).

use crate::env::Env;
use lock_integration::registry::{GATE_PREFIX, GATE_TTL, gate_id};
use std::time::Duration;

pub struct Renewal {
    pub holds: usize,
    pub keepalives_per_sec: f64,
}

pub async fn measure(env: &Env, holds: usize, window: Duration) -> anyhow::Result<Renewal> {
    let client = env.stack.lock_client(&gate_id(60 + holds % 4))?;
    let mut held = Vec::with_capacity(holds);
    for chunk in (0..holds).collect::<Vec<_>>().chunks(25) {
        let tasks: Vec<_> = chunk
            .iter()
            .map(|i| {
                let c = client.clone();
                let key = format!("{GATE_PREFIX}/renew-{holds}/{i}");
                tokio::spawn(async move { c.acquire(&key, Duration::ZERO, || {}).await })
            })
            .collect();
        for t in tasks {
            held.push(t.await??);
        }
    }
    let etcd = &env.stack.etcd;
    let before = etcd.stream_messages("LeaseKeepAlive")?;
    tokio::time::sleep(window).await;
    let renewals = etcd.stream_messages("LeaseKeepAlive")? - before;
    for h in held {
        let _ = h.release().await;
    }
    Ok(Renewal {
        holds,
        keepalives_per_sec: renewals as f64 / window.as_secs_f64(),
    })
}

/// What the class's TTL predicts: one renewal per TTL/3.
pub fn expected_per_sec() -> f64 {
    3.0 / f64::from(GATE_TTL)
}

/// Renewals reaching etcd with 1 and 500 holds on one session; returns the table.
pub async fn run(env: &Env) -> anyhow::Result<String> {
    let mut rows = Vec::new();
    for holds in [1, 500] {
        let r = measure(env, holds, Duration::from_secs(10)).await?;
        eprintln!(
            "renewal: {} holds -> {:.2} keepalives/s at etcd",
            r.holds, r.keepalives_per_sec
        );
        rows.push(r);
    }
    let mut table = format!(
        "\n| holds on one session | keepalives/s reaching etcd (expected {:.2}: one per TTL/3) |\n|---:|---:|\n",
        expected_per_sec()
    );
    for r in rows {
        table.push_str(&format!("| {} | {:.2} |\n", r.holds, r.keepalives_per_sec));
    }
    Ok(table)
}
